package sim

import (
	"testing"
	"time"
)

// TestFillLaw runs the shipped adaptive profile through the ladder of
// shared prefixes on the A100 8B calibration, whose 1M tokens of group
// prefixes overflow sixteen pods' 2.3M tokens of KV: the prefix index
// fills past adaptive.fill.on (0.8) and the law adds time-cost 1 to the
// calm weights. On the H100 8B's hot-prefix burst, whose pods hold every
// prefix with room to spare, it never does: time-cost stays at the
// profile's 0 at every sample.
func TestFillLaw(t *testing.T) {
	pols, err := Policies([]string{PolicyAdaptive})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		engine, scenario string
		level            float64
		adds             bool
	}{
		{"a100-40gb-llama-3.1-8b", "shared-prefix-ladder", 96, true},
		{"h100-80gb-llama-3.1-8b", "hot-prefix-burst-open", 40, false},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			scs, err := LoadScenarios([]string{tc.scenario}, 3*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := ApplyEngine(scs, tc.engine); err != nil {
				t.Fatal(err)
			}
			res, err := Run(RunConfig{Scenario: scs[0], Policy: pols[0], Level: tc.level, Seed: 1, Timeline: true})
			if err != nil {
				t.Fatal(err)
			}
			tl := res.Timeline
			tc0 := -1
			for i, name := range tl.Scorers {
				if name == "time-cost" {
					tc0 = i
				}
			}
			if tc0 < 0 {
				t.Fatalf("no time-cost scorer in the timeline's %v", tl.Scorers)
			}
			first, peak := -1.0, 0.0
			for i, w := range tl.Weights[tc0] {
				if w > 0 && first < 0 {
					first = tl.T[i]
				}
				peak = max(peak, w)
			}
			t.Logf("time-cost weight first > 0 at %v s, peak %.3f", first, peak)
			switch {
			case tc.adds && !(peak > 0.5):
				t.Errorf("time-cost weight peaked at %v, want about 1: the fill law did not act on a pool whose caches overflow", peak)
			case !tc.adds && first >= 0:
				t.Errorf("time-cost weight > 0 from %v s on a pool with room, want 0 throughout", first)
			}
		})
	}
}
