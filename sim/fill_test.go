package sim

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestFillLaw runs the shipped adaptive profile (three minutes, seed 1)
// through the ladder of shared prefixes on the A100 8B calibration, whose
// 1M tokens of group prefixes overflow sixteen pods' 2.3M tokens of KV:
// the prefix index fills past adaptive.fill.on (0.8) after the first
// minute and the fill law adds pending-prefill 2 to the calm weights' 2
// (exactly 4 at the end; time-cost and trade-cost stay 0: the trade law,
// which never moves on a pool of equals, would add trade-cost). On the H100 8B's hot-prefix
// burst at each level and the Qwen 7B's at the highest, whose pods hold
// every prefix with room to spare, it never does: pending-prefill stays
// at the profile's 2 at every sample.
func TestFillLaw(t *testing.T) {
	for _, tc := range []struct {
		engine, scenario string
		level            float64
		adds             bool
	}{
		{"a100-40gb-llama-3.1-8b", "shared-prefix-ladder", 96, true},
		{"h100-80gb-llama-3.1-8b", "hot-prefix-burst-open", 14, false},
		{"h100-80gb-llama-3.1-8b", "hot-prefix-burst-open", 25, false},
		{"h100-80gb-llama-3.1-8b", "hot-prefix-burst-open", 40, false},
		{"h100-80gb-qwen2.5-7b", "hot-prefix-burst-open", 40, false},
	} {
		t.Run(fmt.Sprintf("%s/%s@%g", tc.engine, tc.scenario, tc.level), func(t *testing.T) {
			w := scorerWeights(t, tc.engine, tc.scenario, tc.level, 3*time.Minute, "pending-prefill", "time-cost", tradeCost)
			pp := w[0]
			switch {
			case w[1].first >= 0 || w[2].first >= 0:
				t.Errorf("time-cost weight > 0 from %v s, trade-cost from %v s on a pool of equals, want 0 throughout (the fill law adds pending-prefill)", w[1].first, w[2].first)
			case pp.start != 2:
				t.Errorf("pending-prefill weight %v at the first sample, want the calm weights' 2", pp.start)
			case tc.adds && (math.Abs(pp.last-4) > 1e-9 || pp.rise < 60):
				t.Errorf("pending-prefill weight first above 2 at %v s, last %v; want 4 from after the first minute (the fill law's add)", pp.rise, pp.last)
			case !tc.adds && pp.rise >= 0:
				t.Errorf("pending-prefill weight above 2 from %v s on a pool with room, want 2 throughout", pp.rise)
			}
		})
	}
}
