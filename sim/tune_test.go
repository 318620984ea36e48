package sim

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// TestTune runs a small search over two short scenarios and checks what
// the issue asks of it: on each scenario alone, the vector it reports as
// that scenario's best scores at least as well there as every built-in
// static policy's weights (and the profile's own); the suite's best
// scores at least as well as every baseline; the search went beyond the
// baselines; and the written profile loads with the best weights and the
// loop off.
func TestTune(t *testing.T) {
	if testing.Short() {
		t.Skip("a weight search over two scenarios: skipped under -short")
	}
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	var scs []*scenario.Scenario
	for _, n := range []string{"small-pool-burst", "shared-prefix"} {
		sc := loadShipped(t, n, 30*time.Second)
		sc.Load.Levels = sc.Load.Levels[len(sc.Load.Levels)-1:]
		scs = append(scs, sc)
	}
	base, skipped := Baselines(f, PolicyAdaptiveOff, false)
	if len(skipped) != 0 || len(base) != 8 {
		t.Fatalf("baselines %v, skipped %v: want adaptive-off, three load shares and four built-ins", base, skipped)
	}
	// The shipped profile is prefix 32 against queue 0, kvcache 1,
	// inflight 1, pending-prefill 2, time-cost 0 and trade-cost 0: at a
	// load share of 50 % the distribution weights sum to the prefix
	// weight, in the same ratios.
	if b := base[2]; b.Name != "load-share-50%" || !slices.Equal(b.Weights, []float64{32, 0, 8, 8, 16, 0, 0}) {
		t.Errorf("baseline 2 is %s %v, want load-share-50%% [32 0 8 8 16 0 0]", b.Name, b.Weights)
	}
	res, err := Tune(context.Background(), TuneConfig{Scenarios: scs, Profile: f, Seed: 1, Seeds: 1, Budget: 12, Parallel: 2}, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Vectors) <= len(base) {
		t.Fatalf("%d vectors evaluated: the search never went past the baselines", len(res.Vectors))
	}
	for _, sc := range scs {
		bi := res.ScenarioBest[sc.Name]
		best := res.ScenarioScore(bi, sc.Name)
		for i := range base {
			if s := res.ScenarioScore(i, sc.Name); s > best {
				t.Errorf("%s: baseline %s scores %.4f, above the reported best %s at %.4f", sc.Name, base[i].Name, s, res.Vectors[bi].Name, best)
			}
		}
	}
	for i := range base {
		if res.Vectors[i].Score > res.Vectors[res.Best].Score {
			t.Errorf("baseline %s scores above the suite's best", base[i].Name)
		}
	}
	var md, prof bytes.Buffer
	if err := res.WriteMarkdown(&md, "trimtab sim tune"); err != nil || !strings.Contains(md.String(), "Each scenario's own best") {
		t.Errorf("report: %v\n%s", err, md.String())
	}
	if err := res.WriteProfile(&prof, f, "test"); err != nil {
		t.Fatal(err)
	}
	g, err := configs.Parse(prof.Bytes())
	if err != nil {
		t.Fatalf("written profile: %v\n%s", err, prof.String())
	}
	if g.Adaptive.Enabled || len(g.Scorers) != len(f.Scorers) {
		t.Fatalf("written profile: adaptive %v, %d scorers", g.Adaptive.Enabled, len(g.Scorers))
	}
	for i, s := range g.Scorers {
		want, _ := fmtWeightFloat(res.Vectors[res.Best].Weights[i])
		if *s.Weight != want || s.Type != f.Scorers[i].Type {
			t.Errorf("scorer %d: %s %v, want %s %v", i, s.Type, *s.Weight, f.Scorers[i].Type, want)
		}
	}
}

func TestMoves(t *testing.T) {
	got := moves([]float64{4, 0, 2}, 0, 4)
	want := [][]float64{{16, 0, 2}, {1, 0, 2}, {0, 0, 2}}
	if len(got) != len(want) {
		t.Fatalf("moves %v, want %v", got, want)
	}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("moves %v, want %v", got, want)
			}
		}
	}
	// A zero weight is tried at the mean of the others; a move to an
	// all-zero vector is dropped.
	if got := moves([]float64{4, 0, 2}, 1, 2); len(got) != 1 || got[0][1] != 3 {
		t.Errorf("zero weight moves %v, want [4 3 2]", got)
	}
	if got := moves([]float64{5, 0}, 0, 4); len(got) != 2 {
		t.Errorf("moves %v: the all-zero vector should be dropped", got)
	}
	if vectorKey([]float64{1, 2}) != vectorKey([]float64{2, 4}) {
		t.Error("vectorKey is not scale-invariant")
	}
}

