package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// outlierRig is a real scheduler whose scorer prefers endpoints in address
// order (a:1 best), on a fake clock that stamps each request's Arrival.
type outlierRig struct {
	t   *testing.T
	s   *Scheduler
	clk *clocktesting.FakeClock
	reg *prometheus.Registry
}

func newOutlierRig(t *testing.T, oc OutlierConfig, filters []Filter, pool ...Endpoint) *outlierRig {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Outlier = oc
	clk := clocktesting.NewFakeClock(t0)
	reg := prometheus.NewRegistry()
	pref := fixedScorer{CategoryNone, map[string]float64{"a:1": 1, "b:1": 0.8, "c:1": 0.6, "d:1": 0.4}}
	s, err := New(cfg, []ScorerEntry{{Name: "pref", Scorer: pref, Weight: 1}}, filters, MaxScore{}, Deps{Registerer: reg, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(pool)
	return &outlierRig{t: t, s: s, clk: clk, reg: reg}
}

// pick returns the address chosen for a request of model at the clock's
// time, and finishes it with o.
func (r *outlierRig) pick(model string, o Outcome) string {
	r.t.Helper()
	d, err := r.s.Pick(context.Background(), &Request{Model: model, Arrival: r.clk.Now()})
	if err != nil {
		r.t.Fatal(err)
	}
	addr := d.Endpoint.Address
	d.Done(o)
	return addr
}

// report sends n requests to addr (through the subset hint) that end with o.
func (r *outlierRig) report(addr string, n int, o Outcome) {
	r.t.Helper()
	for range n {
		d, err := r.s.Pick(context.Background(), &Request{Subset: []string{addr}, Arrival: r.clk.Now()})
		if err != nil {
			r.t.Fatal(err)
		}
		if d.Endpoint.Address != addr {
			r.t.Fatalf("subset %s picked %s", addr, d.Endpoint.Address)
		}
		d.Done(o)
	}
}

func (r *outlierRig) endpoint(addr string) *Endpoint {
	for _, e := range r.s.Pool().Pointers() {
		if e.Address == addr {
			return e
		}
	}
	r.t.Fatalf("no endpoint %s", addr)
	return nil
}

var (
	ok200  = Outcome{Kind: OutcomeSuccess, Status: 200}
	err500 = Outcome{Kind: OutcomeError, Status: 500}
)

func TestOutlierEjectionAndBackoff(t *testing.T) {
	r := newOutlierRig(t, DefaultOutlierConfig(), nil, eps("a:1", "b:1", "c:1")...)
	a := r.endpoint("a:1")

	r.report("a:1", 4, err500)
	if got := r.pick("", ok200); got != "a:1" {
		t.Fatalf("after 4 failures and a success picked %s, want a:1 (not ejected)", got)
	}
	// The success reset the count: 4 more failures are still not 5 in a row.
	r.report("a:1", 4, err500)
	if a.Ejected(r.clk.Now()) {
		t.Fatal("ejected after 4+4 failures with a success between")
	}
	r.report("a:1", 1, err500) // the 5th in a row
	if !a.Ejected(r.clk.Now()) {
		t.Fatal("not ejected after 5 consecutive failures")
	}
	// First ejection: base_ejection = 30s.
	if got, want := a.EjectedUntil(), t0.Add(30*time.Second); !got.Equal(want) {
		t.Errorf("EjectedUntil = %v, want %v", got, want)
	}
	if got := r.pick("", ok200); got != "b:1" {
		t.Errorf("picked %s while a:1 is ejected, want b:1", got)
	}
	r.clk.Step(29 * time.Second)
	if got := r.pick("", ok200); got != "b:1" {
		t.Errorf("at +29s picked %s, want b:1 (ejected for 30s)", got)
	}
	r.clk.Step(time.Second)
	if got := r.pick("", ok200); got != "a:1" {
		t.Errorf("at +30s picked %s, want a:1 back in service", got)
	}
	if !a.EjectedUntil().IsZero() {
		t.Errorf("EjectedUntil = %v after restoration, want zero", a.EjectedUntil())
	}

	// Ejected again 10s after its return (< max_ejection 5m): 2 × 30s.
	r.clk.Step(10 * time.Second)
	r.report("a:1", 5, err500)
	if got, want := a.EjectedUntil(), r.clk.Now().Add(60*time.Second); !got.Equal(want) {
		t.Errorf("second ejection until %v, want %v (2 × 30s)", got, want)
	}
	// Ejections 3…12 in a row grow by 30s each, capped at 5m (the 10th on).
	for i := 3; i <= 12; i++ {
		r.clk.Step(a.EjectedUntil().Sub(r.clk.Now()))
		r.report("a:1", 5, err500)
		want := min(time.Duration(i)*30*time.Second, 5*time.Minute)
		if got := a.EjectedUntil().Sub(r.clk.Now()); got != want {
			t.Errorf("ejection %d lasts %v, want min(%d × 30s, 5m) = %v", i, got, i, want)
		}
	}
	if got := a.Ejections(); got != 12 {
		t.Errorf("Ejections = %d, want 12", got)
	}
	// In service for max_ejection (5m) after the last one ended: the next
	// ejection starts again at 30s.
	r.clk.Step(a.EjectedUntil().Sub(r.clk.Now()) + 5*time.Minute)
	r.report("a:1", 5, err500)
	if got := a.EjectedUntil().Sub(r.clk.Now()); got != 30*time.Second {
		t.Errorf("ejection after 5m in service lasts %v, want 30s", got)
	}
}

func TestOutlierWhatCounts(t *testing.T) {
	tests := []struct {
		name  string
		o     Outcome
		eject bool
	}{
		{"error 500", err500, true},
		{"429 answered", Outcome{Kind: OutcomeSuccess, Status: 429}, true},
		{"503 answered", Outcome{Kind: OutcomeSuccess, Status: 503}, true},
		{"connection error", Outcome{Kind: OutcomeError}, true},
		{"error mid-stream after 200", Outcome{Kind: OutcomeError, Status: 200}, true},
		{"404 is the client's fault", Outcome{Kind: OutcomeSuccess, Status: 404}, false},
		{"canceled by the client", Outcome{Kind: OutcomeCanceled, Status: 200}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newOutlierRig(t, DefaultOutlierConfig(), nil, eps("a:1", "b:1")...)
			r.report("a:1", 5, tt.o)
			if got := r.endpoint("a:1").Ejected(r.clk.Now()); got != tt.eject {
				t.Errorf("ejected after 5 × %+v = %v, want %v", tt.o, got, tt.eject)
			}
		})
	}
	t.Run("cancel neither counts nor resets", func(t *testing.T) {
		r := newOutlierRig(t, DefaultOutlierConfig(), nil, eps("a:1", "b:1")...)
		r.report("a:1", 3, err500)
		r.report("a:1", 1, Outcome{Kind: OutcomeCanceled})
		r.report("a:1", 2, err500)
		if !r.endpoint("a:1").Ejected(r.clk.Now()) {
			t.Error("3 failures, a cancel, 2 failures: want ejected")
		}
	})
	t.Run("off", func(t *testing.T) {
		oc := DefaultOutlierConfig()
		oc.ConsecutiveFailures = 0
		r := newOutlierRig(t, oc, nil, eps("a:1", "b:1")...)
		r.report("a:1", 50, err500)
		if r.endpoint("a:1").Ejected(r.clk.Now()) {
			t.Error("ejected with consecutive_failures 0")
		}
	})
}

func TestOutlierAdvanceCountsFailure(t *testing.T) {
	r := newOutlierRig(t, DefaultOutlierConfig(), nil, eps("a:1", "b:1", "c:1")...)
	for range 5 {
		d, err := r.s.Pick(context.Background(), &Request{Arrival: r.clk.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if d.Endpoint.Address != "a:1" || !d.Advance() {
			t.Fatalf("picked %s, want a:1 with a fallback", d.Endpoint.Address)
		}
		d.Done(ok200) // b:1 answered
	}
	if !r.endpoint("a:1").Ejected(r.clk.Now()) {
		t.Error("a:1 failed before answering 5 times (retried on b:1): want ejected")
	}
	if r.endpoint("b:1").ConsecutiveFailures() != 0 {
		t.Error("b:1 answered every retry: want no failures")
	}
}

func TestOutlierCap(t *testing.T) {
	tests := []struct {
		name    string
		pct     int
		pool    []string
		ejected int
		// arithmetic: allowed = min(max(n·pct/100, 1), n−1)
	}{
		{"4 at 50%", 50, []string{"a:1", "b:1", "c:1", "d:1"}, 2},   // min(max(2,1),3) = 2
		{"4 at 10%", 10, []string{"a:1", "b:1", "c:1", "d:1"}, 1},   // min(max(0,1),3) = 1
		{"4 at 100%", 100, []string{"a:1", "b:1", "c:1", "d:1"}, 3}, // min(max(4,1),3) = 3
		{"2 at 50%", 50, []string{"a:1", "b:1"}, 1},                 // min(max(1,1),1) = 1
		{"1 at 100%: the last endpoint", 100, []string{"a:1"}, 0},   // min(max(1,1),0) = 0
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			oc := DefaultOutlierConfig()
			oc.MaxEjectedPercent = tt.pct
			r := newOutlierRig(t, oc, nil, eps(tt.pool...)...)
			for _, a := range tt.pool {
				r.report(a, 5, err500)
			}
			n := 0
			for _, e := range r.s.Pool().Pointers() {
				if e.Ejected(r.clk.Now()) {
					n++
				}
			}
			if n != tt.ejected {
				t.Errorf("%d ejected, want %d", n, tt.ejected)
			}
			if got := testutil.ToFloat64(r.s.m.ejectionsRefused); got != float64(len(tt.pool)-tt.ejected) {
				t.Errorf("refused = %v, want %d", got, len(tt.pool)-tt.ejected)
			}
			// Whatever is ejected, a request is still placed.
			r.pick("", ok200)
		})
	}
}

func TestOutlierFailsOpenForOnlyServer(t *testing.T) {
	pool := []Endpoint{{Address: "a:1", Models: []string{"rare"}}, {Address: "b:1", Models: []string{"common"}}, {Address: "c:1", Models: []string{"common"}}}
	r := newOutlierRig(t, DefaultOutlierConfig(), []Filter{ModelFilter{}}, pool...)
	r.report("a:1", 5, err500)
	if !r.endpoint("a:1").Ejected(r.clk.Now()) {
		t.Fatal("a:1 not ejected")
	}
	if got := r.pick("rare", ok200); got != "a:1" {
		t.Errorf("the only server of the model picked %s, want a:1 (fail open)", got)
	}
	if got := r.pick("common", ok200); got != "b:1" {
		t.Errorf("picked %s, want b:1", got)
	}
}

func TestOutlierUnsetArrivalUsesClock(t *testing.T) {
	r := newOutlierRig(t, DefaultOutlierConfig(), nil, eps("a:1", "b:1")...)
	for range 5 {
		d, _ := r.s.Pick(context.Background(), &Request{Subset: []string{"a:1"}})
		d.Done(err500)
	}
	a := r.endpoint("a:1")
	if got, want := a.EjectedUntil(), t0.Add(30*time.Second); !got.Equal(want) {
		t.Fatalf("EjectedUntil = %v, want the clock's %v", got, want)
	}
	pick := func() string {
		d, _ := r.s.Pick(context.Background(), &Request{})
		defer d.Done(ok200)
		return d.Endpoint.Address
	}
	if got := pick(); got != "b:1" {
		t.Errorf("picked %s, want b:1", got)
	}
	r.clk.Step(30 * time.Second)
	if got := pick(); got != "a:1" {
		t.Errorf("picked %s after the ejection, want a:1", got)
	}
}

func TestOutlierSurvivesPoolChange(t *testing.T) {
	r := newOutlierRig(t, DefaultOutlierConfig(), nil, eps("a:1", "b:1", "c:1")...)
	r.report("a:1", 5, err500)
	r.s.SetEndpoints(eps("a:1", "b:1", "c:1")) // a metrics refresh
	if got := r.pick("", ok200); got != "b:1" {
		t.Errorf("picked %s after a pool refresh, want b:1 (a:1 still ejected)", got)
	}
	r.s.SetEndpoints(eps("b:1", "c:1"))
	if got := r.s.ejected.Load(); got != 0 {
		t.Errorf("ejected hint = %d after a:1 left, want 0", got)
	}
}

func TestOutlierMetrics(t *testing.T) {
	r := newOutlierRig(t, DefaultOutlierConfig(), nil, eps("a:1", "b:1")...)
	r.report("a:1", 5, err500)
	r.report("b:1", 5, err500) // refused: b:1 is the last in service
	want := `
# HELP trimtab_scheduler_ejections_total Outlier ejections of an endpoint after consecutive failures, since this router first saw it.
# TYPE trimtab_scheduler_ejections_total counter
trimtab_scheduler_ejections_total{endpoint="a:1"} 1
trimtab_scheduler_ejections_total{endpoint="b:1"} 0
# HELP trimtab_scheduler_endpoint_ejected 1 while an endpoint is ejected (left out of picks after consecutive failures), else 0.
# TYPE trimtab_scheduler_endpoint_ejected gauge
trimtab_scheduler_endpoint_ejected{endpoint="a:1"} 1
trimtab_scheduler_endpoint_ejected{endpoint="b:1"} 0
# HELP trimtab_scheduler_ejections_refused_total Outlier ejections refused because the ejection cap was reached (outlier.max_ejected_percent of the pool, and never the last endpoint).
# TYPE trimtab_scheduler_ejections_refused_total counter
trimtab_scheduler_ejections_refused_total 1
`
	names := []string{"trimtab_scheduler_ejections_total", "trimtab_scheduler_endpoint_ejected", "trimtab_scheduler_ejections_refused_total"}
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// Over at 30s: the gauge drops with the clock, before any pick.
	r.clk.Step(30 * time.Second)
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(strings.Replace(want, `ejected{endpoint="a:1"} 1`, `ejected{endpoint="a:1"} 0`, 1)), names...); err != nil {
		t.Error(err)
	}
}

