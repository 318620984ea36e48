package scenario

import (
	"math/rand/v2"
	"testing"
)

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
	var turns []Request
	for range 4 { // client 0 (the lead of team 0): 3 turns, then a new session
		var r Request
		g.Next(rng, 0, &r)
		turns = append(turns, Request{Segs: append([]Segment(nil), r.Segs...), RouterSegs: append([]Segment(nil), r.RouterSegs...),
			SessionKey: r.SessionKey, Continuation: r.Continuation, Out: r.Out})
	}
	// Turn t: scaffold, task, then t × (call, result): 2, 4, 6 segments.
	for i, want := range []int{2, 4, 6, 2} {
		if got := len(turns[i].Segs); got != want {
			t.Errorf("request %d: %d segments, want %d", i, got, want)
		}
	}
	if turns[0].Continuation || !turns[1].Continuation || !turns[2].Continuation || turns[3].Continuation {
		t.Errorf("continuation flags %v %v %v %v, want false true true false", turns[0].Continuation, turns[1].Continuation, turns[2].Continuation, turns[3].Continuation)
	}
	if k := turns[0].SessionKey; k == 0 || turns[1].SessionKey != k || turns[2].SessionKey != k || turns[3].SessionKey == k {
		t.Errorf("keys %x %x %x %x, want one key for the first session and another for the second", turns[0].SessionKey, turns[1].SessionKey, turns[2].SessionKey, turns[3].SessionKey)
	}
	if turns[3].Segs[0] != turns[0].Segs[0] {
		t.Error("the team's next session is on another scaffold")
	}
	// Turn 1 (a continuation): the router sees the scaffold and turn 0's
	// tool result (segment 3 of its history).
	if r := turns[1].RouterSegs; len(r) != 2 || r[0] != turns[1].Segs[0] || r[1] != turns[1].Segs[3] {
		t.Errorf("router prompt %v, want scaffold and the last tool result of %v", r, turns[1].Segs)
	}
	if len(turns[0].RouterSegs) != 0 {
		t.Error("a first turn has a router prompt of its own")
	}
	// Client 1 is team 0's sub-agent: same scaffold, its own task.
	var sub Request
	g.Next(rng, 1, &sub)
	if sub.Segs[0] != turns[0].Segs[0] || sub.Segs[1] == turns[0].Segs[1] || sub.SessionKey == turns[0].SessionKey {
		t.Error("the sub-agent does not share its lead's scaffold, or shares its task")
	}
	// Client 2 leads team 1: scaffold 1 of 2.
	var other Request
	g.Next(rng, 2, &other)
	if other.Segs[0] == turns[0].Segs[0] {
		t.Error("team 1 uses team 0's scaffold")
	}
}
