package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestDemoSummary(t *testing.T) {
	acted := DemoLoop{Entries: 1, FirstEntry: 17 * time.Second, BackToCalm: 48 * time.Second,
		Reason: "signal 0.620 ≥ theta_on 0.200 for 1s", ThetaOn: 0.2, PeakSignal: 0.8,
		Shifts: []WeightShift{{"prefix", 32, 9.5}, {"pending-prefill", 2, 7.3}}}
	calm := DemoLoop{BackToCalm: -1, ThetaOn: 0.2, PeakSignal: 0.11}
	base := DemoNumbers{TTFTP99: 500, E2EP99: 4000, TokPerSec: 4000, Busiest: 1.5}
	with := func(f func(*DemoNumbers)) *DemoNumbers { n := base; f(&n); return &n }
	for _, tc := range []struct {
		name   string
		o      DemoOutcome
		want   [3][]string // substrings of each line
		unwant []string    // substrings of no line
	}{
		{
			name: "the loop acts and adaptive wins",
			// TTFT (500−5000)/5000 = −90 %; E2E (4000−30000)/30000 = −87 %;
			// tok/s (4000−2000)/2000 = +100 %; failures 0 against 12.
			o: DemoOutcome{Burst: "the 30s burst at 35 req/s", Adaptive: base, StaticName: "static 3:2:2", Loop: acted,
				Static: with(func(n *DemoNumbers) {
					n.TTFTP99, n.E2EP99, n.TokPerSec, n.Busiest, n.Failed = 5000, 30000, 2000, 15.8, 12
				})},
			want: [3][]string{
				{"What happened:", "left calm at 17s", "(signal 0.620 ≥ theta_on 0.200 for 1s)", "prefix 32 → 9.5, pending-prefill 2 → 7.3", "returned to calm at 48s"},
				{"Key numbers (the 30s burst at 35 req/s): adaptive TTFT p99 500 ms, E2E p99 4.0 s, 4,000 tok/s, busiest pod 1.5× the mean",
					"static 3:2:2 TTFT p99 5.0 s, E2E p99 30.0 s, 2,000 tok/s, busiest pod 15.8× the mean, 12 failed"},
				{"adaptive did better than static 3:2:2 on TTFT p99 (-90 %), E2E p99 (-87 %), output tok/s (+100 %), failures (0 against 12)."},
			},
			unwant: []string{"load guard's doing", "did not pay off", "never left calm"},
		},
		{
			name: "the loop acts and adaptive loses",
			// TTFT (500−400)/400 = +25 %; E2E (4000−3000)/3000 = +33 %;
			// tok/s (4000−4100)/4100 = −2.4 %: within 5 %.
			o: DemoOutcome{Burst: "b", Adaptive: base, StaticName: "static 3:2:2", Loop: DemoLoop{Entries: 2, FirstEntry: 20 * time.Second, BackToCalm: -1, ThetaOn: 0.2},
				Static: with(func(n *DemoNumbers) { n.TTFTP99, n.E2EP99, n.TokPerSec = 400, 3000, 4100 })},
			want: [3][]string{
				{"entered rebalance 2 times, first at 20s", "still rebalancing at the end"},
				{"adaptive TTFT p99 500 ms"},
				{"adaptive did worse than static 3:2:2 on TTFT p99 (+25 %), E2E p99 (+33 %); within 5 %: output tok/s — on this run adaptive did not pay off."},
			},
			unwant: []string{"did better", "returned to calm"},
		},
		{
			name: "a tie",
			// TTFT (500−490)/490 = +2 %; E2E (4000−4100)/4100 = −2.4 %;
			// tok/s (4000−3900)/3900 = +2.6 %: all within 5 %.
			o: DemoOutcome{Burst: "b", Adaptive: base, StaticName: "static 3:2:2", Loop: acted,
				Static: with(func(n *DemoNumbers) { n.TTFTP99, n.E2EP99, n.TokPerSec = 490, 4100, 3900 })},
			want: [3][]string{{"left calm at 17s"}, {"static 3:2:2 TTFT p99 490 ms"},
				{"Comparison: a tie — adaptive and static 3:2:2 are within 5 % of each other on every measure."}},
			unwant: []string{"did better", "did worse"},
		},
		{
			name: "mixed",
			// TTFT (500−600)/600 = −17 %; E2E (4000−3500)/3500 = +14 %; tok/s equal.
			o: DemoOutcome{Burst: "b", Adaptive: base, StaticName: "static", Loop: acted,
				Static: with(func(n *DemoNumbers) { n.TTFTP99, n.E2EP99 = 600, 3500 })},
			want: [3][]string{nil, nil,
				{"Comparison: mixed — adaptive did better than static on TTFT p99 (-17 %) and worse on E2E p99 (+14 %); within 5 %: output tok/s."}},
		},
		{
			name: "the loop never acts, adaptive wins on the guard",
			// TTFT (500−5000)/5000 = −90 %; the rest equal.
			o: DemoOutcome{Burst: "b", Adaptive: base, StaticName: "static 3:2:2", Loop: calm,
				Static: with(func(n *DemoNumbers) { n.TTFTP99 = 5000 })},
			want: [3][]string{
				{"the loop never left calm (signal at most 0.11, below theta_on 0.20), so no weight changed; the load guard alone held the busiest pod at 1.5× the mean."},
				nil,
				{"adaptive did better than static 3:2:2 on TTFT p99 (-90 %)", "with the loop calm throughout, that is the load guard's doing, not the loop's."},
			},
			unwant: []string{"left calm at", "rebalance"},
		},
		{
			name: "the signal crossed theta_on but too briefly",
			// 0.26 ≥ 0.20, yet no entry: the on-hold was not met.
			o:      DemoOutcome{Burst: "b", Adaptive: base, Loop: DemoLoop{BackToCalm: -1, ThetaOn: 0.2, PeakSignal: 0.26}},
			want:   [3][]string{{"never left calm (the signal reached 0.26, over theta_on 0.20, but not for long enough to enter rebalance), so no weight changed"}, nil, nil},
			unwant: []string{"below theta_on"},
		},
		{
			name: "the timeline is missing",
			o: DemoOutcome{Burst: "b", Adaptive: base, StaticName: "static", Loop: DemoLoop{BackToCalm: -1, Unknown: "status 503"},
				Static: with(func(n *DemoNumbers) { n.TTFTP99 = 5000 })},
			want:   [3][]string{{"What happened: unknown — the router's timeline could not be read (status 503)."}, nil, {"did better than static on TTFT p99"}},
			unwant: []string{"never left calm", "load guard's doing"},
		},
		{
			name: "no comparison, nothing scraped",
			o:    DemoOutcome{Burst: "b", Adaptive: DemoNumbers{TTFTP99: math.NaN(), E2EP99: math.NaN(), TokPerSec: 0, Busiest: math.NaN()}, Loop: calm},
			want: [3][]string{{"never left calm", "no weight changed."}, {"adaptive TTFT p99 –, E2E p99 –, 0 tok/s."},
				{"Comparison: none — the static weights were not run (--compare=false)."}},
			unwant: []string{"busiest", "load guard alone"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DemoSummary(tc.o)
			for i, subs := range tc.want {
				for _, s := range subs {
					if !strings.Contains(got[i], s) {
						t.Errorf("line %d lacks %q:\n%s", i+1, s, got[i])
					}
				}
			}
			for _, s := range tc.unwant {
				for i, line := range got {
					if strings.Contains(line, s) {
						t.Errorf("line %d has %q:\n%s", i+1, s, line)
					}
				}
			}
		})
	}
}

