package dashboards_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/internal/dashboards"
	"github.com/trimtab/trimtab/proxy"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
	"github.com/trimtab/trimtab/sim/fakeserver"
)

const dashboardPath = "../../" + dashboards.Path

// targetLabels are added by Prometheus when it scrapes, not by the
// exporter.
var targetLabels = []string{"instance", "job"}

// dashboard is the part of Grafana's dashboard JSON the tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name       string      `json:"name"`
			Expr       string      `json:"expr"`
			Datasource *datasource `json:"datasource"`
		} `json:"list"`
	} `json:"annotations"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *datasource              `json:"datasource"`
	GridPos    struct{ X, Y, W, H int } `json:"gridPos"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
}

func load(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

func loadQueries(t *testing.T) []dashboards.Query {
	t.Helper()
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := dashboards.Queries(data, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

func TestPromQL(t *testing.T) {
	data := []byte(`{
	  "panels": [{"title": "P", "targets": [
	    {"refId": "A", "expr": "sum(rate(trimtab_x_total{instance=~\"$instance\", e=~\"${endpoint}\"}[$__rate_interval]))"},
	    {"refId": "B", "expr": "max(trimtab_y)"}]}],
	  "annotations": {"list": [{"name": "N", "expr": "increase(trimtab_z_total[1m]) > 0"}, {"name": "builtin"}]},
	  "templating": {"list": [
	    {"name": "DS_PROMETHEUS", "type": "datasource", "query": "prometheus"},
	    {"name": "instance", "type": "query", "query": {"query": "label_values(trimtab_y, instance)"}},
	    {"name": "old", "type": "query", "query": "label_values(trimtab_y{job=\"a\"}, job)"}]}
	}`)
	qs, err := dashboards.Queries(data, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []dashboards.Query{
		// 90 s is a whole number of seconds but not of minutes.
		{`panel "P" query A`, `sum(rate(trimtab_x_total{instance=~"$instance", e=~"${endpoint}"}[$__rate_interval]))`,
			`sum(rate(trimtab_x_total{instance=~".*", e=~".*"}[90s]))`},
		{`panel "P" query B`, `max(trimtab_y)`, `max(trimtab_y)`},
		{`annotation "N"`, `increase(trimtab_z_total[1m]) > 0`, `increase(trimtab_z_total[1m]) > 0`},
		{`variable "instance"`, `label_values(trimtab_y, instance)`, `count by (instance) (trimtab_y)`},
		{`variable "old"`, `label_values(trimtab_y{job="a"}, job)`, `count by (job) (trimtab_y{job="a"})`},
	}
	if len(qs) != len(want) {
		t.Fatalf("got %d queries %+v, want %d", len(qs), qs, len(want))
	}
	for i := range want {
		if qs[i] != want[i] {
			t.Errorf("query %d = %+v\nwant %+v", i, qs[i], want[i])
		}
	}
	if _, err := dashboards.Queries([]byte(`{"panels": 3}`), time.Minute); err == nil {
		t.Error("a malformed dashboard parsed")
	}
}

// TestDashboardShape: what Grafana needs to load the dashboard anywhere.
func TestDashboardShape(t *testing.T) {
	d := load(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q title %q: both are required", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 || d.SchemaVersion > 41 {
		t.Errorf("schemaVersion %d, want a current one (~39)", d.SchemaVersion)
	}
	hasDS := slices.ContainsFunc(d.Templating.List, func(v struct {
		Name  string          `json:"name"`
		Type  string          `json:"type"`
		Query json.RawMessage `json:"query"`
	}) bool {
		return v.Name == "DS_PROMETHEUS" && v.Type == "datasource"
	})
	if !hasDS {
		t.Error("no datasource variable DS_PROMETHEUS")
	}
	want := datasource{Type: "prometheus", UID: "${DS_PROMETHEUS}"}
	ids := map[int]string{}
	// cells[y][x] names the panel covering grid cell (x, y).
	cells := map[[2]int]string{}
	panels := 0
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel %q reuses id %d of %q", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q gridPos %+v is outside the 24-column grid", p.Title, g)
		}
		for y := g.Y; y < g.Y+g.H; y++ {
			for x := g.X; x < g.X+g.W; x++ {
				if other, taken := cells[[2]int{x, y}]; taken {
					t.Errorf("panel %q overlaps %q at (%d,%d)", p.Title, other, x, y)
					x, y = g.X+g.W, g.Y+g.H // one report per pair
				} else {
					cells[[2]int{x, y}] = p.Title
				}
			}
		}
		if p.Type == "row" {
			continue
		}
		panels++
		if p.Datasource == nil || *p.Datasource != want {
			t.Errorf("panel %q datasource %+v, want %+v", p.Title, p.Datasource, want)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: query %q with refId %q (empty or repeated)", p.Title, tg.Expr, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || *tg.Datasource != want {
				t.Errorf("panel %q query %s datasource %+v, want %+v", p.Title, tg.RefID, tg.Datasource, want)
			}
		}
	}
	if panels < 15 {
		t.Errorf("%d panels; the issue asks for weights, signal, mode, picks, TTFT, prefix hit ratio, staleness at least", panels)
	}
}

