package sim

import (
	"slices"
	"testing"
	"time"
)

// TestTradeLaw runs the shipped adaptive profile on the chat
// scenario's traffic for 90 s: on the pool of two GPU generations the
// learned prefill throughputs are ≈ 3.8 apart (the H100's 2,048-token
// chunk is 3.8× faster, docs/calibrations.md), above spread_on 1.5, so the
// law moves the calm weights to the trade shape (time-cost > 0); on the
// homogeneous A100 pool every endpoint shares its class's fit, the spread
// is 1 and the weights never leave the profile's shape (time-cost 0 at
// every sample).
func TestTradeLaw(t *testing.T) {
	for _, tc := range []struct {
		engine string
		moves  bool
	}{
		{"mixed-a100-h100-llama-3.1-8b", true},
		{"a100-40gb-llama-3.1-8b", false},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			first, last := timeCostWeight(t, tc.engine, "chat", 125, 90*time.Second)
			switch {
			case tc.moves && !(last > 0):
				t.Errorf("time-cost weight at the end %v, want > 0: the law did not trade on a pool of two GPU generations", last)
			case !tc.moves && first >= 0:
				t.Errorf("time-cost weight > 0 from %v s on a homogeneous pool, want 0 throughout", first)
			}
		})
	}
}

// timeCostWeight runs the shipped adaptive profile on scenario at level
// for dur on engine (seed 1) and returns when the time-cost scorer's
// weight was first above 0 (−1: never) and its weight at the end.
func timeCostWeight(t *testing.T, engine, scenario string, level float64, dur time.Duration) (first, last float64) {
	t.Helper()
	pols, err := Policies([]string{PolicyAdaptive})
	if err != nil {
		t.Fatal(err)
	}
	scs, err := LoadScenarios([]string{scenario}, dur)
	if err != nil {
		t.Fatal(err)
	}
	if err := ApplyEngine(scs, engine); err != nil {
		t.Fatal(err)
	}
	res, err := Run(RunConfig{Scenario: scs[0], Policy: pols[0], Level: level, Seed: 1, Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	tl := res.Timeline
	i := slices.Index(tl.Scorers, "time-cost")
	if i < 0 {
		t.Fatalf("no time-cost scorer in the timeline's %v", tl.Scorers)
	}
	first, last = -1, tl.Weights[i][len(tl.T)-1]
	for j, w := range tl.Weights[i] {
		if w > 0 && first < 0 {
			first = tl.T[j]
		}
	}
	t.Logf("%s %s@%g: time-cost weight first > 0 at %v s, last %.3f", engine, scenario, level, first, last)
	return first, last
}