func TestLoadWarning(t *testing.T) {
	for _, tc := range []struct {
		load  float64
		cores int
		warn  bool
	}{
		{14.42, 2, true}, // 14.42 > 2
		{2, 2, false},    // equal is not over
		{2.01, 2, true},  // just over
		{0.3, 8, false},  // idle
		{math.NaN(), 2, false},
		{5, 0, false}, // cores unknown
	} {
		w := LoadWarning(tc.load, tc.cores)
		if (w != "") != tc.warn {
			t.Errorf("LoadWarning(%v, %d) = %q, want a warning: %v", tc.load, tc.cores, w, tc.warn)
		}
		if tc.warn && !strings.Contains(w, "means little") {
			t.Errorf("LoadWarning(%v, %d) = %q: does not say the comparison means little", tc.load, tc.cores, w)
		}
	}
	if w := LoadWarning(14.42, 2); !strings.Contains(w, "14.4 on 2 cores") {
		t.Errorf("warning %q does not name the reading", w)
	}
}

func TestLoopStory(t *testing.T) {
	calm := map[string]float64{"prefix": 32, "queue": 0, "kvcache": 1, "pending-prefill": 2}
	r := &RunResult{
		ModeChanges: []ModeChange{{T: 17 * time.Second, From: "calm", To: "rebalance"}, {T: 40 * time.Second, From: "rebalance", To: "calm"}},
		Modes: []ModePoint{
			{T: time.Second, Mode: "calm", Signal: 0, Weights: calm},
			{T: 18 * time.Second, Mode: "rebalance", Signal: 0.7, Weights: map[string]float64{"prefix": 20, "queue": 0, "kvcache": 1.05, "pending-prefill": 5}},
			{T: 20 * time.Second, Mode: "rebalance", Signal: 0.5, Weights: map[string]float64{"prefix": 8, "queue": 0.5, "kvcache": 1.05, "pending-prefill": 9}},
			{T: 41 * time.Second, Mode: "calm", Signal: 0, Weights: calm},
		},
	}
	l := loopStory(r, 0.2, "why")
	// Moves from calm: prefix 32 → 8 (24), pending-prefill 2 → 9 (7),
	// queue 0 → 0.5 (0.5 > 10 % of max(0, 0.1)); kvcache 1 → 1.05 is
	// 5 %, under 10 %: left out.
	want := []WeightShift{{"prefix", 32, 8}, {"pending-prefill", 2, 9}, {"queue", 0, 0.5}}
	if l.Entries != 1 || l.FirstEntry != 17*time.Second || l.BackToCalm != 40*time.Second || l.PeakSignal != 0.7 || l.Reason != "why" || l.ThetaOn != 0.2 {
		t.Errorf("loop %+v", l)
	}
	if len(l.Shifts) != len(want) {
		t.Fatalf("shifts %+v, want %+v", l.Shifts, want)
	}
	for i := range want {
		if l.Shifts[i] != want[i] {
			t.Errorf("shift %d = %+v, want %+v", i, l.Shifts[i], want[i])
		}
	}
}
