package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

// TestGuardOnlyPolicy: guard-only is the adaptive profile with the loop
// off and its guard kept; adaptive-off drops both; adaptive keeps both.
func TestGuardOnlyPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		guard  float64
		loop   bool
		static bool
	}{
		{PolicyGuardOnly, 2.5, false, true},
		{PolicyAdaptiveOff, 0, false, true},
		{PolicyAdaptive, 2.5, true, false},
	} {
		ps, err := Policies([]string{tc.name})
		if err != nil {
			t.Fatal(err)
		}
		s, loop, err := ps[0].Build(1, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if w := s.Weights(); w.Guard.Factor != tc.guard {
			t.Errorf("%s: guard factor %v, want %v", tc.name, w.Guard.Factor, tc.guard)
		}
		if (loop != nil) != tc.loop {
			t.Errorf("%s: loop %v, want %v", tc.name, loop != nil, tc.loop)
		}
		f, err := ps[0].Profile()
		if err != nil {
			t.Fatalf("%s profile: %v", tc.name, err)
		}
		if f.Adaptive.Enabled == tc.static || f.Scheduler.Guard.Factor != tc.guard {
			t.Errorf("%s profile: adaptive %v guard %v", tc.name, f.Adaptive.Enabled, f.Scheduler.Guard.Factor)
		}
	}
	if !slices.Contains(PolicyNames(), PolicyGuardOnly) {
		t.Errorf("policy names %v lack %s", PolicyNames(), PolicyGuardOnly)
	}
}

