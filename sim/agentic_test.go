package sim

import (
	"math/rand/v2"
	"testing"
)

// agenticRun runs the shipped agentic-surge scenario under
// adaptive-session with the given session keys and agent API.
func agenticRun(t *testing.T, keys, api string, seed uint64) RunSummary {
	t.Helper()
	sc, err := ShippedScenario("agentic-surge")
	if err != nil {
		t.Fatal(err)
	}
	set := func(w *Workload) { w.SessionKeys, w.API = keys, api }
	set(&sc.Workload)
	for i := range sc.Phases {
		set(&sc.Phases[i].work)
	}
	p, _ := builtinPolicy(PolicyAdaptiveSession)
	res, err := Run(RunConfig{Scenario: sc, Policy: p, Level: sc.Load.Levels[0], Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary()
	if s.ContinuationHitRatio == nil || s.TTFTP99 == nil {
		t.Fatalf("%s %s seed %d: no continuations measured", api, keys, seed)
	}
	t.Logf("%-9s %-7s seed %d: continuation hit %.4f, herd picks %d, busiest pod ratio %.2f, TTFT p99 %.0f ms",
		api, keys, seed, *s.ContinuationHitRatio, s.HerdPicks, s.BusiestPodRatio, *s.TTFTP99)
	return s
}

// TestAgenticKeylessMatchesHeaders: on the agentic surge (Responses
// continuations, whose router prompt is the scaffold and the new tool
// result only), keys derived from the lineage keep continuations on their
// pods as well as session headers do — continuation prefix-hit ratio
// ≥ 95 % of the headers' run, seeds 1–3 — without herding more; keying
// by previous_response_id (a new session every turn) loses the history.
func TestAgenticKeylessMatchesHeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("nine simulated runs of 4 minutes")
	}
	for seed := uint64(1); seed <= 3; seed++ {
		hdr := agenticRun(t, SessionKeysHeader, AgentAPIResponses, seed)
		lin := agenticRun(t, SessionKeysLineage, AgentAPIResponses, seed)
		none := agenticRun(t, SessionKeysNone, AgentAPIResponses, seed)
		if *lin.ContinuationHitRatio < 0.95**hdr.ContinuationHitRatio {
			t.Errorf("seed %d: continuation hit ratio %.4f without headers, want ≥ 95 %% of %.4f with them", seed, *lin.ContinuationHitRatio, *hdr.ContinuationHitRatio)
		}
		if lin.HerdPicks > 2*hdr.HerdPicks+10 || lin.BusiestPodRatio > hdr.BusiestPodRatio+0.1 {
			t.Errorf("seed %d: without headers %d herd picks, busiest ratio %.2f; with them %d, %.2f", seed, lin.HerdPicks, lin.BusiestPodRatio, hdr.HerdPicks, hdr.BusiestPodRatio)
		}
		if *none.ContinuationHitRatio > 0.95**hdr.ContinuationHitRatio {
			t.Errorf("seed %d: keyed by previous_response_id the hit ratio is %.4f, within 5 %% of the headers' %.4f: the scenario does not need the lineage", seed, *none.ContinuationHitRatio, *hdr.ContinuationHitRatio)
		}
	}
}

// TestAgenticGenerator: a lead's context grows by its tool call and tool
// result every turn on its team's scaffold; the lineage key is one per
// session and differs between sessions on one scaffold; a Responses
// continuation shows the router the scaffold and the new result only; a
// sub-agent starts its own session on its lead's scaffold.
func TestAgenticGenerator(t *testing.T) {
	w := Workload{Kind: KindAgentic, Groups: 2, SystemTokens: 1000, QuestionTokens: 100, OutputTokens: 50, Turns: 3,
		AgenticWorkload: AgenticWorkload{ToolOutputTokens: 200, FanOut: 1, API: AgentAPIResponses, SessionKeys: SessionKeysLineage}}
	if errs := w.validate("workload.", ModeClosed); len(errs) != 0 {
		t.Fatal(errs)
	}
	g := &agenticGen{w: &w, seed: 7}
	rng := rand.New(rand.NewPCG(1, 2))
	var turns []reqSpec
	for range 4 { // client 0 (the lead of team 0): 3 turns, then a new session
		var r reqSpec
		g.next(rng, 0, &r)
		turns = append(turns, reqSpec{segs: append([]segment(nil), r.segs...), routerSegs: append([]segment(nil), r.routerSegs...),
			sessionKey: r.sessionKey, continuation: r.continuation, out: r.out})
	}
	// Turn t: scaffold, task, then t × (call, result): 2, 4, 6 segments.
	for i, want := range []int{2, 4, 6, 2} {
		if got := len(turns[i].segs); got != want {
			t.Errorf("request %d: %d segments, want %d", i, got, want)
		}
	}
	if turns[0].continuation || !turns[1].continuation || !turns[2].continuation || turns[3].continuation {
		t.Errorf("continuation flags %v %v %v %v, want false true true false", turns[0].continuation, turns[1].continuation, turns[2].continuation, turns[3].continuation)
	}
	if k := turns[0].sessionKey; k == 0 || turns[1].sessionKey != k || turns[2].sessionKey != k || turns[3].sessionKey == k {
		t.Errorf("keys %x %x %x %x, want one key for the first session and another for the second", turns[0].sessionKey, turns[1].sessionKey, turns[2].sessionKey, turns[3].sessionKey)
	}
	if turns[3].segs[0] != turns[0].segs[0] {
		t.Error("the team's next session is on another scaffold")
	}
	// Turn 1 (a continuation): the router sees the scaffold and turn 0's
	// tool result (segment 3 of its history).
	if r := turns[1].routerSegs; len(r) != 2 || r[0] != turns[1].segs[0] || r[1] != turns[1].segs[3] {
		t.Errorf("router prompt %v, want scaffold and the last tool result of %v", r, turns[1].segs)
	}
	if len(turns[0].routerSegs) != 0 {
		t.Error("a first turn has a router prompt of its own")
	}
	// Client 1 is team 0's sub-agent: same scaffold, its own task.
	var sub reqSpec
	g.next(rng, 1, &sub)
	if sub.segs[0] != turns[0].segs[0] || sub.segs[1] == turns[0].segs[1] || sub.sessionKey == turns[0].sessionKey {
		t.Error("the sub-agent does not share its lead's scaffold, or shares its task")
	}
	// Client 2 leads team 1: scaffold 1 of 2.
	var other reqSpec
	g.next(rng, 2, &other)
	if other.segs[0] == turns[0].segs[0] {
		t.Error("team 1 uses team 0's scaffold")
	}
}