// series is a metric name with the label matchers a query applies to it.
type series struct {
	name   string
	labels []string
}

var (
	stringLit  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	rangeSel   = regexp.MustCompile(`\[[^\]]*\]`)
	grouping   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	selector   = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// promqlWords are PromQL functions, aggregations and keywords (and
	// Grafana's label_values) that may appear in the dashboard's queries.
	promqlWords = map[string]bool{
		"sum": true, "max": true, "min": true, "avg": true, "count": true, "rate": true, "irate": true,
		"increase": true, "delta": true, "changes": true, "histogram_quantile": true, "label_replace": true,
		"scalar": true, "vector": true, "clamp_min": true, "clamp_max": true, "abs": true, "topk": true,
		"bottomk": true, "quantile": true, "max_over_time": true, "min_over_time": true, "avg_over_time": true,
		"or": true, "and": true, "unless": true, "bool": true, "offset": true, "label_values": true,
		"time": true, "absent": true,
	}
)

// labelValues is Grafana's variable query label_values(metric, label).
var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// parseQuery extracts the metric names a PromQL expression reads, with the
// labels it matches on, and reports identifiers that are neither. Grafana's
// label_values(metric, label) reads label from metric.
func parseQuery(expr string) (out []series, unknown []string) {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		out, unknown = parseQuery(m[1])
		for i := range out {
			out[i].labels = append(out[i].labels, m[2])
		}
		return out, unknown
	}
	// Selectors first, while their matchers are intact.
	for _, m := range selector.FindAllStringSubmatch(expr, -1) {
		var labels []string
		for _, lm := range matcher.FindAllStringSubmatch(m[2], -1) {
			labels = append(labels, lm[1])
		}
		if m[1] != "" && !promqlWords[m[1]] {
			out = append(out, series{name: m[1], labels: labels})
		}
	}
	rest := selector.ReplaceAllStringFunc(expr, func(s string) string {
		return s[:strings.IndexByte(s, '{')] + " "
	})
	rest = stringLit.ReplaceAllString(rest, " ")
	rest = rangeSel.ReplaceAllString(rest, " ")
	rest = grouping.ReplaceAllString(rest, " ")
	seen := map[string]bool{}
	for _, s := range out {
		seen[s.name] = true
	}
	for _, id := range identifier.FindAllString(rest, -1) {
		switch {
		case promqlWords[id] || seen[id]:
		case strings.HasPrefix(id, "trimtab_") || strings.HasPrefix(id, "vllm:"):
			out = append(out, series{name: id})
			seen[id] = true
		default:
			unknown = append(unknown, id)
		}
	}
	return out, unknown
}

func TestParseQuery(t *testing.T) {
	tests := []struct {
		expr    string
		want    []string // name[label,label]
		unknown []string
	}{
		{`max(trimtab_detector_signal_ratio{instance=~"$instance"})`, []string{"trimtab_detector_signal_ratio[instance]"}, nil},
		{`sum by (le, endpoint) (rate(trimtab_proxy_ttfb_seconds_bucket{endpoint!="none", code=~"2.."}[$__rate_interval]))`,
			[]string{"trimtab_proxy_ttfb_seconds_bucket[endpoint code]"}, nil},
		{`sum(rate(vllm:prefix_cache_hits_total[5m])) / scalar(sum(trimtab_x))`, []string{"vllm:prefix_cache_hits_total[]", "trimtab_x[]"}, nil},
		{`label_replace(rate(trimtab_a_total[1m]), "path", "proxy", "", "") or foo_bar`, []string{"trimtab_a_total[]"}, []string{"foo_bar"}},
		{`label_values(trimtab_scheduler_inflight_requests, endpoint)`, []string{"trimtab_scheduler_inflight_requests[endpoint]"}, nil},
		{`label_values(trimtab_x{job="a"}, instance)`, []string{"trimtab_x[job instance]"}, nil},
	}
	for _, tt := range tests {
		got, unknown := parseQuery(tt.expr)
		var names []string
		for _, s := range got {
			names = append(names, s.name+"["+strings.Join(s.labels, " ")+"]")
		}
		if !slices.Equal(names, tt.want) || !slices.Equal(unknown, tt.unknown) {
			t.Errorf("parseQuery(%s) = %v, unknown %v; want %v, %v", tt.expr, names, unknown, tt.want, tt.unknown)
		}
	}
}