func TestOutlierValidate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*OutlierConfig)
		field string // "" when valid
	}{
		{"defaults", func(*OutlierConfig) {}, ""},
		{"off ignores the rest", func(c *OutlierConfig) { *c = OutlierConfig{} }, ""},
		{"negative failures", func(c *OutlierConfig) { c.ConsecutiveFailures = -1 }, "outlier.consecutive_failures"},
		{"sub-second base", func(c *OutlierConfig) { c.BaseEjection = time.Millisecond }, "outlier.base_ejection"},
		{"max below base", func(c *OutlierConfig) { c.MaxEjection = 10 * time.Second }, "outlier.max_ejection"},
		{"max above a day", func(c *OutlierConfig) { c.MaxEjection = 25 * time.Hour }, "outlier.max_ejection"},
		{"zero percent", func(c *OutlierConfig) { c.MaxEjectedPercent = 0 }, "outlier.max_ejected_percent"},
		{"over 100 percent", func(c *OutlierConfig) { c.MaxEjectedPercent = 101 }, "outlier.max_ejected_percent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c.Outlier)
			err := c.Validate()
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.field != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.field+":")):
				t.Errorf("Validate = %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

func TestPickWithEjectedAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race; CI runs this test in its no-race pass")
	}
	r := newOutlierRig(t, DefaultOutlierConfig(), []Filter{ModelFilter{}, HealthyFilter{}}, eps("a:1", "b:1", "c:1", "d:1")...)
	r.report("a:1", 5, err500)
	req := &Request{ID: "r", Arrival: r.clk.Now()}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		d, err := r.s.Pick(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		d.Done(Outcome{Kind: OutcomeSuccess, Status: 200})
	})
	if allocs != 0 {
		t.Errorf("Pick+Done with an ejected endpoint allocates %v times per request, want 0", allocs)
	}
}