func TestCompare(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	runs := []report.RunSummary{
		{Scenario: "s", Level: 1, Policy: "a", Seed: 1, TTFTP99: f(80), E2EP99: f(100), OutputTokensPerSec: 110,
			Phases: []report.PhaseSummary{{Name: "calm", RebalanceEntries: 1, OnsetBusiestRatio: 9}, {Name: "hot", RebalanceEntries: 2, OnsetBusiestRatio: 1.5}}},
		{Scenario: "s", Level: 1, Policy: "a", Seed: 2, TTFTP99: f(120), E2EP99: f(100), OutputTokensPerSec: 110, WatchdogFreezes: 1},
		{Scenario: "s", Level: 1, Policy: "b", Seed: 1, TTFTP99: f(200), E2EP99: f(100), OutputTokensPerSec: 100},
		{Scenario: "s", Level: 2, Policy: "a", Seed: 1, TTFTP99: f(100), E2EP99: f(103), OutputTokensPerSec: 100},
		{Scenario: "s", Level: 2, Policy: "b", Seed: 1, TTFTP99: f(100), E2EP99: f(100), OutputTokensPerSec: 100},
		{Scenario: "t", Level: 1, Policy: "a", Seed: 1, TTFTP99: f(100), E2EP99: f(100), OutputTokensPerSec: 100},
	}
	c := report.Compare(runs, "a", "b", report.Mean)
	if len(c.Rows) != 2 {
		t.Fatalf("rows %+v, want s@1 and s@2 (t has no b)", c.Rows)
	}
	r := c.Rows[0]
	if r.TTFTP99 != -0.5 || r.TokPerSec < 0.0999 || r.TokPerSec > 0.1001 || r.Seeds != 2 || r.CalmEntries != 1 || r.Freezes != 1 || r.MaxOnset != 1.5 {
		t.Errorf("s@1: %+v", r)
	}
	if w := c.Worse(0.02); len(w) != 1 || w[0].Level != 2 {
		t.Errorf("worse: %+v, want s@2 (E2E +3 %%)", w)
	}
	if w := c.Wins(0.2, 0.1); len(w) != 1 || w[0] != "s" {
		t.Errorf("wins %v", w)
	}
	if ce, fz := c.Loop(); ce != 1 || fz != 1 {
		t.Errorf("loop %d %d", ce, fz)
	}

	// Medians: one repeat's stall does not decide the row. Three repeats
	// of a against three of b at one level; a's middle one is 100, b's 110.
	runs = runs[:0]
	for i, v := range []float64{100, 400, 90} {
		runs = append(runs, report.RunSummary{Scenario: "s", Level: 1, Policy: "a", Seed: uint64(i), TTFTP99: f(v), E2EP99: f(100), OutputTokensPerSec: 100})
	}
	for i, v := range []float64{110, 105, 120} {
		runs = append(runs, report.RunSummary{Scenario: "s", Level: 1, Policy: "b", Seed: uint64(i), TTFTP99: f(v), E2EP99: f(100), OutputTokensPerSec: 100})
	}
	if got := report.Compare(runs, "a", "b", report.Median).Rows[0].TTFTP99; math.Abs(got-(100.0/110-1)) > 1e-9 {
		t.Errorf("median TTFT p99 change %v, want %v", got, 100.0/110-1)
	}
	if got := report.Compare(runs, "a", "b", report.Mean).Rows[0].TTFTP99; math.Abs(got-(590.0/335-1)) > 1e-9 {
		t.Errorf("mean TTFT p99 change %v, want %v", got, 590.0/335-1)
	}
	var md strings.Builder
	if err := report.Compare(runs, "a", "b", report.Median).WriteMarkdown(&md, 0.02); err != nil || !strings.Contains(md.String(), "| level | repeats |") {
		t.Errorf("median comparison's table should count repeats: %v\n%s", err, md.String())
	}
	if report.MedianOf([]float64{4, 1, 3, 2}) != 2.5 || !math.IsNaN(report.MedianOf(nil)) {
		t.Error("MedianOf")
	}
	// Noise: with medians, a difference the repeats' ranges cover is
	// neither worse nor a win and is marked ≈; one they do not cover
	// counts. Seed means never call a difference noise.
	setB := func(e2e, tok float64) {
		for i := range runs {
			if runs[i].Policy == "b" {
				runs[i].E2EP99, runs[i].OutputTokensPerSec = f(e2e), tok
			}
		}
	}
	setB(50, 80) // a's E2E p99 twice b's and a's tok/s 25 % above, in every repeat
	med := report.Compare(runs, "a", "b", report.Median)
	if r := med.Rows[0]; !r.TTFTNoise || r.E2ENoise || r.TokNoise {
		t.Errorf("noise flags %+v: want TTFT's only (a 90–400 against b 105–120)", r)
	}
	if w := med.Worse(0.02); len(w) != 1 {
		t.Errorf("E2E p99 +100 %% beyond noise not counted worse: %+v", w)
	}
	if w := med.Wins(0, 0.1); len(w) != 1 {
		t.Errorf("tok/s +25 %% beyond noise not counted a win: %v", w)
	}
	setB(100, 100)
	runs[0].TTFTP99 = f(130) // a: 130, 400, 90; median 130, +18 % against b's 110: the ranges still overlap
	med = report.Compare(runs, "a", "b", report.Median)
	if w := med.Worse(0.02); len(w) != 0 {
		t.Errorf("TTFT p99 +18 %% inside the repeats' spread counted worse: %+v", w)
	}
	md.Reset()
	if err := med.WriteMarkdown(&md, 0.02); err != nil || !strings.Contains(md.String(), "+18.2 % ≈") || strings.Contains(md.String(), "⚠") {
		t.Errorf("noise should be marked ≈ and not ⚠: %v\n%s", err, md.String())
	}
	if mean := report.Compare(runs, "a", "b", report.Mean); mean.Rows[0].TTFTNoise || len(mean.Worse(0.02)) != 1 {
		t.Errorf("seed means: noise %v, worse %d; want no noise and the row worse", mean.Rows[0].TTFTNoise, len(mean.Worse(0.02)))
	}
}