// recorder is a prometheus.Registerer that keeps what components register,
// so their descriptors — every metric name and label, including vectors
// that have no child yet — can be listed.
type recorder struct {
	reg        *prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// descRE reads a prometheus.Desc's String(): client_golang has no
// accessor for the name and labels of a Desc.
var descRE = regexp.MustCompile(`fqName: "([^"]+)".*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}`)

// metrics lists name → labels for everything registered.
func (r *recorder) metrics(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, c := range r.collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read descriptor %s", d)
			}
			var labels []string
			for _, kv := range strings.Split(m[2], ",") {
				if k, _, ok := strings.Cut(kv, "="); ok {
					labels = append(labels, k)
				}
			}
			for _, l := range strings.Split(m[3], ",") {
				if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
					labels = append(labels, l)
				}
			}
			out[m[1]] = labels
		}
	}
	return out
}

// allScorers is a profile with every in-tree scorer, so every scorer's
// metrics are registered.
const allScorers = `
scorers:
  - {type: prefix, weight: 3}
  - {type: queue, weight: 2}
  - {type: kvcache, weight: 2}
  - {type: inflight, weight: 1}
  - {type: session, weight: 1}
  - {type: lora, weight: 1}
`

// registered builds trimtab's components on one registry, the way serve
// wires them, and returns every metric they register with its labels.
// When cmd exposes its registry, this list should come from there.
func registered(t *testing.T) map[string][]string {
	t.Helper()
	rec := &recorder{reg: prometheus.NewRegistry()}
	prof, err := configs.Parse([]byte(allScorers))
	if err != nil {
		t.Fatal(err)
	}
	sched, err := prof.BuildScheduler(scorers.InTree(), scheduler.Deps{Registerer: rec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := control.New(control.DefaultConfig(), sched, control.Deps{Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	fc := fleet.DefaultConfig()
	fc.Endpoints.File = "endpoints.yaml" // read only by Run
	if _, err := fleet.New(fc, fleet.Deps{Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	pc := proxy.DefaultConfig()
	pdeps := proxy.Deps{Scheduler: sched, View: sched, Registerer: rec}
	if _, err := proxy.NewHTTP(pc, pdeps); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.NewExtProc(pc, pdeps); err != nil {
		t.Fatal(err)
	}
	return rec.metrics(t)
}

// modelServer returns the metric names and labels a vLLM server exports,
// read from the simulator's vLLM-compatible fake server.
func modelServer(t *testing.T) map[string][]string {
	t.Helper()
	s, err := fakeserver.New(fakeserver.DefaultConfig(), fakeserver.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(w.Body)
	if err != nil {
		t.Fatalf("fake server exposition: %v", err)
	}
	out := map[string][]string{}
	for name, f := range fams {
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		out[name] = labels
	}
	return out
}

// lookup finds name among known, allowing the _bucket, _sum and _count
// series of a histogram.
func lookup(known map[string][]string, name string) ([]string, bool) {
	if l, ok := known[name]; ok {
		return l, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if l, ok := known[base]; ok {
				if suf == "_bucket" {
					l = append(slices.Clone(l), "le")
				}
				return l, true
			}
		}
	}
	return nil, false
}

// TestDashboardMetricsExist: every metric the dashboard's PromQL reads is
// registered by trimtab's components (trimtab_*) or exported by vLLM
// (vllm:*), and every label it matches on exists on that metric.
func TestDashboardMetricsExist(t *testing.T) {
	trimtab := registered(t)
	vllm := modelServer(t)
	used := map[string]bool{}
	n := 0
	for _, q := range loadQueries(t) {
		ss, unknown := parseQuery(q.Expr)
		for _, u := range unknown {
			t.Errorf("%s: %q is neither a PromQL word nor a trimtab_ or vllm: metric: %s", q.Where, u, q.Expr)
		}
		if len(ss) == 0 {
			t.Errorf("%s reads no metric: %s", q.Where, q.Expr)
		}
		for _, s := range ss {
			n++
			known := trimtab
			if strings.HasPrefix(s.name, "vllm:") {
				known = vllm
			}
			labels, ok := lookup(known, s.name)
			if !ok {
				t.Errorf("%s: metric %s is not registered by any component", q.Where, s.name)
				continue
			}
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(s.name, "_bucket"), "_sum"), "_count")] = true
			for _, l := range s.labels {
				if !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
					t.Errorf("%s: %s has no label %q (it has %v)", q.Where, s.name, l, labels)
				}
			}
		}
	}
	if n < 30 {
		t.Errorf("checked %d metric references; the parser is missing queries", n)
	}
	var unused []string
	for name := range trimtab {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	t.Logf("%d trimtab metrics not on the dashboard: %v", len(unused), unused)
}
