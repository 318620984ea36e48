package main

import (
	"fmt"
	"testing"

	"github.com/trimtab/trimtab/bench"
	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/scenario"
)

// TestBenchAgentsThroughServe: bench plays agent sessions through an
// in-process serve (adaptive-session, no session header: keys from the
// conversation's lineage) in front of a fake fleet of 3 servers on
// 127.0.0.1 — Responses sessions continued by previous_response_id, then
// Messages sessions that resend the conversation. Every request streams
// to the end; at least 90 % of continuations reach the pod of their
// session's turn before (the guard may move a few) and those read that
// turn's whole prompt from the pod's cache (its 16-token blocks: ≥ its
// prompt − 15 tokens); the summary has the continuation hit ratio and the
// router's herd picks were read.
func TestBenchAgentsThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time bench runs through serve: skipped under -short")
	}
	for _, api := range []string{scenario.AgentAPIResponses, scenario.AgentAPIMessages} {
		t.Run(api, func(t *testing.T) {
			sc, err := sim.ParseScenario([]byte(fmt.Sprintf(`
name: agents
duration: 4s
warmup: 400ms
servers: 3
timeout: 10s
workload: {kind: agentic, api: %s, session_keys: lineage, groups: 1, system_tokens: 200, question_tokens: 40, output_tokens: 8,
  tool_output_tokens: 200, tool_latency: 50ms, turns: 4, fan_out: 1, sub_agent_turns: 2}
load: {mode: closed, levels: [6]}
`, api)), "")
			if err != nil {
				t.Fatal(err)
			}
			rep := benchThroughServe(t, sc, 3, benchPolicies(t, sim.PolicyAdaptiveSession))
			run := rep.Runs[0]
			last := map[uint64]bench.Request{}
			conts, stayed := 0, 0
			for _, q := range run.Requests {
				if q.Err != "" {
					t.Fatalf("request of session %d failed: %s", q.Session, q.Err)
				}
				if p, ok := last[q.Session]; ok && q.Continuation {
					conts++
					if q.Endpoint == p.Endpoint {
						stayed++
						if q.CachedTokens < p.PromptTokens-15 {
							t.Errorf("session %d on %s: %d tokens cached, the turn before prefilled %d there", q.Session, q.Endpoint, q.CachedTokens, p.PromptTokens)
						}
					}
				}
				last[q.Session] = q
			}
			s := run.Summary(sc.Name)
			t.Logf("%s: %d continuations, %d on their session's pod; continuation hit ratio %.3f, herd picks %d", api, conts, stayed,
				*s.ContinuationHitRatio, s.HerdPicks)
			if conts < 10 || stayed*10 < conts*9 {
				t.Errorf("%d of %d continuations stayed on their session's pod, want ≥ 90 %% of ≥ 10", stayed, conts)
			}
			if run.AdminErr != "" {
				t.Errorf("admin: %s", run.AdminErr)
			}
		})
	}
}