// TestTuneLoop searches calm weights with the loop on: the baselines the
// loop refuses (prefix-only, least-queue and load-only each leave a
// category at weight 0) are skipped and counted, the shipped tuned-static
// vector is a starting point, and the written profile keeps the loop on.
func TestTuneLoop(t *testing.T) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	sc := loadShipped(t, "small-pool-burst", 30*time.Second)
	sc.Load.Levels = sc.Load.Levels[len(sc.Load.Levels)-1:]
	base, _ := Baselines(f, PolicyAdaptiveOff, true)
	if len(base) != 6 || base[5].Name != PolicyTunedStatic {
		t.Fatalf("baselines %v: want adaptive-off, four built-ins and tuned-static", base)
	}
	res, err := Tune(context.Background(), TuneConfig{Scenarios: []*scenario.Scenario{sc}, Profile: f, Loop: true, Seed: 1, Seeds: 1, Budget: 5, Parallel: 2}, base)
	if err != nil {
		t.Fatal(err)
	}
	if res.Invalid < 3 {
		t.Errorf("%d candidates refused, want at least the 3 one-category baselines", res.Invalid)
	}
	for _, ev := range res.Vectors {
		if ev.Name == PolicyPrefixOnly || ev.Name == PolicyLeastQueue || ev.Name == "load-only" {
			t.Errorf("%s was evaluated with the loop on", ev.Name)
		}
	}
	var prof bytes.Buffer
	if err := res.WriteProfile(&prof, f, "test"); err != nil {
		t.Fatal(err)
	}
	g, err := configs.Parse(prof.Bytes())
	if err != nil || !g.Adaptive.Enabled {
		t.Fatalf("written profile: %v, adaptive %v\n%s", err, g != nil && g.Adaptive.Enabled, prof.String())
	}
}

// TestWriteProfileKeepsGuard: a search over a profile with
// scheduler.guard runs every vector under that guard (the loop off keeps
// it), so the profile it writes carries the guard: it is the
// configuration that was measured.
func TestWriteProfileKeepsGuard(t *testing.T) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float64, len(f.Scorers))
	for i := range w {
		w[i] = float64(i + 1)
	}
	if g := withWeights(f, w, false).Scheduler.Guard; g.Factor != 2.5 {
		t.Fatalf("searched vectors run with guard factor %v, want the profile's 2.5", g.Factor)
	}
	res := &TuneResult{Vectors: []*Evaluated{{Candidate: Candidate{Name: "v", Weights: w}}}}
	var b bytes.Buffer
	if err := res.WriteProfile(&b, f, "test"); err != nil {
		t.Fatal(err)
	}
	g, err := configs.Parse(b.Bytes())
	if err != nil {
		t.Fatalf("written profile: %v\n%s", err, b.String())
	}
	if g.Scheduler.Guard != f.Scheduler.Guard || g.Adaptive.Enabled {
		t.Errorf("written profile: guard %+v, adaptive %v; want %+v, false\n%s", g.Scheduler.Guard, g.Adaptive.Enabled, f.Scheduler.Guard, b.String())
	}
}