// withRecovery returns the rig's pool with addr's RecoveredAt set to at, as
// a fleet snapshot after a scrape that answered again carries it.
func withRecovery(addr string, at time.Time) []Endpoint {
	pool := eps("a:1", "b:1", "c:1")
	for i := range pool {
		if pool[i].Address == addr {
			pool[i].RecoveredAt = at
		}
	}
	return pool
}

// TestOutlierHalfOpen: an ejected endpoint whose scrapes answer again after
// failing (RecoveredAt after the ejection began) is half-open: it takes one
// trial request at a time; a trial's success readmits it, a trial's failure
// ejects it again for one base_ejection longer. Evidence from before the
// ejection, or none, leaves it out for the whole ejection. a:1 is the
// scorer's favourite, so a pick that may use it does. Times are from t0,
// when a:1 is ejected for 30s (base_ejection); the recovery snapshot and
// the trial come at +2s.
func TestOutlierHalfOpen(t *testing.T) {
	tests := []struct {
		name      string
		recovered time.Duration // RecoveredAt − t0; 0: the scrapes never failed
		trial     Outcome
		wantPick  string        // the pick at +2s
		wantUntil time.Duration // a:1's ejection end − t0 after it; 0: in service
		wantEj    uint64
	}{
		// Recovered at +1s > ejection at 0: half-open; the trial succeeds.
		{"recovered, trial succeeds", time.Second, ok200, "a:1", 0, 1},
		// The trial fails at +2s: second ejection in a row, 2 × 30s = 60s,
		// so until +2s + 60s = +62s.
		{"recovered, trial fails", time.Second, err500, "a:1", 62 * time.Second, 2},
		// A 429 is a failure too.
		{"recovered, trial refused", time.Second, Outcome{Kind: OutcomeSuccess, Status: 429}, "a:1", 62 * time.Second, 2},
		// Recovered at −1s: before the ejection, no evidence the failures ended.
		{"recovered before the ejection", -time.Second, ok200, "b:1", 30 * time.Second, 1},
		// Scrapes never failed (a server that answers /metrics and fails
		// requests): out for the whole 30s.
		{"scrapes never failed", 0, ok200, "b:1", 30 * time.Second, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newOutlierRig(t, DefaultOutlierConfig(), nil, eps("a:1", "b:1", "c:1")...)
			a := r.endpoint("a:1")
			r.report("a:1", 5, err500)
			if !a.Ejected(r.clk.Now()) {
				t.Fatal("a:1 not ejected after 5 failures")
			}
			var rec time.Time
			if tt.recovered != 0 {
				rec = t0.Add(tt.recovered)
			}
			r.clk.Step(2 * time.Second)
			r.s.SetEndpoints(withRecovery("a:1", rec))
			a = r.endpoint("a:1")
			if got := r.pick("", tt.trial); got != tt.wantPick {
				t.Fatalf("pick at +2s = %s, want %s", got, tt.wantPick)
			}
			var want time.Time
			if tt.wantUntil != 0 {
				want = t0.Add(tt.wantUntil)
			}
			if got := a.EjectedUntil(); !got.Equal(want) {
				t.Errorf("EjectedUntil = %v, want %v", got, want)
			}
			if got := a.Ejections(); got != tt.wantEj {
				t.Errorf("Ejections = %d, want %d", got, tt.wantEj)
			}
			if a.HalfOpen() {
				t.Error("still half-open after the trial")
			}
			// The same evidence again (the next snapshot) changes nothing:
			// after a failed trial only a new recovery reopens it.
			r.s.SetEndpoints(withRecovery("a:1", rec))
			wantNext := "a:1"
			if tt.wantUntil != 0 {
				wantNext = "b:1"
			}
			if got := r.pick("", ok200); got != wantNext {
				t.Errorf("next pick = %s, want %s", got, wantNext)
			}
		})
	}
}

