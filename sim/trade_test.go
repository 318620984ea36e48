package sim

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/trimtab/trimtab/configs"
)

// TestTradeLaw runs the shipped adaptive profile on the chat
// scenario's traffic for 90 s: on the pool of two GPU generations the
// learned prefill throughputs are ≈ 3.8 apart (the H100's 2,048-token
// chunk is 3.8× faster, docs/calibrations.md), above spread_on 1.5, so the
// law moves the calm weights to the trade shape (trade-cost > 0); on the
// homogeneous A100 pool every endpoint shares its class's fit, the spread
// is 1 and the weights never leave the profile's shape (trade-cost and
// time-cost 0 at every sample).
func TestTradeLaw(t *testing.T) {
	for _, tc := range []struct {
		engine string
		moves  bool
	}{
		{"mixed-a100-h100-llama-3.1-8b", true},
		{"a100-40gb-llama-3.1-8b", false},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			w := scorerWeights(t, tc.engine, "chat", 125, 90*time.Second, tradeCost, "time-cost")
			trade, cost := w[0], w[1]
			switch {
			case tc.moves && !(trade.last > 0):
				t.Errorf("trade-cost weight at the end %v, want > 0: the law did not trade on a pool of two GPU generations", trade.last)
			case !tc.moves && trade.first >= 0:
				t.Errorf("trade-cost weight > 0 from %v s on a homogeneous pool, want 0 throughout", trade.first)
			case !tc.moves && cost.first >= 0:
				t.Errorf("time-cost weight > 0 from %v s on a homogeneous pool, want 0 throughout", cost.first)
			}
		})
	}
}

// weightSpan is when a scorer's weight was first above 0 and, in calm,
// first above its weight at the first sample (−1: never; the herd loop's
// rebalance raises the load scorers outside calm), its weights at the
// first sample and at the end, and its lowest in calm.
type weightSpan struct{ first, rise, start, last, low float64 }

// scorerWeights runs the shipped adaptive profile on scenario at level
// for dur on engine (seed 1) and returns the weight span of each named
// scorer.
func scorerWeights(t *testing.T, engine, scenario string, level float64, dur time.Duration, names ...string) []weightSpan {
	t.Helper()
	return editedWeights(t, nil, engine, scenario, level, dur, names...)
}

// editedWeights is scorerWeights with the shipped profile changed by edit
// (nil: as shipped).
func editedWeights(t *testing.T, edit func(*configs.File), engine, scenario string, level float64, dur time.Duration, names ...string) []weightSpan {
	t.Helper()
	pols, err := Policies([]string{PolicyAdaptive})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		f, err := configs.LoadShipped("adaptive")
		if err != nil {
			t.Fatal(err)
		}
		edit(f)
		pols[0] = ProfilePolicy("adaptive, edited", "", f)
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
	var out []weightSpan
	for _, name := range names {
		i := slices.Index(tl.Scorers, name)
		if i < 0 {
			t.Fatalf("no %s scorer in the timeline's %v", name, tl.Scorers)
		}
		sp := weightSpan{first: -1, rise: -1, start: tl.Weights[i][0], last: tl.Weights[i][len(tl.T)-1], low: math.Inf(1)}
		for j, w := range tl.Weights[i] {
			if tl.Mode[j] == "calm" {
				sp.low = min(sp.low, w)
			}
			if w > 0 && sp.first < 0 {
				sp.first = tl.T[j]
			}
			if w > sp.start+1e-9 && sp.rise < 0 && tl.Mode[j] == "calm" {
				sp.rise = tl.T[j]
			}
		}
		t.Logf("%s %s@%g: %s weight first > 0 at %v s, above its first %.3f in calm at %v s, last %.3f, lowest in calm %.3f", engine, scenario, level, name, sp.first, sp.start, sp.rise, sp.last, sp.low)
		out = append(out, sp)
	}
	return out
}

// shapeCase is a run of the shipped adaptive profile (seed 1) and
// whether a law should move its calm weights there.
type shapeCase struct {
	engine, scenario string
	level            float64
	dur              time.Duration
	moves            bool
}

