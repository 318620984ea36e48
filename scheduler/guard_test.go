package scheduler

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestGuardBound checks Guard.Over against the bound written out:
// (inflight+1)/c > max(factor·μ, μ+slack), μ = (Σinflight+1)/Σcap.
func TestGuardBound(t *testing.T) {
	g := Guard{Factor: 2, Slack: 6}
	for _, tc := range []struct {
		inflight, c, sum, capSum float64
		over                     bool
	}{
		{6, 1, 6, 4, false},    // μ 1.75, bound max(3.5, 7.75) = 7.75; 7 ≤ 7.75
		{7, 1, 7, 4, false},    // μ 2, bound max(4, 8) = 8; 8 > 8 is false
		{8, 1, 8, 4, true},     // μ 2.25, bound 8.25; 9 over
		{40, 1, 100, 4, false}, // μ 25.25, bound 50.5; 41 within
		{60, 1, 100, 4, true},  // 61 > 50.5
		{60, 2, 100, 5, false}, // a double-capacity pod: 61/2 = 30.5 ≤ max(40.4, 26.2)
	} {
		if got := g.Over(tc.inflight, tc.c, tc.sum, tc.capSum); got != tc.over {
			t.Errorf("Over(%v, %v, %v, %v) = %v, want %v", tc.inflight, tc.c, tc.sum, tc.capSum, got, tc.over)
		}
	}
}

