package dashboards

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// Path is the Grafana dashboard, relative to the module root.
const Path = "docs/dashboards/trimtab.json"

// Query is one PromQL expression of a dashboard.
type Query struct {
	// Where names it: `panel "Mode" query A`, `annotation "…"`,
	// `variable "instance"`.
	Where string
	// Expr is the expression as the dashboard has it, with Grafana's
	// variables and, for variables, its label_values(metric, label) form.
	Expr string
	// PromQL is Expr as plain PromQL that a Prometheus server's
	// /api/v1/query accepts: $__rate_interval and $__interval replaced by
	// the given interval, every other $var and ${var} by ".*" (the
	// dashboard's "All"), and label_values(m, l) rewritten as
	// count by (l) (m), which has data exactly when the variable has values.
	PromQL string
}

// dashboard is the part of Grafana's JSON that holds queries.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Annotations struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

var (
	rateVar     = regexp.MustCompile(`\$(__rate_interval|__interval|\{__rate_interval\}|\{__interval\})`)
	otherVar    = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`)
	labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)
)

// Queries returns every query of the dashboard JSON in data: panel
// targets, annotation queries and query variables, in that order, with
// their PromQL form for a range or rate interval of rate.
func Queries(data []byte, rate time.Duration) ([]Query, error) {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	var qs []Query
	add := func(where, expr string) {
		qs = append(qs, Query{Where: where, Expr: expr, PromQL: promQL(expr, rate)})
	}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			add(fmt.Sprintf("panel %q query %s", p.Title, t.RefID), t.Expr)
		}
	}
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			add(fmt.Sprintf("annotation %q", a.Name), a.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			// Older dashboards store the query as a plain string.
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				return nil, fmt.Errorf("dashboard: variable %q: query is neither an object nor a string", v.Name)
			}
		}
		add(fmt.Sprintf("variable %q", v.Name), q.Query)
	}
	return qs, nil
}

func promQL(expr string, rate time.Duration) string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		expr = "count by (" + m[2] + ") (" + m[1] + ")"
	}
	expr = rateVar.ReplaceAllString(expr, model(rate))
	return otherVar.ReplaceAllString(expr, ".*")
}

// model formats d as a Prometheus duration: "1m", "15s" or "250ms"
// (sub-millisecond parts are dropped).
func model(d time.Duration) string {
	switch {
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d >= time.Second && d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}