// TestOutlierHalfOpenOneTrialAtATime: a half-open endpoint takes one
// request at a time until a trial ends; a request sent before it went
// half-open does not count as a trial, whatever its outcome.
func TestOutlierHalfOpenOneTrialAtATime(t *testing.T) {
	r := newOutlierRig(t, DefaultOutlierConfig(), nil, eps("a:1", "b:1", "c:1")...)
	old, err := r.s.Pick(context.Background(), &Request{Subset: []string{"a:1"}, Arrival: r.clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	r.report("a:1", 5, err500)
	r.clk.Step(2 * time.Second)
	r.s.SetEndpoints(withRecovery("a:1", t0.Add(time.Second)))
	a := r.endpoint("a:1")
	if !a.HalfOpen() {
		t.Fatal("not half-open after a recovery following the ejection")
	}
	// The request from before the ejection is still in flight on a:1: it
	// holds the one trial slot, so picks go elsewhere until it ends.
	if got := r.pick("", ok200); got != "b:1" {
		t.Errorf("pick with a:1's earlier request in flight = %s, want b:1", got)
	}
	old.Done(err500) // sent at t0, before half-open at +1s: not a trial
	if !a.HalfOpen() || a.Ejections() != 1 {
		t.Fatalf("an earlier request's failure changed the half-open endpoint: half-open %v, ejections %d", a.HalfOpen(), a.Ejections())
	}
	trial, err := r.s.Pick(context.Background(), &Request{Arrival: r.clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if trial.Endpoint.Address != "a:1" {
		t.Fatalf("trial went to %s, want a:1", trial.Endpoint.Address)
	}
	if got := r.pick("", ok200); got != "b:1" {
		t.Errorf("pick during the trial = %s, want b:1 (one trial at a time)", got)
	}
	trial.Done(ok200)
	if a.Ejected(r.clk.Now()) || a.HalfOpen() {
		t.Error("still ejected or half-open after a successful trial")
	}
	if got := r.pick("", ok200); got != "a:1" {
		t.Errorf("pick after the trial = %s, want a:1 (readmitted)", got)
	}
}