// TestGuardPick: an affinity scorer favours a:1 alone. Without the guard
// every request goes there; with factor 2 slack 1 a:1 takes the first
// request and then only its share: the second request would make it 2
// against a bound of max(2·0.5, 0.5+1) = 1.5. The pick is counted as
// guarded and as a herd pick of a:1 (the calm weights' choice).
func TestGuardPick(t *testing.T) {
	reg := prometheus.NewRegistry()
	entries := []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1, "b:1": 0, "c:1": 0, "d:1": 0}}, Weight: 1}}
	s, err := New(DefaultConfig(), entries, nil, MaxScore{}, Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(eps("a:1", "b:1", "c:1", "d:1"))
	ctx := context.Background()
	pick := func() *Decision {
		t.Helper()
		d, err := s.Pick(ctx, &Request{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// No guard: four picks, all on a:1.
	var held []*Decision
	for i := 0; i < 4; i++ {
		d := pick()
		if d.Endpoint.Address != "a:1" {
			t.Fatalf("unguarded pick %d went to %s", i, d.Endpoint.Address)
		}
		held = append(held, d)
	}
	for _, d := range held {
		d.Done(Outcome{})
	}
	if err := s.Publish(&Weights{Version: 2, Values: []float64{1}, Guard: Guard{Factor: 2, Slack: 1}, Calm: []float64{1}}); err != nil {
		t.Fatal(err)
	}
	a := s.Pool().Pointers()[0]
	first := pick()
	if first.Endpoint != a || first.OverBound(0) {
		t.Fatalf("first guarded pick: %s over %v, want a:1 within the bound", first.Endpoint.Address, first.OverBound(0))
	}
	second := pick()
	if second.Endpoint == a || !second.OverBound(0) {
		t.Fatalf("second pick: %s, a:1 over %v; want another pod, a:1 over the bound", second.Endpoint.Address, second.OverBound(0))
	}
	if got := a.HerdPicks(); got != 1 {
		t.Errorf("a:1 herd picks %d, want 1", got)
	}
	if got := testutil.ToFloat64(s.m.guarded); got != 1 {
		t.Errorf("guarded picks %v, want 1", got)
	}
	// Third: a:1 at 1 of 2, bound max(1.5, 1.75): 2 is over again. Fourth:
	// 3 in flight, μ 1, bound 2: a:1 may take its second.
	third, fourth := pick(), pick()
	if third.Endpoint == a || fourth.Endpoint != a {
		t.Errorf("third %s, fourth %s; want another pod, then a:1", third.Endpoint.Address, fourth.Endpoint.Address)
	}
	fifth := pick()
	for _, d := range []*Decision{first, second, third, fourth, fifth} {
		d.Done(Outcome{})
	}
}

// TestGuardHerdOnly: with Weights.HerdOnly, a request whose calm choice is
// within the guard's bound ranks with the calm weights, and only a herd
// pick ranks with Values. An affinity scorer favours a:1, a distribution
// scorer b:1; the calm weights (aff 1, dist 0.1) choose a:1, the
// rebalanced ones (aff 0.1, dist 1) b:1. Guard factor 2 slack 1 over four
// pods: the first request finds a:1 within the bound and stays there under
// HerdOnly (b:1 without it); the second would put a:1 at 2 > 1.5, a herd
// pick, and goes where Values send it.
func TestGuardHerdOnly(t *testing.T) {
	entries := []ScorerEntry{
		{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1, "b:1": 0, "c:1": 0, "d:1": 0}}, Weight: 1},
		{Name: "dist", Scorer: fixedScorer{cat: CategoryDistribution, scores: map[string]float64{"a:1": 0, "b:1": 1, "c:1": 0, "d:1": 0}}, Weight: 0.1},
	}
	for _, herdOnly := range []bool{false, true} {
		s, err := New(DefaultConfig(), entries, nil, MaxScore{}, Deps{Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		s.SetEndpoints(eps("a:1", "b:1", "c:1", "d:1"))
		if err := s.Publish(&Weights{Version: 2, Values: []float64{0.1, 1}, Guard: Guard{Factor: 2, Slack: 1}, Calm: []float64{1, 0.1}, HerdOnly: herdOnly}); err != nil {
			t.Fatal(err)
		}
		first, err := s.Pick(context.Background(), &Request{})
		if err != nil {
			t.Fatal(err)
		}
		want := "b:1"
		if herdOnly {
			want = "a:1"
		}
		if first.Endpoint.Address != want || first.RankedCalm() != herdOnly || first.Explain().RankedCalm != herdOnly || first.OverBound(0) {
			t.Errorf("herd-only %v, first pick: %s (ranked calm %v, a:1 over %v); want %s, ranked calm %v, a:1 within",
				herdOnly, first.Endpoint.Address, first.RankedCalm(), first.OverBound(0), want, herdOnly)
		}
		if !herdOnly {
			first.Done(Outcome{})
			continue
		}
		second, err := s.Pick(context.Background(), &Request{})
		if err != nil {
			t.Fatal(err)
		}
		if second.Endpoint.Address != "b:1" || second.RankedCalm() || !second.OverBound(0) {
			t.Errorf("second pick: %s (ranked calm %v, a:1 over %v); want b:1 by the rebalanced weights, a:1 over the bound",
				second.Endpoint.Address, second.RankedCalm(), second.OverBound(0))
		}
		if got := s.Pool().Pointers()[0].HerdPicks(); got != 1 {
			t.Errorf("a:1 herd picks %d, want 1 (the second request)", got)
		}
		first.Done(Outcome{})
		second.Done(Outcome{})
	}
}

// TestGuardCrowd: the crowd bound charges herd picks for a prefix held by
// two or more candidates whose calm choice is over it, and only then. The
// guard (factor 10, slack 10) never diverts here, so every pick goes where
// the scores say and only the accounting differs.
func TestGuardCrowd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scores map[string]float64 // the affinity scorer's, per endpoint
		crowd  Guard
		herd   uint64 // herd picks charged over 6 requests kept in flight
	}{
		// a:1 and b:1 hold the prefix and take turns (the load scorer breaks
		// their tie). The bound is μ + 1 with μ = (in flight + 1)/8 < 1, so
		// from the third request on each holder's next request is over it:
		// 4 of 6 charged.
		{"shared prefix", map[string]float64{"a:1": 1, "b:1": 1}, Guard{Factor: 1.5, Slack: 1}, 4},
		// One holder: affinity keeping a group on its pod is not a crowd.
		{"one holder", map[string]float64{"a:1": 1}, Guard{Factor: 1.5, Slack: 1}, 0},
		{"crowd off", map[string]float64{"a:1": 1, "b:1": 1}, Guard{}, 0},
		// Nobody holds anything: no prefix, no crowd.
		{"no prefix", map[string]float64{}, Guard{Factor: 1.5, Slack: 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := []string{"a:1", "b:1", "c:1", "d:1", "e:1", "f:1", "g:1", "h:1"}
			aff := map[string]float64{}
			for _, a := range addrs {
				aff[a] = tc.scores[a]
			}
			entries := []ScorerEntry{
				{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: aff}, Weight: 4},
				{Name: "load", Scorer: inflightScorer{}, Weight: 1},
			}
			s, err := New(DefaultConfig(), entries, nil, MaxScore{}, Deps{})
			if err != nil {
				t.Fatal(err)
			}
			s.SetEndpoints(eps(addrs...))
			w := []float64{4, 1}
			if err := s.Publish(&Weights{Version: 2, Values: w, Guard: Guard{Factor: 10, Slack: 10}, Calm: w, Crowd: tc.crowd}); err != nil {
				t.Fatal(err)
			}
			var held []*Decision
			for i := 0; i < 6; i++ {
				d, err := s.Pick(context.Background(), &Request{})
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, d)
			}
			var herd uint64
			for _, e := range s.Pool().Pointers() {
				herd += e.HerdPicks()
			}
			if herd != tc.herd {
				t.Errorf("herd picks %d, want %d", herd, tc.herd)
			}
			for _, d := range held {
				d.Done(Outcome{})
			}
		})
	}
}