// TestDecodeBoundShape runs the shipped adaptive profile where the trade
// law's batch cost decides: on the Qwen 7B, whose every decoding sequence
// adds 453 µs to a 1.6 ms step, the pool reads decode-bound within the
// first minute and in-flight requests weigh 4 instead of 1 in calm; on the
// A100 8B's Mooncake trace at 2× — 20,000-token contexts, decode steps
// shared with long prefills — the engine line's per-sequence term holds
// the context until a window identifies the context term (1.4–3.1 ms per
// sequence on a 7–13 ms step) and read the pool as decode-bound on seed 1
// (0.16, then 0.46); with the prior's context cost taken out of it the
// in-flight weight never rises there. The trace's long prompts take the
// trade shape first (TestPrefillHeavyShape), which would hide a
// decode-bound reading, so the profile runs here with prompt_on 0.
func TestDecodeBoundShape(t *testing.T) {
	noPrompt := func(f *configs.File) { f.Adaptive.Trade.PromptOn, f.Adaptive.Trade.PromptOff = 0, 0 }
	for _, tc := range []shapeCase{
		{"h100-80gb-qwen2.5-7b", "shared-prefix", 125, time.Minute, true},
		{"a100-40gb-llama-3.1-8b", "mooncake-trace", 2, 0, false},
	} {
		t.Run(tc.engine+"/"+tc.scenario, func(t *testing.T) {
			in := editedWeights(t, noPrompt, tc.engine, tc.scenario, tc.level, tc.dur, "inflight")[0]
			switch {
			case tc.moves && (in.rise < 0 || in.last < 4):
				t.Errorf("inflight weight rose in calm at %v s, %v at the end; want the decode-bound shape's 4 within the minute", in.rise, in.last)
			case !tc.moves && in.rise >= 0:
				t.Errorf("inflight weight above its %v in calm from %v s: a dense engine read as decode-bound", in.start, in.rise)
			}
		})
	}
}

// TestSlotBoundShape runs the shipped adaptive profile where the trade
// law's KV slots decide: on the L4 8B's Mooncake trace at 2× a pod's
// 30,400 tokens of KV hold about two of the trace's requests (14,000
// prompt tokens on average, nearly all uncached), the pool reads
// slot-bound at the second evaluation with twenty picks, and in calm
// in-flight requests weigh 4 and pending prefill none of the profile's 2
// within the first fifteen seconds (the fill law adds its 2 back once the
// caches fill); the L4's mixed-day at 125 clients, whose 4,400-token
// requests share their system prompts, reads 7 or more and never moves.
func TestSlotBoundShape(t *testing.T) {
	for _, tc := range []shapeCase{
		{"l4-24gb-llama-3.1-8b", "mooncake-trace", 2, time.Minute, true},
		{"l4-24gb-llama-3.1-8b", "mixed-day", 125, 2 * time.Minute, false},
	} {
		t.Run(tc.engine+"/"+tc.scenario, func(t *testing.T) {
			w := scorerWeights(t, tc.engine, tc.scenario, tc.level, tc.dur, "inflight", "pending-prefill")
			in, pp := w[0], w[1]
			switch {
			case tc.moves && (in.rise < 0 || in.rise > 15 || in.last < 4):
				t.Errorf("inflight weight rose in calm at %v s, %v at the end; want the slot-bound shape's 4 within fifteen seconds", in.rise, in.last)
			case tc.moves && (pp.low > 0 || pp.last > 2):
				t.Errorf("pending-prefill weight at least %v in calm, %v at the end; want the slot-bound shape's 0 before the fill law adds its 2", pp.low, pp.last)
			case !tc.moves && in.rise >= 0:
				t.Errorf("inflight weight above its %v in calm from %v s: a roomy pool read as slot-bound", in.start, in.rise)
			}
		})
	}
}

// TestPrefillHeavyShape runs the shipped adaptive profile where the trade
// law's uncached prompt decides: on the A100 8B's Mooncake trace at 2×
// the requests bring 10,900–14,800 prompt tokens their pod does not hold
// (mean over the minute's picks), the traffic reads prefill-heavy at the
// second evaluation with twenty picks and the calm weights take the trade
// shape (trade-cost 16) within the first fifteen seconds; the A100's
// mixed-day at 125 clients, whose long documents share their system
// prompts, reads 3,900 or less and never moves.
func TestPrefillHeavyShape(t *testing.T) {
	for _, tc := range []shapeCase{
		{"a100-40gb-llama-3.1-8b", "mooncake-trace", 2, time.Minute, true},
		{"a100-40gb-llama-3.1-8b", "mixed-day", 125, 2 * time.Minute, false},
	} {
		t.Run(tc.engine+"/"+tc.scenario, func(t *testing.T) {
			tr := scorerWeights(t, tc.engine, tc.scenario, tc.level, tc.dur, tradeCost)[0]
			switch {
			case tc.moves && (tr.first < 0 || tr.first > 15 || tr.last < 16):
				t.Errorf("trade-cost weight above 0 from %v s, %v at the end; want the trade shape's 16 within fifteen seconds", tr.first, tr.last)
			case !tc.moves && tr.first >= 0:
				t.Errorf("trade-cost weight above 0 from %v s: ordinary traffic read as prefill-heavy", tr.first)
			}
		})
	}
}
