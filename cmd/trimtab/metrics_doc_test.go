package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/replica"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/metrics.md from the registry")

const metricsDoc = "../../docs/metrics.md"

// metricInfo is one metric family as the reference lists it.
type metricInfo struct {
	name, typ, help string
	labels          []string
}

var descRE = regexp.MustCompile(`fqName: "([^"]*)", help: "((?:[^"\\]|\\.)*)",(?: unit: "[^"]*",)? constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}`)

// registeredMetrics lists every metric family a running serve registers,
// from the collectors' descriptions (so families with no samples yet are
// listed too), typed from a gather where samples exist.
func registeredMetrics(t *testing.T, svc *service, rec *recordingRegisterer) []metricInfo {
	t.Helper()
	types := map[string]string{}
	mfs, err := svc.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		types[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	cols := rec.collectors()
	seen := map[string]bool{}
	var out []metricInfo
	for _, c := range cols {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read descriptor %s", d)
			}
			if seen[m[1]] {
				continue
			}
			seen[m[1]] = true
			info := metricInfo{name: m[1], help: strings.ReplaceAll(m[2], `\"`, `"`), typ: types[m[1]]}
			if info.typ == "" {
				info.typ = typeOf(c)
			}
			for _, l := range strings.Split(m[4], ",") {
				if l = strings.TrimSpace(l); l != "" {
					info.labels = append(info.labels, l)
				}
			}
			for _, l := range strings.Split(m[3], ",") {
				if k, _, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
					info.labels = append(info.labels, k)
				}
			}
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b metricInfo) int { return strings.Compare(a.name, b.name) })
	return out
}

func typeOf(c prometheus.Collector) string {
	switch c.(type) {
	case prometheus.Counter, *prometheus.CounterVec:
		return "counter"
	case prometheus.Histogram, *prometheus.HistogramVec:
		return "histogram"
	case prometheus.Summary, *prometheus.SummaryVec:
		return "summary"
	}
	return "gauge"
}

func renderMetricsDoc(ms []metricInfo) string {
	var b strings.Builder
	b.WriteString("# Metrics reference\n\n")
	b.WriteString("Every metric a running `trimtab serve` registers (`trimtab_replica_*` with replica sync on), generated from its registry by\n")
	b.WriteString("`go test ./cmd/trimtab -run TestMetricsReference -update-docs` (a test fails when this file\n")
	b.WriteString("and the registry disagree). Names follow `trimtab_<component>_<what>_<unit>`; the Go runtime\n")
	b.WriteString("and process collectors (`go_*`, `process_*`) are registered too and not listed.\n\n")
	b.WriteString("| name | type | labels | meaning |\n|---|---|---|---|\n")
	for _, m := range ms {
		labels := "—"
		if len(m.labels) > 0 {
			labels = "`" + strings.Join(m.labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.name, m.typ, labels, strings.ReplaceAll(m.help, "|", `\|`))
	}
	return b.String()
}

func TestMetricsReference(t *testing.T) {
	addrs := startFakeFleet(t, 2)
	rec := &recordingRegisterer{}
	ts := startService(t, addrs, true, func(o *serviceOptions) {
		o.Registerer = func(r prometheus.Registerer) prometheus.Registerer { rec.Registerer = r; return rec }
	})
	// Replica sync (replicas.enabled) registers its metrics the same way;
	// the profile here has it off, so register a replica of the same
	// scheduler on the same registry.
	rc := replica.DefaultConfig()
	rc.Enabled, rc.ID, rc.Peers, rc.Insecure = true, "metrics-doc", []string{"127.0.0.1:1"}, true
	if _, err := replica.New(rc, ts.svc.sched, replica.Deps{Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	// Flow control (flow.enabled), off in the profile too.
	if _, err := flow.New(flow.DefaultConfig(), flow.Deps{Scheduler: ts.svc.sched, Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	// Some traffic so labelled families have children and gathered types.
	for i := 0; i < 3; i++ {
		post(t, ts.proxyURL+"/v1/completions", `{"model":"llama-3.1-8b-instruct","prompt":"metrics","max_tokens":2}`)
	}
	ms := registeredMetrics(t, ts.svc, rec)
	for _, m := range ms {
		if !strings.HasPrefix(m.name, "trimtab_") {
			t.Errorf("metric %s does not follow trimtab_<component>_<what>_<unit>", m.name)
		}
		if m.help == "" {
			t.Errorf("metric %s has no help text", m.name)
		}
	}
	want := renderMetricsDoc(ms)
	if *updateDocs {
		if err := os.WriteFile(metricsDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatalf("%v (generate it with -update-docs)", err)
	}
	if string(got) != want {
		t.Errorf("docs/metrics.md is out of date with the registry; run: go test ./cmd/trimtab -run TestMetricsReference -update-docs")
	}
}

// recordingRegisterer registers on the wrapped Registerer and remembers
// what it registered.
type recordingRegisterer struct {
	prometheus.Registerer
	mu sync.Mutex
	cs []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cs = append(r.cs, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// collectors returns what was registered.
func (r *recordingRegisterer) collectors() []prometheus.Collector {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]prometheus.Collector(nil), r.cs...)
}