// inflightScorer scores 1/(1 + in-flight): the least loaded wins.
type inflightScorer struct{}

func (inflightScorer) Category() Category { return CategoryDistribution }
func (inflightScorer) Score(_ *CycleState, _ *Request, eps []*Endpoint, out []float64) {
	for i, e := range eps {
		out[i] = 1 / (1 + float64(max(e.InFlight(), 0)))
	}
}

func TestGuardValidate(t *testing.T) {
	for _, w := range []*Weights{
		{Values: []float64{1}, Guard: Guard{Factor: 0.5}},
		{Values: []float64{1}, Guard: Guard{Factor: 2, Slack: -1}},
		{Values: []float64{1}, Calm: []float64{1, 2}},
		{Values: []float64{1}, Crowd: Guard{Factor: 0.9}},
		{Values: []float64{1}, Crowd: Guard{Factor: 1.5, Slack: -1}},
	} {
		if err := w.Validate(1); err == nil {
			t.Errorf("%+v accepted", w)
		}
	}
}

func TestGuardedPickAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race; CI runs this test in its no-race pass")
	}
	s := newTestScheduler(t, []ScorerEntry{{Name: "f", Scorer: fixedScorer{}, Weight: 1}}, ModelFilter{}, HealthyFilter{})
	s.SetEndpoints(eps("a:1", "b:1", "c:1", "d:1"))
	for _, herdOnly := range []bool{false, true} {
		if err := s.Publish(&Weights{Version: 2, Values: []float64{1}, Guard: Guard{Factor: 2, Slack: 6}, Calm: []float64{0.5}, HerdOnly: herdOnly}); err != nil {
			t.Fatal(err)
		}
		req := &Request{ID: "r", Model: "m"}
		allocs := pickDoneAllocs(t, s, req)
		if allocs != 0 {
			t.Errorf("guarded Pick+Done (herd-only %v) allocates %v times per request, want 0", herdOnly, allocs)
		}
	}
}

