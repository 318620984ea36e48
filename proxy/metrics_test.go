package proxy

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"
)

// seriesEndpoints gathers reg and returns, per metric family name, the
// sorted endpoint label values it has series for.
func seriesEndpoints(t *testing.T, reg *prometheus.Registry) map[string][]string {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "endpoint" && !slices.Contains(out[mf.GetName()], l.GetValue()) {
					out[mf.GetName()] = append(out[mf.GetName()], l.GetValue())
				}
			}
		}
		slices.Sort(out[mf.GetName()])
	}
	return out
}

func TestPathMetricsForgetDepartedEndpoints(t *testing.T) {
	f := newFixture(t, nil, "10.0.0.1:8000", "10.0.0.2:8000")
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := newPathMetrics("proxy", f.reg, f.sched.Pool, clk)
	use := func(addrs ...string) {
		for _, a := range addrs {
			m.endpoint(a).observe(0.01, true, 0.1)
			m.count(a, 200)
		}
	}
	use("10.0.0.1:8000", "10.0.0.2:8000", "none")
	want := func(step string, eps ...string) {
		t.Helper()
		// The registry runs the pruner beside the other collectors, so a
		// pruned series may still be in the gather that pruned it.
		seriesEndpoints(t, f.reg)
		got := seriesEndpoints(t, f.reg)
		for _, name := range []string{"trimtab_proxy_ttfb_seconds", "trimtab_proxy_request_duration_seconds"} {
			// "none" only ever counts requests, it has no latency.
			if w := slices.DeleteFunc(slices.Clone(eps), func(s string) bool { return s == "none" }); !slices.Equal(got[name], w) {
				t.Errorf("%s: %s endpoints = %v, want %v", step, name, got[name], w)
			}
		}
		if !slices.Equal(got["trimtab_proxy_requests_total"], eps) {
			t.Errorf("%s: requests_total endpoints = %v, want %v", step, got["trimtab_proxy_requests_total"], eps)
		}
	}
	// "none" has no latency series: only observe() creates them.
	m.ttfb.DeleteLabelValues("none")
	m.duration.DeleteLabelValues("none")
	want("both in the pool", "10.0.0.1:8000", "10.0.0.2:8000", "none")

	setPool(f.sched, "10.0.0.1:8000") // .2 leaves (a rollout)
	want("just left", "10.0.0.1:8000", "10.0.0.2:8000", "none")
	clk.SetTime(clk.Now().Add(forgetAfter - time.Second))
	use("10.0.0.2:8000") // a late completion still counts
	want("gone for less than forgetAfter", "10.0.0.1:8000", "10.0.0.2:8000", "none")
	clk.SetTime(clk.Now().Add(time.Second))
	want("gone for forgetAfter", "10.0.0.1:8000", "none")

	// A pod that comes back starts fresh series, and being back in the pool
	// resets its departure time.
	setPool(f.sched, "10.0.0.1:8000", "10.0.0.2:8000")
	use("10.0.0.2:8000")
	want("back", "10.0.0.1:8000", "10.0.0.2:8000", "none")
	clk.SetTime(clk.Now().Add(2 * forgetAfter))
	want("back and kept", "10.0.0.1:8000", "10.0.0.2:8000", "none")

	// Without a pool source nothing is pruned.
	reg := prometheus.NewRegistry()
	keep := newPathMetrics("extproc", reg, nil, clk)
	keep.endpoint("10.9.9.9:1").observe(0.01, true, 0.1)
	clk.SetTime(clk.Now().Add(2 * forgetAfter))
	seriesEndpoints(t, reg)
	if got := seriesEndpoints(t, reg)["trimtab_extproc_ttfb_seconds"]; !slices.Equal(got, []string{"10.9.9.9:1"}) {
		t.Errorf("without a pool: ttfb endpoints = %v", got)
	}
}
