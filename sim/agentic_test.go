package sim

import (
	"testing"

	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// agenticRun runs the shipped agentic-surge scenario under
// adaptive-session with the given session keys and agent API.
func agenticRun(t *testing.T, keys, api string, seed uint64) report.RunSummary {
	t.Helper()
	sc, err := ShippedScenario("agentic-surge")
	if err != nil {
		t.Fatal(err)
	}
	set := func(w *scenario.Workload) { w.SessionKeys, w.API = keys, api }
	set(&sc.Workload)
	for i := range sc.Phases {
		set(&(*sc.Phases[i].Work()))
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
		hdr := agenticRun(t, scenario.SessionKeysHeader, scenario.AgentAPIResponses, seed)
		lin := agenticRun(t, scenario.SessionKeysLineage, scenario.AgentAPIResponses, seed)
		none := agenticRun(t, scenario.SessionKeysNone, scenario.AgentAPIResponses, seed)
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