// TestSchedulerGuard: Config.Guard guards a static profile. The version-1
// weights carry it (so it is published and shown with them) and measure
// herd pressure against the profile weights; weights published later
// without a guard of their own (static mode's profile weights after a
// reload) still run under it; weights with their own guard use theirs.
// One affinity scorer favours a:1 of four pods, factor 2 slack 1:
//
//	pick 1: a:1 at 0, μ = 1/4, bound max(0.5, 1.25) = 1.25; 1 ≤ 1.25: a:1
//	pick 2: a:1 at 1, μ = 2/4, bound max(1, 1.5) = 1.5; 2 > 1.5: diverted,
//	        a herd pick charged to a:1 (the profile weights' choice)
func TestSchedulerGuard(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.Guard = GuardConfig{Factor: 2, Slack: 1}
	entries := []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1}}, Weight: 1}}
	s, err := New(cfg, entries, nil, MaxScore{}, Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Weights(); w.Guard != (Guard{Factor: 2, Slack: 1}) || w.Calm == nil || w.Mode != "static" {
		t.Fatalf("version 1 weights %+v, want the scheduler's guard, calm = the profile weights, static", w)
	}
	s.SetEndpoints(eps("a:1", "b:1", "c:1", "d:1"))
	a := s.Pool().Pointers()[0]
	two := func(label string) {
		t.Helper()
		first, err := s.Pick(context.Background(), &Request{})
		if err != nil {
			t.Fatal(err)
		}
		second, err := s.Pick(context.Background(), &Request{})
		if err != nil {
			t.Fatal(err)
		}
		if first.Endpoint != a || second.Endpoint == a || !second.OverBound(0) {
			t.Errorf("%s: picks went to %s then %s (a:1 over %v); want a:1, then another pod with a:1 over the bound",
				label, first.Endpoint.Address, second.Endpoint.Address, second.OverBound(0))
		}
		first.Done(Outcome{})
		second.Done(Outcome{})
	}
	two("version 1")
	if got := testutil.ToFloat64(s.m.guarded); got != 1 {
		t.Errorf("guarded picks %v, want 1", got)
	}
	// Static mode republishing the profile weights with no guard of their own.
	if err := s.Publish(&Weights{Version: 2, Values: []float64{1}, Mode: "static"}); err != nil {
		t.Fatal(err)
	}
	two("weights without a guard")
	if got := a.HerdPicks(); got != 2 {
		t.Errorf("a:1 herd picks %d, want 2 (one per diverted pick)", got)
	}
	// The herd count is exported per endpoint, the signal's input.
	const want = `
# HELP trimtab_scheduler_endpoint_herd_picks_total Guarded decisions whose calm-weights choice was this endpoint while it was over the load guard's bound, or over the crowd bound while sharing the request's prefix with other endpoints: requests affinity would have piled on it.
# TYPE trimtab_scheduler_endpoint_herd_picks_total counter
trimtab_scheduler_endpoint_herd_picks_total{endpoint="a:1"} 2
trimtab_scheduler_endpoint_herd_picks_total{endpoint="b:1"} 0
trimtab_scheduler_endpoint_herd_picks_total{endpoint="c:1"} 0
trimtab_scheduler_endpoint_herd_picks_total{endpoint="d:1"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "trimtab_scheduler_endpoint_herd_picks_total"); err != nil {
		t.Error(err)
	}
	// Weights with their own guard (factor 10: a:1 may take both) win.
	if err := s.Publish(&Weights{Version: 3, Values: []float64{1}, Guard: Guard{Factor: 10, Slack: 10}}); err != nil {
		t.Fatal(err)
	}
	d1, _ := s.Pick(context.Background(), &Request{})
	d2, _ := s.Pick(context.Background(), &Request{})
	if d1.Endpoint != a || d2.Endpoint != a {
		t.Errorf("under the weights' own loose guard: %s, %s; want a:1 twice", d1.Endpoint.Address, d2.Endpoint.Address)
	}
	d1.Done(Outcome{})
	d2.Done(Outcome{})
}

func TestGuardConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		g    GuardConfig
		want string
	}{
		{GuardConfig{Factor: 0.5}, "guard.factor"},
		{GuardConfig{Factor: 2, Slack: -1}, "guard.slack"},
		{GuardConfig{Factor: 2, CrowdFactor: 0.5}, "guard.crowd_factor"},
		{GuardConfig{Factor: 2, CrowdFactor: 2, CrowdSlack: math.Inf(1)}, "guard.crowd_slack"},
	} {
		err := tc.g.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %s", tc.g, err, tc.want)
		}
	}
	if err := DefaultGuardConfig().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if g, c := DefaultGuardConfig().Guards(); g.Factor != 0 || c.Factor != 0 {
		t.Errorf("default guard %+v crowd %+v, want both off", g, c)
	}
}

// TestGuardBoundSeconds checks Guard.OverSeconds against the bound
// written out: w > max(factor·μ, μ + slack), in seconds.
func TestGuardBoundSeconds(t *testing.T) {
	g := Guard{Factor: 2.5, Slack: 0.5}
	for _, tc := range []struct {
		w, mu float64
		over  bool
	}{
		{0.6, 0.2, false}, // bound max(0.5, 0.7) = 0.7
		{0.75, 0.2, true}, // 0.75 > 0.7
		{2.4, 1, false},   // bound max(2.5, 1.5) = 2.5
		{2.6, 1, true},    // 2.6 > 2.5
		{0.4, 0, false},   // an idle pool: bound the slack, 0.5
	} {
		if got := g.OverSeconds(tc.w, tc.mu); got != tc.over {
			t.Errorf("OverSeconds(%v, %v) = %v, want %v", tc.w, tc.mu, got, tc.over)
		}
	}
}

// TestSchedulerGuardSeconds: the guard in seconds lets a pod carry the
// queue its speed clears. Pods a:1 (capacity 1, prior 1,000 tokens/s),
// b:1 (calibrated 4,000 tokens/s) and c:1 (capacity 2: 2,000 tokens/s);
// affinity a 1, b 0.9, c 0; factor 2, slack 0.15 s; every request 400
// bytes = 100 tokens (no prefix index: bytes ÷ 4), held. Waits count the
// request on each pod:
//
//	pick 1: a .1, b .025, c .05; μ .0583, bound max(.1167, .2083); a ok
//	pick 2: a .2, b .025, c .05; μ .0917, bound max(.1833, .2417); a ok
//	pick 3: a .3, b .025, c .05; μ .125, bound max(.25, .275); a over → b
//	pick 4: a .3, b .05, c .05; μ .1333, bound .2833; a over → b
//	pick 5: a .3, b .075, c .05; μ .1417, bound .2917; a over → b
//
// a:1 is charged a herd pick for each of picks 3–5. In requests, the
// same factor and slack divert pick 1 already: a at 0 → (0+1)/1 = 1 >
// max(2·1/4, 0.25 + 0.15) = 0.5 (Σ capacity 4).
func TestSchedulerGuardSeconds(t *testing.T) {
	for _, unit := range []string{GuardSeconds, GuardRequests} {
		cfg := DefaultConfig()
		cfg.Guard = GuardConfig{Factor: 2, Slack: 0.15, Unit: unit, PrefillTokensPerSecond: 1000}
		entries := []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1, "b:1": 0.9, "c:1": 0}}, Weight: 1}}
		s, err := New(cfg, entries, nil, MaxScore{}, Deps{})
		if err != nil {
			t.Fatal(err)
		}
		pool := eps("a:1", "b:1", "c:1")
		pool[2].Capacity = 2
		s.SetEndpoints(pool)
		s.SetCalibration("b:1", Calibration{PrefillTokensPerSecond: 4000, Samples: 9})
		want := "a:1 a:1 b:1 b:1 b:1"
		var got []string
		var held []*Decision
		var wait3 *float64
		for i := range 5 {
			d, err := s.Pick(context.Background(), &Request{Prompt: make([]byte, 400)})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, d.Endpoint.Address)
			if i == 2 {
				wait3 = d.Explain().Candidates[0].GuardWaitSeconds
			}
			held = append(held, d)
		}
		if unit == GuardSeconds {
			if g := strings.Join(got, " "); g != want {
				t.Errorf("seconds: picks %s, want %s", g, want)
			}
			if wait3 == nil || *wait3 < 0.3-1e-12 || *wait3 > 0.3+1e-12 {
				t.Errorf("seconds: pick 3 explains a:1's wait as %v, want 0.3", wait3)
			}
			if h := s.Pool().Pointers()[0].HerdPicks(); h != 3 {
				t.Errorf("seconds: a:1 charged %d herd picks, want 3", h)
			}
		} else {
			if got[0] == "a:1" {
				t.Errorf("requests: pick 1 went to a:1; want it diverted (picks %v)", got)
			}
			if wait3 != nil {
				t.Errorf("requests: explanation carries a wait %v", *wait3)
			}
		}
		for _, d := range held {
			d.Done(Outcome{})
		}
	}
}

func TestGuardConfigValidateUnit(t *testing.T) {
	for _, tc := range []struct {
		g    GuardConfig
		want string
	}{
		{GuardConfig{Factor: 2, Unit: "tokens", PrefillTokensPerSecond: 1}, "guard.unit"},
		{GuardConfig{Factor: 2, Unit: GuardSeconds}, "guard.prefill_tokens_per_second"},
	} {
		if err := tc.g.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.g, err, tc.want)
		}
	}
}

func TestGuardedPickSecondsAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race; CI runs this test in its no-race pass")
	}
	cfg := DefaultConfig()
	cfg.Guard = GuardConfig{Factor: 2.5, Slack: 0.5, CrowdFactor: 1.5, CrowdSlack: 0.25, Unit: GuardSeconds, PrefillTokensPerSecond: 13100}
	s, err := New(cfg, []ScorerEntry{{Name: "f", Scorer: fixedScorer{cat: CategoryAffinity}, Weight: 1}}, []Filter{ModelFilter{}, HealthyFilter{}}, MaxScore{}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(eps("a:1", "b:1", "c:1", "d:1"))
	s.SetCalibration("a:1", Calibration{PrefillTokensPerSecond: 20000})
	req := &Request{ID: "r", Model: "m", Prompt: make([]byte, 4096)}
	allocs := pickDoneAllocs(t, s, req)
	if allocs != 0 {
		t.Errorf("Pick+Done under the seconds guard allocates %v times per request, want 0", allocs)
	}
}

// TestAffinityScale: the affinity scorers' share of the weights in force
// over their share of the calm weights, clamped to [0,1]; 1 without a
// calm vector or calm affinity. Scorers: prefix (affinity), inflight,
// time-cost (distribution).
func TestAffinityScale(t *testing.T) {
	aff := []bool{true, false, false}
	for _, tc := range []struct {
		name         string
		values, calm []float64
		want         float64
	}{
		// calm: the vectors are equal → 1.
		{"calm", []float64{32, 1, 8}, []float64{32, 1, 8}, 1},
		// static mode: no calm vector → 1.
		{"static", []float64{32, 1, 8}, nil, 1},
		// rebalance: 0.1 / (32/41) = 0.128125.
		{"rebalance", []float64{0.1, 0.18, 0.72}, []float64{32, 1, 8}, 0.128125},
		// affinity share 0.5 against calm's 0.25: clamped to 1.
		{"more affinity than calm", []float64{1, 1, 0}, []float64{1, 3, 0}, 1},
		// no affinity weight when calm → 1 (nothing to scale).
		{"no calm affinity", []float64{0, 1, 1}, []float64{0, 1, 1}, 1},
		// every weight 0 → 1.
		{"zero weights", []float64{0, 0, 0}, []float64{1, 1, 1}, 1},
		// a calm vector of another length → 1.
		{"misaligned", []float64{1, 1, 1}, []float64{1, 1}, 1},
	} {
		w := &Weights{Values: tc.values, Calm: tc.calm}
		if got := affinityScale(w, aff); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	var cs CycleState
	if got := cs.AffinityScale(); got != 1 {
		t.Errorf("zero CycleState: %v, want 1", got)
	}
}

// TestSchedulerWaitBound: the wait bound keeps a request off a pod held by
// a long prefill, which no request count sees. Pods a:1 and b:1 at the
// prior 1,000 tokens/s; affinity a 1, b 0; a count guard that never fires
// (slack 100); no prefix index, so tokens are bytes ÷ 4. A giant prompt
// (40,000 bytes = 10,000 tokens) goes to a:1 and is held before its
// first byte. A 400-byte request then expects 10.1 s on a:1 and 0.1 s on
// b:1: with wait_factor 4 and wait_slack 2 the limit is max(0.4, 2.1) =
// 2.1 s, so it goes to b:1, the pick counts as wait-bounded and charges
// no herd pick; without the bound it follows its affinity to a:1. Once
// the giant's first byte is in, a:1 expects 0.1 s again and wins.
func TestSchedulerWaitBound(t *testing.T) {
	for _, factor := range []float64{0, 4} {
		cfg := DefaultConfig()
		cfg.Guard = GuardConfig{Factor: 2, Slack: 100, PrefillTokensPerSecond: 1000, WaitFactor: factor, WaitSlack: 2}
		entries := []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1, "b:1": 0}}, Weight: 1}}
		s, err := New(cfg, entries, nil, MaxScore{}, Deps{Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		s.SetEndpoints(eps("a:1", "b:1"))
		giant, err := s.Pick(context.Background(), &Request{Prompt: make([]byte, 40000)})
		if err != nil {
			t.Fatal(err)
		}
		if giant.Endpoint.Address != "a:1" {
			t.Fatalf("factor %v: the giant prompt went to %s, want a:1", factor, giant.Endpoint.Address)
		}
		small, err := s.Pick(context.Background(), &Request{Prompt: make([]byte, 400)})
		if err != nil {
			t.Fatal(err)
		}
		x := small.Explain()
		want, bounded := "a:1", 0.0
		if factor > 0 {
			want, bounded = "b:1", 1
			a, b := x.Candidates[0], x.Candidates[1]
			if a.GuardWaitSeconds == nil || math.Abs(*a.GuardWaitSeconds-10.1) > 1e-9 || !a.OverWait || a.OverBound {
				t.Errorf("a:1 explained as wait %v, over_wait %v, over_bound %v; want 10.1 s, over the wait bound, within the load guard's", a.GuardWaitSeconds, a.OverWait, a.OverBound)
			}
			if b.GuardWaitSeconds == nil || math.Abs(*b.GuardWaitSeconds-0.1) > 1e-9 || b.OverWait {
				t.Errorf("b:1 explained as wait %v, over_wait %v; want 0.1 s, within", b.GuardWaitSeconds, b.OverWait)
			}
		} else if x.Candidates[0].GuardWaitSeconds != nil || x.Candidates[0].OverWait {
			t.Errorf("no wait bound: a:1 explained with a wait %v, over_wait %v", x.Candidates[0].GuardWaitSeconds, x.Candidates[0].OverWait)
		}
		if small.Endpoint.Address != want {
			t.Errorf("factor %v: the small request went to %s, want %s", factor, small.Endpoint.Address, want)
		}
		if got := testutil.ToFloat64(s.m.waitBounded); got != bounded {
			t.Errorf("factor %v: %v wait-bounded picks, want %v", factor, got, bounded)
		}
		if p := s.Pool().Pointers()[0]; p.Address != "a:1" {
			t.Fatalf("pool[0] is %s, want a:1", p.Address)
		}
		if h := s.Pool().Pointers()[0].HerdPicks(); h != 0 {
			t.Errorf("factor %v: a:1 charged %d herd picks, want 0", factor, h)
		}
		small.Done(Outcome{})
		giant.FirstByte()
		after, err := s.Pick(context.Background(), &Request{Prompt: make([]byte, 400)})
		if err != nil {
			t.Fatal(err)
		}
		if after.Endpoint.Address != "a:1" {
			t.Errorf("factor %v: after the giant's first byte the request went to %s, want a:1", factor, after.Endpoint.Address)
		}
		after.Done(Outcome{})
		giant.Done(Outcome{})
	}
}

func TestGuardConfigValidateWait(t *testing.T) {
	for _, tc := range []struct {
		g    GuardConfig
		want string
	}{
		{GuardConfig{Factor: 2, WaitFactor: 0.5, PrefillTokensPerSecond: 1}, "guard.wait_factor"},
		{GuardConfig{Factor: 2, WaitFactor: math.NaN(), PrefillTokensPerSecond: 1}, "guard.wait_factor"},
		{GuardConfig{Factor: 2, WaitFactor: 4, WaitSlack: -1, PrefillTokensPerSecond: 1}, "guard.wait_slack"},
		{GuardConfig{Factor: 2, WaitFactor: 4, WaitSlack: math.Inf(1), PrefillTokensPerSecond: 1}, "guard.wait_slack"},
		{GuardConfig{Factor: 2, WaitFactor: 4, WaitSlack: 2}, "guard.prefill_tokens_per_second"},
		{GuardConfig{Factor: 2, WaitFactor: math.Inf(1), PrefillTokensPerSecond: 1}, "guard.wait_factor"},
		{GuardConfig{Factor: 2, WaitFactor: 4, WaitSlack: math.NaN(), PrefillTokensPerSecond: 1}, "guard.wait_slack"},
		{GuardConfig{Factor: 2, WaitFactor: 4, WaitSlack: 3601, PrefillTokensPerSecond: 1}, "guard.wait_slack"},
		{GuardConfig{Factor: 2, JoinFactor: 0.9, PrefillTokensPerSecond: 1}, "guard.join_factor"},
		{GuardConfig{Factor: 2, JoinFactor: math.NaN(), PrefillTokensPerSecond: 1}, "guard.join_factor"},
		{GuardConfig{Factor: 2, JoinFactor: 2e6, PrefillTokensPerSecond: 1}, "guard.join_factor"},
		{GuardConfig{Factor: 2, JoinFactor: 1.5}, "guard.prefill_tokens_per_second"},
	} {
		if err := tc.g.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.g, err, tc.want)
		}
	}
	if g := DefaultGuardConfig(); g.WaitFactor != 0 || g.WaitSlack != DefaultWaitSlackSeconds {
		t.Errorf("default wait bound factor %v slack %v, want off with slack %v", g.WaitFactor, g.WaitSlack, DefaultWaitSlackSeconds)
	}
}

func TestGuardedPickWaitBoundAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race; CI runs this test in its no-race pass")
	}
	cfg := DefaultConfig()
	cfg.Guard = GuardConfig{Factor: 2.5, Slack: 6, CrowdFactor: 1.5, CrowdSlack: 3, Unit: GuardRequests, PrefillTokensPerSecond: 13100, WaitFactor: 4, WaitSlack: 2}
	s, err := New(cfg, []ScorerEntry{{Name: "f", Scorer: fixedScorer{cat: CategoryAffinity}, Weight: 1}}, []Filter{ModelFilter{}, HealthyFilter{}}, MaxScore{}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(eps("a:1", "b:1", "c:1", "d:1"))
	req := &Request{ID: "r", Model: "m", Prompt: make([]byte, 4096)}
	if allocs := pickDoneAllocs(t, s, req); allocs != 0 {
		t.Errorf("Pick+Done under the wait bound allocates %v times per request, want 0", allocs)
	}
}

// TestWaitBoundHerdOnly: under HerdOnly a pick within the load guard is
// ranked with the calm weights, whose totals can exceed the weights in
// force; the wait bound still ranks a candidate over it last. Calm
// affinity 32 makes a:1 the calm choice by 31 points; the weights in
// force sum to 2. A held 40,000-byte prompt on a:1 puts a 400-byte
// request's wait there at 10.1 s against 0.1 s on b:1 (prior 1,000
// tokens/s, bytes ÷ 4), over max(4 × 0.1, 0.1 + 2).
func TestWaitBoundHerdOnly(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Guard = GuardConfig{PrefillTokensPerSecond: 1000, WaitFactor: 4, WaitSlack: 2}
	entries := []ScorerEntry{
		{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1, "b:1": 0}}, Weight: 1},
		{Name: "dist", Scorer: fixedScorer{cat: CategoryDistribution, scores: map[string]float64{"a:1": 0, "b:1": 1}}, Weight: 1},
	}
	s, err := New(cfg, entries, nil, MaxScore{}, Deps{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(eps("a:1", "b:1"))
	if err := s.Publish(&Weights{Version: 2, Values: []float64{1, 1}, Guard: Guard{Factor: 2, Slack: 100}, Calm: []float64{32, 1}, HerdOnly: true}); err != nil {
		t.Fatal(err)
	}
	giant, err := s.Pick(context.Background(), &Request{Prompt: make([]byte, 40000)})
	if err != nil {
		t.Fatal(err)
	}
	if giant.Endpoint.Address != "a:1" || !giant.RankedCalm() {
		t.Fatalf("giant prompt: %s (ranked calm %v), want a:1 by the calm weights", giant.Endpoint.Address, giant.RankedCalm())
	}
	small, err := s.Pick(context.Background(), &Request{Prompt: make([]byte, 400)})
	if err != nil {
		t.Fatal(err)
	}
	if small.Endpoint.Address != "b:1" || !small.OverWait(0) || small.OverBound(0) {
		t.Errorf("small request: %s (a:1 over the wait bound %v, over the load guard %v); want b:1, a:1 over the wait bound only",
			small.Endpoint.Address, small.OverWait(0), small.OverBound(0))
	}
	if got := testutil.ToFloat64(s.m.waitBounded); got != 1 {
		t.Errorf("%v wait-bounded picks, want 1", got)
	}
	small.Done(Outcome{})
	giant.Done(Outcome{})
}

// joinMatcher is a MatchProducer that reports a prompt starting with 'x'
// as held in full by every candidate and joining on a:1, and any other
// prompt as held by none; it scores a:1 1 and the others 0.
type joinMatcher struct{}

func (joinMatcher) Category() Category { return CategoryAffinity }
func (joinMatcher) ReportsJoins() bool { return true }
func (joinMatcher) Score(_ *CycleState, _ *Request, eps []*Endpoint, out []float64) {
	for i, e := range eps {
		out[i] = 0
		if e.Address == "a:1" {
			out[i] = 1
		}
	}
}
func (joinMatcher) Match(cs *CycleState, req *Request, eps []*Endpoint) {
	n := int64(len(req.Prompt) / 4)
	cs.SetMatch(n, n)
	if len(req.Prompt) == 0 || req.Prompt[0] != 'x' {
		return
	}
	for _, e := range eps {
		cs.SetCached(e, n)
		if e.Address == "a:1" {
			cs.SetJoining(e)
		}
	}
}

// TestJoinBoundShortestWaitZero: a candidate that holds the whole prompt
// and has nothing queued waits 0 s, so the join bound's limit is 0 and a
// joining candidate with any wait ranks after it. A 4,000-byte prompt no
// one holds is queued on a:1 (1,000 tokens at 1,000 tokens/s); an 'x'
// prompt held everywhere then waits 1 s on a:1, where it is joining, and
// 0 on b:1: it goes to b:1 against its affinity, as a join-spread pick
// (not a wait-bounded one: the wait bound is off). A request a:1 is not
// joining for stays there.
func TestJoinBoundShortestWaitZero(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Guard = GuardConfig{Factor: 2, Slack: 100, PrefillTokensPerSecond: 1000, JoinFactor: 1.5}
	s, err := New(cfg, []ScorerEntry{{Name: "m", Scorer: joinMatcher{}, Weight: 1}}, nil, MaxScore{}, Deps{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(eps("a:1", "b:1"))
	queued, err := s.Pick(context.Background(), &Request{Prompt: make([]byte, 4000), Subset: []string{"a:1"}})
	if err != nil {
		t.Fatal(err)
	}
	x, err := s.Pick(context.Background(), &Request{Prompt: []byte("x" + strings.Repeat("y", 399))})
	if err != nil {
		t.Fatal(err)
	}
	if x.Endpoint.Address != "b:1" || !x.OverWait(0) {
		t.Errorf("joining request: %s (a:1 over the wait bound %v), want b:1 with a:1 over it", x.Endpoint.Address, x.OverWait(0))
	}
	if got, wb := testutil.ToFloat64(s.m.joinSpread), testutil.ToFloat64(s.m.waitBounded); got != 1 || wb != 0 {
		t.Errorf("%v join-spread and %v wait-bounded picks, want 1 and 0", got, wb)
	}
	other, err := s.Pick(context.Background(), &Request{Prompt: make([]byte, 400)})
	if err != nil {
		t.Fatal(err)
	}
	if other.Endpoint.Address != "a:1" || other.OverWait(0) {
		t.Errorf("request a:1 is not joining for: %s (over the wait bound %v), want a:1", other.Endpoint.Address, other.OverWait(0))
	}
	for _, d := range []*Decision{other, x, queued} {
		d.Done(Outcome{})
	}
}
