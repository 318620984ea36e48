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

// TestPathMetricsReturnResetsDeparture: an endpoint that leaves, comes
// back within forgetAfter and leaves again is timed from its second
// departure.
func TestPathMetricsReturnResetsDeparture(t *testing.T) {
	f := newFixture(t, nil, "10.0.0.1:8000", "10.0.0.2:8000")
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := newPathMetrics("proxy", f.reg, f.sched.Pool, clk)
	m.endpoint("10.0.0.2:8000").observe(0.01, true, 0.1)
	has := func() bool {
		seriesEndpoints(t, f.reg)
		return slices.Contains(seriesEndpoints(t, f.reg)["trimtab_proxy_ttfb_seconds"], "10.0.0.2:8000")
	}
	setPool(f.sched, "10.0.0.1:8000")
	has() // first departure noticed at t0
	clk.SetTime(clk.Now().Add(forgetAfter / 2))
	setPool(f.sched, "10.0.0.1:8000", "10.0.0.2:8000")
	has() // back: the departure is forgotten
	setPool(f.sched, "10.0.0.1:8000")
	has() // second departure noticed at t0 + forgetAfter/2
	clk.SetTime(clk.Now().Add(forgetAfter - time.Second))
	if !has() {
		t.Fatal("series deleted forgetAfter after the first departure, not the second")
	}
	clk.SetTime(clk.Now().Add(time.Second))
	if has() {
		t.Error("series kept forgetAfter after the second departure")
	}
}

// TestPathMetricsLateCompletion: requests that picked an endpoint before
// its series were deleted, and complete after, record on fresh series that
// are themselves deleted later, instead of re-creating series behind the
// pruner's back (an entry never observed) or writing into deleted ones (an
// entry observed before).
func TestPathMetricsLateCompletion(t *testing.T) {
	f := newFixture(t, nil, "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := newPathMetrics("proxy", f.reg, f.sched.Pool, clk)
	const fresh, seen = "10.0.0.2:8000", "10.0.0.3:8000"
	m.count(fresh, 200)
	heldFresh := m.endpoint(fresh) // what the HTTP path holds while streaming; no latency yet
	heldSeen := m.endpoint(seen)
	heldSeen.observe(0.01, true, 0.1)
	ttfbCount := func(addr string) uint64 {
		seriesEndpoints(t, f.reg)
		fams, err := f.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range fams {
			if mf.GetName() != "trimtab_proxy_ttfb_seconds" {
				continue
			}
			for _, mm := range mf.GetMetric() {
				if mm.GetLabel()[0].GetValue() == addr {
					return mm.GetHistogram().GetSampleCount()
				}
			}
		}
		return 0
	}
	setPool(f.sched, "10.0.0.1:8000")
	ttfbCount(fresh)
	clk.SetTime(clk.Now().Add(forgetAfter))
	if n := ttfbCount(seen); n != 0 {
		t.Fatalf("not pruned: %d samples", n)
	}
	// The streams end now.
	heldFresh.observe(0.01, true, 0.1)
	heldSeen.observe(0.01, true, 0.1)
	m.count(fresh, 200)
	for _, a := range []string{fresh, seen} {
		if n := ttfbCount(a); n != 1 {
			t.Errorf("%s: late completion recorded %d samples, want 1", a, n)
		}
	}
	if got := seriesEndpoints(t, f.reg)["trimtab_proxy_requests_total"]; !slices.Contains(got, fresh) {
		t.Errorf("late completion not counted: %v", got)
	}
	clk.SetTime(clk.Now().Add(forgetAfter))
	seriesEndpoints(t, f.reg)
	if got := seriesEndpoints(t, f.reg); len(got["trimtab_proxy_ttfb_seconds"]) != 0 || slices.Contains(got["trimtab_proxy_requests_total"], fresh) {
		t.Errorf("late completions' series never pruned: %v", got)
	}
}

// TestPathMetricsWiredToPool: the HTTP proxy and the ext_proc server prune
// against their scheduler's pool, on their clock.
func TestPathMetricsWiredToPool(t *testing.T) {
	f := newFixture(t, nil, "10.0.0.1:8000", "10.0.0.2:8000")
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := f.deps(t)
	d.Clock = clk
	h, err := NewHTTP(DefaultConfig(), d)
	if err != nil {
		t.Fatal(err)
	}
	d.Listener.Close()
	reg := prometheus.NewRegistry()
	d2 := Deps{Scheduler: f.sched, Registerer: reg, Clock: clk}
	x, err := NewExtProc(DefaultConfig(), d2)
	if err != nil {
		t.Fatal(err)
	}
	h.m.endpoint("10.0.0.2:8000").observe(0.01, true, 0.1)
	x.m.endpoint("10.0.0.2:8000").observe(0.01, true, 0.1)
	setPool(f.sched, "10.0.0.1:8000")
	for _, r := range []*prometheus.Registry{f.reg, reg} {
		seriesEndpoints(t, r)
	}
	clk.SetTime(clk.Now().Add(forgetAfter))
	for name, r := range map[string]*prometheus.Registry{"trimtab_proxy_ttfb_seconds": f.reg, "trimtab_extproc_ttfb_seconds": reg} {
		seriesEndpoints(t, r)
		if got := seriesEndpoints(t, r)[name]; len(got) != 0 {
			t.Errorf("%s: %v, want pruned", name, got)
		}
	}
}