// pickOn picks req on s and returns the decision (still open).
func pickOn(t *testing.T, s *scheduler.Scheduler, prompt string, subset ...string) *scheduler.Decision {
	t.Helper()
	d, err := s.Pick(context.Background(), &scheduler.Request{Prompt: []byte(prompt), Subset: subset})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSMGLeastLoadDecisions: hand-computed least_load waits, the dispatch
// credit, cache hits and spills. Prompts are 400 bytes = 100 tokens.
//
//	a: 2 waiting, KV 0.5: 2·1024/2000 + 0.15·0.5/0.5 = 1.174 s
//	b: 0 waiting, KV 0.9: 0 + 0.15·0.9/0.1         = 1.35 s
//	c: 1 waiting, KV 0:   1024/2000                 = 0.512 s
func TestSMGLeastLoadDecisions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pool := func(at time.Time) []scheduler.Endpoint {
		return []scheduler.Endpoint{
			{Address: "a:1", Waiting: 2, KVUtil: 0.5, ScrapedAt: at},
			{Address: "b:1", KVUtil: 0.9, ScrapedAt: at},
			{Address: "c:1", Waiting: 1, ScrapedAt: at},
		}
	}
	s, _, err := buildSMGLeastLoad(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(pool(t0))
	miss := func(i int) string { return fmt.Sprintf("%03d", i) + strings.Repeat("x", 397) }
	// Misses: c until its credit lifts it above a: 0.512 + n·100/2000 >
	// 1.174 from n = 14 on, so picks 1–14 go to c and the 15th to a.
	for i := range 15 {
		d := pickOn(t, s, miss(i))
		want := "c:1"
		if i == 14 {
			want = "a:1"
		}
		if d.Endpoint.Address != want {
			t.Fatalf("miss %d went to %s, want %s", i+1, d.Endpoint.Address, want)
		}
		d.Done(scheduler.Outcome{})
	}
	// A newer scrape resets the credit: c again.
	s.SetEndpoints(pool(t0.Add(time.Second)))
	if d := pickOn(t, s, miss(99)); d.Endpoint.Address != "c:1" {
		t.Errorf("after a new scrape the miss went to %s, want c:1", d.Endpoint.Address)
	} else {
		d.Done(scheduler.Outcome{})
	}
	// Hit: miss(0) was learned on c at the pick; put a prompt on b and ask
	// again: match 1 > 0.5 goes to b despite its 1.35 s.
	hot := strings.Repeat("h", 400)
	pickOn(t, s, hot, "b:1").Done(scheduler.Outcome{})
	if d := pickOn(t, s, hot); d.Endpoint.Address != "b:1" {
		t.Errorf("hit went to %s, want b:1 (the prefix holder)", d.Endpoint.Address)
	} else {
		d.Done(scheduler.Outcome{})
	}
	// Spill: 33 requests held on b: max − min = 33 > 32 and 33 > 1.1·0, so
	// the hit is overruled by the least expected wait: c (credit 100 tokens
	// since the scrape: 0.562 s).
	var held []*scheduler.Decision
	for i := range 33 {
		held = append(held, pickOn(t, s, miss(200+i), "b:1"))
	}
	if d := pickOn(t, s, hot); d.Endpoint.Address != "c:1" {
		t.Errorf("spill went to %s, want c:1", d.Endpoint.Address)
	} else {
		d.Done(scheduler.Outcome{})
	}
	for _, d := range held {
		d.Done(scheduler.Outcome{})
	}
}

// TestDynamoKVCostDecisions: hand-computed Dynamo costs in 16-token
// blocks. P is 256 bytes = 64 tokens (one 64-token prefix block); Q is 512
// bytes = 128 tokens starting with P.
func TestDynamoKVCostDecisions(t *testing.T) {
	s, _, err := buildDynamoKVCost(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints([]scheduler.Endpoint{{Address: "a:1"}, {Address: "b:1"}, {Address: "c:1"}})
	p := strings.Repeat("p", 256)
	q := p + strings.Repeat("q", 256)
	cost := func(d *scheduler.Decision) map[string]float64 {
		out := map[string]float64{}
		for i, e := range d.Candidates() {
			out[e.Address] = d.Score(1, i)
		}
		return out
	}
	// P held on a: a pending 64, active 64, holds P.
	held := pickOn(t, s, p, "a:1")
	// P again: a = (64 + 64 − 64)/16 + (64 + 64)/16 = 4 + 8 = 12;
	// b, c = (0 + 64)/16 + (0 + 64)/16 = 8: b or c.
	d := pickOn(t, s, p)
	if c := cost(d); c["a:1"] != 0 || c["b:1"] != 1 || c["c:1"] != 1 {
		t.Errorf("P with P held on a:1: one-hot %v, want b:1 and c:1 cheapest", c)
	}
	other := d.Endpoint.Address
	d.Done(scheduler.Outcome{})
	held.FirstByte()
	held.Done(scheduler.Outcome{})
	// Q after P completed on a (and on one of b, c, which holds P too):
	// a = (0 + 128 − 64)/16 + (0 + 128)/16 = 4 + 8 = 12, likewise the other
	// holder; the third = 128/16 + 128/16 = 16.
	d = pickOn(t, s, q)
	c := cost(d)
	for _, e := range []string{"a:1", "b:1", "c:1"} {
		want := 0.0
		if e == "a:1" || e == other {
			want = 1
		}
		if c[e] != want {
			t.Errorf("Q: %s one-hot %v, want %v (P's holders a:1 and %s cost 12, the third 16)", e, c[e], want, other)
		}
	}
	d.Done(scheduler.Outcome{})
}

// TestFieldPolicies: every field policy is listed, builds, and picks.
func TestFieldPolicies(t *testing.T) {
	for _, name := range []string{PolicyLLMDTokenLoad, PolicySMGLeastLoad, PolicyDynamoKVCost, PolicyStatic322} {
		if !slices.Contains(PolicyNames(), name) {
			t.Errorf("%s not listed", name)
		}
		ps, err := Policies([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		s, _, err := ps[0].Build(1, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s.SetEndpoints([]scheduler.Endpoint{{Address: "a:1"}, {Address: "b:1"}})
		pickOn(t, s, strings.Repeat("z", 1024)).Done(scheduler.Outcome{})
	}
	ps, _ := Policies([]string{PolicyLLMDTokenLoad})
	f, err := ps[0].Profile()
	if err != nil || !slices.Contains(f.Filters, "prefix-affinity") || f.PrefixAffinity.MaxTokensInFlightPenalty != 286720 {
		t.Errorf("llmd-token-load profile %v, %v", f, err)
	}
}

// TestProfilePoliciesBuildTheirProfile: every built-in policy that is a
// profile builds exactly that profile — the same scorers at the same
// weights, the same guard, a loop exactly when adaptive.enabled — so the
// simulator runs what bench serves through `trimtab serve`.
func TestProfilePoliciesBuildTheirProfile(t *testing.T) {
	n := 0
	for _, p := range append(builtinPolicies(), optionalPolicies()...) {
		if p.Profile == nil {
			continue
		}
		n++
		f, err := p.Profile()
		if err != nil {
			t.Fatalf("%s profile: %v", p.Name, err)
		}
		s, loop, err := p.Build(1, nil)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		fc := *f
		fc.Scheduler.Seed = 1
		want, err := fc.BuildScheduler(scorers.InTree(), scheduler.Deps{})
		if err != nil {
			t.Fatalf("%s profile build: %v", p.Name, err)
		}
		var names, wantNames []string
		for _, e := range s.Scorers() {
			names = append(names, e.Name)
		}
		for _, e := range want.Scorers() {
			wantNames = append(wantNames, e.Name)
		}
		if !slices.Equal(names, wantNames) || !slices.Equal(s.Weights().Values, want.Weights().Values) || s.Weights().Guard != want.Weights().Guard {
			t.Errorf("%s: scorers %v weights %v guard %+v; its profile gives %v %v %+v", p.Name,
				names, s.Weights().Values, s.Weights().Guard, wantNames, want.Weights().Values, want.Weights().Guard)
		}
		if (loop != nil) != f.Adaptive.Enabled {
			t.Errorf("%s: loop %v, profile adaptive.enabled %v", p.Name, loop != nil, f.Adaptive.Enabled)
		}
	}
	// least-queue, prefix-only, static-3-2-2, llmd-token-load, adaptive,
	// adaptive-off, guard-only, tuned-static, adaptive-session,
	// adaptive-lora, adaptive-flow: 11 policies are profiles.
	if n != 11 {
		t.Errorf("%d policies are profiles, want 11", n)
	}
}
