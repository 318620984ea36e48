package sim

import (
	"bytes"
	"context"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/scorers"
)

func evaluated(name string, ttft, tok []float64) *Evaluated {
	return &Evaluated{Candidate: Candidate{Name: name, Weights: []float64{1}}, TTFTP99: ttft, TokPerSec: tok}
}

// TestScoreOracle checks the objective and the ratio on two cells, two
// searched vectors and one policy. Per-cell bests over all three:
// TTFT p99 c0 = 50 (p), c1 = 100 (v2); tok/s c0 = c1 = 100.
//
//	v1: TTFT 50/100 = 0.5, 100/200 = 0.5; tok 50/100 = 0.5, 100/100 = 1
//	    worst 0.5, mean 2.5/4 = 0.625, score (0.5 + 0.625)/2 = 0.5625
//	v2: TTFT 50/200 = 0.25, 100/100 = 1; tok 1, 1
//	    worst 0.25, mean 3.25/4 = 0.8125, score 0.53125
//	p:  TTFT 50/50 = 1, 100/400 = 0.25; tok 1, 50/100 = 0.5
//	    worst 0.25, mean 2.75/4 = 0.6875, score 0.46875
//
// The oracle is v1 and p's ratio 0.46875/0.5625 = 0.8333. Without p the
// search alone ranks v2 first (bests TTFT 100, 100: v1 scores
// (0.5 + 0.75)/2 = 0.625, v2 (0.5 + 0.875)/2 = 0.6875): the oracle is
// chosen against the same bests the policies are scored on.
func TestScoreOracle(t *testing.T) {
	res := &TuneResult{ScenarioBest: map[string]int{}, Cells: []Cell{{"s", 1}, {"s", 2}}, Vectors: []*Evaluated{
		evaluated("v1", []float64{100, 200}, []float64{50, 100}),
		evaluated("v2", []float64{200, 100}, []float64{100, 100}),
	}}
	res.score()
	if res.Vectors[res.Best].Name != "v2" || res.Vectors[1].Score != 0.6875 {
		t.Fatalf("search alone: best %s, v2 score %v; want v2, 0.6875", res.Vectors[res.Best].Name, res.Vectors[1].Score)
	}
	p := evaluated("p", []float64{50, 400}, []float64{100, 50})
	oc := scoreOracle("e", res, []*Evaluated{p}, nil)
	if oc.Oracle.Name != "v1" || oc.Oracle.Score != 0.5625 || oc.Oracle.Worst != 0.5 || oc.Oracle.Mean != 0.625 || oc.Oracle.Ratio != 1 {
		t.Errorf("oracle %+v, want v1 score 0.5625 worst 0.5 mean 0.625 ratio 1", oc.Oracle)
	}
	got := oc.Policies[0]
	if got.Score != 0.46875 || got.Worst != 0.25 || got.Mean != 0.6875 || math.Abs(got.Ratio-0.46875/0.5625) > 1e-12 {
		t.Errorf("policy %+v, want score 0.46875 worst 0.25 mean 0.6875 ratio 0.8333", got)
	}
	if oc.Vectors != 2 || len(got.Cells) != 2 || got.Cells[1].TTFTP99 != 400 {
		t.Errorf("calibration %+v", oc)
	}
	// The search bests are over the vectors alone (p's TTFT 50 is not
	// one): TTFT 100, 100; tok/s 100, 100.
	if want := []CellBest{{100, 100}, {100, 100}}; !slices.Equal(oc.SearchBests, want) {
		t.Errorf("search bests %v, want %v", oc.SearchBests, want)
	}
	// Re-scored against stored bests better than every run here (TTFT
	// 25 on c0, 150 on c1, tok/s 200 on c1), with v1 alone run again
	// (bests over v1, p and the stored: TTFT 25, 150; tok/s 100, 200):
	//	p:  TTFT 25/50 = 0.5, 150/400 = 0.375; tok 1, 50/200 = 0.25
	//	    worst 0.25, mean 2.125/4 = 0.53125, score 0.390625
	//	v1: TTFT 25/100 = 0.25, 150/200 = 0.75; tok 0.5, 0.5
	//	    worst 0.25, mean 0.5, score 0.375
	// p's ratio 0.390625/0.375.
	one := &TuneResult{ScenarioBest: map[string]int{}, Cells: res.Cells, Vectors: res.Vectors[:1]}
	re := scoreOracle("e", one, []*Evaluated{p}, &OracleCalibration{SearchBests: []CellBest{{25, 50}, {150, 200}}})
	if re.Oracle.Score != 0.375 || re.Policies[0].Score != 0.390625 || math.Abs(re.Policies[0].Ratio-0.390625/0.375) > 1e-12 {
		t.Errorf("re-scored: oracle %+v, policy %+v; want scores 0.375 and 0.390625", re.Oracle, re.Policies[0])
	}
	if want := []CellBest{{25, 50}, {150, 200}}; !slices.Equal(re.SearchBests, want) {
		t.Errorf("re-scored search bests %v, want %v (the stored ones merged with v1's)", re.SearchBests, want)
	}
	// The stored cells of the search's policies count where they are not
	// run again: q's TTFT 20 on c0 is the best there (p: 20/50 = 0.4,
	// 0.375; tok 1, 0.25: worst 0.25, mean 2.025/4, score 0.378125); the
	// stored p is p's earlier run and does not count (its TTFT 1 would).
	stored := &OracleCalibration{SearchBests: []CellBest{{25, 50}, {150, 200}}, Policies: []OracleEntry{
		{Name: "q", Cells: []CellStats{{TTFTP99: 20, TokPerSec: 10}, {TTFTP99: 1000, TokPerSec: 10}}},
		{Name: "p", Cells: []CellStats{{TTFTP99: 1, TokPerSec: 10}, {TTFTP99: 1000, TokPerSec: 10}}},
	}}
	if re := scoreOracle("e", one, []*Evaluated{p}, stored); math.Abs(re.Policies[0].Score-0.378125) > 1e-12 || !slices.Equal(re.SearchBests, []CellBest{{25, 50}, {150, 200}}) {
		t.Errorf("re-scored beside stored policies: policy score %v, want 0.378125; search bests %v (the vectors' only)", re.Policies[0].Score, re.SearchBests)
	}
}

// TestCompareCells checks the cell verdicts: adaptive ÷ other − 1 per
// metric, worse beyond 2 %, better from 10 % with nothing worse.
func TestCompareCells(t *testing.T) {
	cells := []Cell{{"a", 1}, {"a", 2}, {"a", 3}, {"a", 4}}
	ad := OracleEntry{Name: PolicyAdaptive, Cells: []CellStats{
		{TTFTP99: 103, E2EP99: 100, TokPerSec: 100, Goodput: 10}, // TTFT 103/100 − 1 = +3 %: worse
		{TTFTP99: 89, E2EP99: 100, TokPerSec: 99, Goodput: 10},   // TTFT −11 %, tok −1 %: better
		{TTFTP99: 50, E2EP99: 100, TokPerSec: 97, Goodput: 10},   // TTFT −50 % but tok −3 %: worse
		{TTFTP99: 100, E2EP99: 100, TokPerSec: 100, Goodput: 1},  // goodput 1 against 0: +∞, better
	}}
	other := OracleEntry{Name: "b", Cells: []CellStats{
		{TTFTP99: 100, E2EP99: 100, TokPerSec: 100, Goodput: 10},
		{TTFTP99: 100, E2EP99: 100, TokPerSec: 100, Goodput: 10},
		{TTFTP99: 100, E2EP99: 100, TokPerSec: 100, Goodput: 10},
		{TTFTP99: 100, E2EP99: 100, TokPerSec: 100, Goodput: 0},
	}}
	cc := CompareCells(cells, ad, other)
	want := []struct{ worse, better bool }{{true, false}, {false, true}, {true, false}, {false, true}}
	for i, w := range want {
		if d := cc.Cells[i]; d.Worse != w.worse || d.Better != w.better {
			t.Errorf("cell %d: %+v, want worse %v better %v", i, d, w.worse, w.better)
		}
	}
	if cc.Worse != 2 || cc.Better != 2 || cc.Against != "b" {
		t.Errorf("counts %d worse %d better against %s, want 2, 2, b", cc.Worse, cc.Better, cc.Against)
	}
	if got := cc.Cells[2].worseText(); got != "tok/s -3.0 %" {
		t.Errorf("cell 2 worse text %q", got)
	}
}

// TestCompareToOracle: against the oracle's vector a cell is worse beyond
// 5 % on TTFT p99, E2E p99 or tok/s, and goodput is shown but not judged.
func TestCompareToOracle(t *testing.T) {
	cells := []Cell{{"a", 1}, {"a", 2}, {"a", 3}, {"a", 4}}
	ad := OracleEntry{Name: PolicyAdaptive, Cells: []CellStats{
		{TTFTP99: 104, E2EP99: 100, TokPerSec: 100, Goodput: 10}, // TTFT +4 %: within 5 %
		{TTFTP99: 100, E2EP99: 106, TokPerSec: 100, Goodput: 10}, // E2E +6 %: worse
		{TTFTP99: 100, E2EP99: 100, TokPerSec: 94, Goodput: 10},  // tok/s −6 %: worse
		{TTFTP99: 100, E2EP99: 100, TokPerSec: 100, Goodput: 5},  // goodput −50 %: not judged
	}}
	same := CellStats{TTFTP99: 100, E2EP99: 100, TokPerSec: 100, Goodput: 10}
	oracle := OracleEntry{Name: "search-7", Cells: []CellStats{same, same, same, same}}
	cc := CompareToOracle(cells, ad, oracle)
	for i, want := range []bool{false, true, true, false} {
		if cc.Cells[i].Worse != want {
			t.Errorf("cell %d: worse %v, want %v (%+v)", i, cc.Cells[i].Worse, want, cc.Cells[i])
		}
	}
	if cc.Worse != 2 || cc.Against != PolicyOracle {
		t.Errorf("%d worse against %q, want 2 against %q", cc.Worse, cc.Against, PolicyOracle)
	}
	if got := cc.Cells[1].worseText(); got != "E2E p99 +6.0 %" {
		t.Errorf("cell 1 worse text %q", got)
	}
	// The same cells against a policy at 2 %, goodput judged: all worse.
	if got := CompareCells(cells, ad, oracle).Worse; got != 4 {
		t.Errorf("CompareCells: %d worse, want 4", got)
	}
	// Better by 10 % on TTFT, but goodput −50 %: not better either.
	ad.Cells[3].TTFTP99 = 80
	if d := CompareToOracle(cells, ad, oracle).Cells[3]; d.Worse || d.Better {
		t.Errorf("cell 3 with goodput −50 %%: %+v, want neither worse nor better", d)
	}
	ad.Cells[3].Goodput = 10
	if d := CompareToOracle(cells, ad, oracle).Cells[3]; !d.Better {
		t.Errorf("cell 3 TTFT −20 %%: %+v, want better", d)
	}
}

// TestOracleSearchCoversShipped: the oracle searches its own list of
// scorers in its order, starting from the shipped profile's calm weights
// and params, and a shipped scorer outside the list is an error naming
// it, not a smaller search.
func TestOracleSearchCoversShipped(t *testing.T) {
	f, err := OracleProfile()
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := configs.LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	if f.Adaptive.Enabled || f.Adaptive.Trade.Enabled || f.Scheduler.Guard != shipped.Scheduler.Guard {
		t.Errorf("oracle profile: loop %v, trade %v, guard %+v", f.Adaptive.Enabled, f.Adaptive.Trade.Enabled, f.Scheduler.Guard)
	}
	if len(f.Scorers) != len(OracleSearch) {
		t.Fatalf("%d scorers, want the %d of OracleSearch", len(f.Scorers), len(OracleSearch))
	}
	for i, s := range f.Scorers {
		if s.Type != OracleSearch[i].Type || scorerName(s) != scorerName(OracleSearch[i]) {
			t.Errorf("scorer %d is %s (type %s), want %s", i, scorerName(s), s.Type, scorerName(OracleSearch[i]))
		}
		want, params := 0.0, OracleSearch[i].Params
		for _, c := range shipped.Scorers {
			if scorerName(c) == scorerName(s) {
				want, params = *c.Weight, c.Params
			}
		}
		if *s.Weight != want {
			t.Errorf("%s starts at %v, want the shipped %v", scorerName(s), *s.Weight, want)
		}
		if !reflect.DeepEqual(s.Params, params) {
			t.Errorf("%s has params %v, want %v", scorerName(s), s.Params, params)
		}
	}
	// The shipped profile's two time-costs are two entries, each with its
	// own params: the trade's prices decode, the other does not.
	tc := slices.IndexFunc(f.Scorers, func(s configs.ScorerConfig) bool { return scorerName(s) == scorers.TypeTimeCost })
	tr := slices.IndexFunc(f.Scorers, func(s configs.ScorerConfig) bool { return scorerName(s) == tradeCost })
	if tc < 0 || tr < 0 || f.Scorers[tc].Params["decode_credit"] != nil || f.Scorers[tr].Params["decode_credit"] == nil {
		t.Errorf("time-cost at %d, trade-cost at %d: %v / %v, want one without decode_credit and one with", tc, tr, f.Scorers[max(tc, 0)].Params, f.Scorers[max(tr, 0)].Params)
	}
	one := 1.0
	sticky := configs.ScorerConfig{Type: scorers.TypeSession, Name: "sticky", Weight: &one}
	if _, err := oracleProfileOf(withScorer(shipped, sticky)); err == nil || !strings.Contains(err.Error(), `"sticky"`) {
		t.Errorf("a shipped scorer outside the search space: %v, want an error naming it", err)
	}
	// A known type under a name the search does not have is outside it too.
	other := configs.ScorerConfig{Type: scorers.TypeTimeCost, Name: "other-cost", Weight: &one}
	if _, err := oracleProfileOf(withScorer(shipped, other)); err == nil || !strings.Contains(err.Error(), `"other-cost"`) {
		t.Errorf("a time-cost named other-cost: %v, want an error naming it", err)
	}
}

// withScorer returns a copy of f with s added to its scorers.
func withScorer(f *configs.File, s configs.ScorerConfig) *configs.File {
	g := *f
	g.Scorers = append(slices.Clone(f.Scorers), s)
	return &g
}

// TestRunOracle runs the oracle on one short scenario and two
// calibrations: the guard-only policy is the search's own starting vector
// (zero-weight token-load changes no pick), so the oracle scores at least
// as well; the oracle's ratio is 1; and a second run gives the same file.
func TestRunOracle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulator")
	}
	f, err := OracleProfile()
	if err != nil {
		t.Fatal(err)
	}
	pols, err := Policies([]string{PolicyAdaptive, PolicyGuardOnly, PolicyRoundRobin})
	if err != nil {
		t.Fatal(err)
	}
	cfg := OracleConfig{Scenarios: []string{"small-pool-burst"}, Duration: 40 * time.Second,
		Engines: []string{"a100-40gb-llama-3.1-8b", "l4-24gb-llama-3.1-8b"}, Policies: pols, Profile: f,
		Seed: 1, Seeds: 1, Budget: 3, Parallel: 2}
	var steps int
	cfg.Progress = func(p OracleProgress) { steps++ }
	o, err := RunOracle(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := OracleBaselines(f)
	if len(base) != 12 || base[0].Name != PolicyGuardOnly || base[8].Name != "token-load" || base[9].Name != "time-cost" || base[10].Name != "trade-cost" || base[11].Name != "trade-shape" {
		t.Errorf("baselines %v: want guard-only, three load shares, four built-ins, token-load, time-cost, trade-cost, the trade shape", base)
	}
	// The trade shape is configs/adaptive.yaml's adaptive.trade.weights
	// alone, the vector the published oracle runs were seeded with.
	if w := base[len(base)-1].Weights; !slices.Equal(w, []float64{0.5, 0, 3, 0, 0, 0, 0, 16}) {
		t.Errorf("trade shape %v, want prefix 0.5 : kvcache 3 : trade-cost 16 and nothing else", w)
	}
	if len(o.Calibrations) != 2 || len(o.Scorers) != 8 || o.Scorers[5] != "token-load" || o.Scorers[6] != "time-cost" || o.Scorers[7] != "trade-cost" || o.Guard.Factor != 2.5 {
		t.Fatalf("file %+v", o)
	}
	if steps != 2*(12+3) {
		t.Errorf("%d progress calls, want 2 × (12 baselines + 3 policies)", steps)
	}
	for _, c := range o.Calibrations {
		g, _ := c.entry(PolicyGuardOnly)
		if c.Oracle.Ratio != 1 || g.Score > c.Oracle.Score || len(c.Oracle.Weights) != 8 || len(c.Cells) != 2 {
			t.Errorf("%s: oracle %v (ratio %v, score %v), guard-only %v; %d cells", c.Engine, c.Oracle.Weights, c.Oracle.Ratio, c.Oracle.Score, g.Score, len(c.Cells))
		}
		if cc := c.Comparisons(); len(cc) != 3 || cc[0].Against != PolicyOracle {
			t.Errorf("%s: comparisons %v, want the oracle's vector, then guard-only and round-robin", c.Engine, cc)
		}
	}
	o2, err := RunOracle(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var j1, j2 bytes.Buffer
	if err := o.WriteJSON(&j1); err != nil {
		t.Fatal(err)
	}
	if err := o2.WriteJSON(&j2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(j1.Bytes(), j2.Bytes()) {
		t.Error("two runs with the same seeds wrote different oracle.json")
	}
	// The held-back check: seed 2 scores seed 1's oracle vectors and the
	// policies, no search (2 calibrations × (1 vector + 3 policies) steps).
	o.Command = "trimtab sim oracle --seed 1"
	held := cfg
	held.Seed, held.HeldBack, steps = 2, o, 0
	h, err := RunOracle(context.Background(), held)
	if err != nil {
		t.Fatal(err)
	}
	if steps != 2*(1+3) || h.Budget != 1 || h.HeldBack != o.Command || h.Seeds[0] != 2 {
		t.Errorf("held-back run: %d steps, budget %d, held back %q, seeds %v", steps, h.Budget, h.HeldBack, h.Seeds)
	}
	for i, c := range h.Calibrations {
		if c.Vectors != 1 || !slices.Equal(c.Oracle.Weights, o.Calibrations[i].Oracle.Weights) || c.Oracle.Ratio != 1 || len(c.Policies) != 3 {
			t.Errorf("%s held back: %d vectors, oracle %v (seed 1's %v, ratio %v), %d policies", c.Engine, c.Vectors, c.Oracle.Weights, o.Calibrations[i].Oracle.Weights, c.Oracle.Ratio, len(c.Policies))
		}
	}
	// A re-score runs the policies again on the search's seeds against
	// its stored bests: the same scores as the search, with no search
	// (2 calibrations × (the oracle vector + 3 policies) steps).
	rc := cfg
	rc.Rescore, steps = o, 0
	r, err := RunOracle(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	if steps != 2*(1+3) || r.RescoreOf != o.Command || r.Budget != o.Budget || r.HeldBack != "" || r.Duration != "40s" {
		t.Errorf("re-score: %d steps, of %q, budget %d, held back %q, duration %q", steps, r.RescoreOf, r.Budget, r.HeldBack, r.Duration)
	}
	for i, c := range r.Calibrations {
		s := o.Calibrations[i]
		if c.Vectors != s.Vectors || !slices.Equal(c.SearchBests, s.SearchBests) || c.Oracle.Score != s.Oracle.Score {
			t.Errorf("%s re-scored: %d vectors (search %d), bests %v (%v), oracle score %v (%v)", c.Engine, c.Vectors, s.Vectors, c.SearchBests, s.SearchBests, c.Oracle.Score, s.Oracle.Score)
		}
		for j, p := range c.Policies {
			if p.Score != s.Policies[j].Score || p.Ratio != s.Policies[j].Ratio {
				t.Errorf("%s re-scored %s: score %v ratio %v, the search's %v %v", c.Engine, p.Name, p.Score, p.Ratio, s.Policies[j].Score, s.Policies[j].Ratio)
			}
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*OracleConfig)
		want string
	}{
		{"a held-back check", func(c *OracleConfig) { c.Rescore = h }, "is a held-back check"},
		{"other seeds", func(c *OracleConfig) { c.Seed = 2 }, "seeds"},
		{"another duration", func(c *OracleConfig) { c.Duration = time.Minute }, "duration"},
		{"with held-back", func(c *OracleConfig) { c.HeldBack = o }, "neither searches"},
		{"no bests", func(c *OracleConfig) {
			old := *o
			old.Calibrations = slices.Clone(o.Calibrations)
			old.Calibrations[1].SearchBests = nil
			c.Rescore = &old
		}, "no search bests for calibration l4-24gb-llama-3.1-8b"},
	} {
		bad := rc
		tc.edit(&bad)
		if _, err := RunOracle(context.Background(), bad); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("re-score of %s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	missing := held
	missing.HeldBack = &OracleFile{Scorers: o.Scorers, Guard: o.Guard, Calibrations: o.Calibrations[:1]}
	if _, err := RunOracle(context.Background(), missing); err == nil || !strings.Contains(err.Error(), "no column for calibration l4-24gb-llama-3.1-8b") {
		t.Errorf("held-back run without the l4 column: %v", err)
	}
	other := held
	other.HeldBack = &OracleFile{Scorers: []string{"prefix"}, Guard: o.Guard, Calibrations: o.Calibrations}
	if _, err := RunOracle(context.Background(), other); err == nil || !strings.Contains(err.Error(), "scorers") {
		t.Errorf("held-back run with other scorers: %v", err)
	}
	unguarded := held
	wb := o.Guard
	wb.WaitFactor, wb.WaitSlack = 0, 0
	if wb == o.Guard {
		wb.WaitFactor, wb.WaitSlack = 4, 3
	}
	unguarded.HeldBack = &OracleFile{Scorers: o.Scorers, Guard: wb, Calibrations: o.Calibrations}
	if _, err := RunOracle(context.Background(), unguarded); err == nil || !strings.Contains(err.Error(), "guard") {
		t.Errorf("held-back run searched under another guard: %v", err)
	}
	// Starting from an earlier run: its a100 oracle, over scorers of its
	// own (one this search lacks, trade-cost missing), is one more vector
	// there; the l4, which it has no column for, starts from the
	// baselines alone. A held-back check has no starting points.
	earlier := &OracleFile{Command: "trimtab sim oracle --commit old", Commit: "old", Scorers: []string{"kvcache", "gone", "prefix"},
		Calibrations: []OracleCalibration{{Engine: "a100-40gb-llama-3.1-8b", Oracle: OracleEntry{Weights: []float64{7, 9, 0.25}}}}}
	started := cfg
	started.Policies, started.StartFrom, steps = nil, []*OracleFile{earlier}, 0
	so, err := RunOracle(context.Background(), started)
	if err != nil {
		t.Fatal(err)
	}
	if len(so.Calibrations) != 2 || so.Calibrations[0].Vectors != 13 || so.Calibrations[1].Vectors != 12 || !slices.Equal(so.StartedFrom, []string{earlier.Command}) {
		t.Errorf("search started from an earlier run: %d calibrations, vectors %d and %d (want 13, 12), started from %q", len(so.Calibrations), so.Calibrations[0].Vectors, so.Calibrations[1].Vectors, so.StartedFrom)
	}
	var smd bytes.Buffer
	if err := so.WriteMarkdown(&smd); err != nil || !strings.Contains(smd.String(), "the baselines and the oracles of 1 earlier run on the same calibration, where it has one") {
		t.Errorf("oracle.md of a started search does not say where it started (%v):\n%s", err, smd.String())
	}
	both := held
	both.StartFrom = []*OracleFile{earlier}
	if _, err := RunOracle(context.Background(), both); err == nil || !strings.Contains(err.Error(), "held-back") {
		t.Errorf("held-back check with starting points: %v", err)
	}
	back, err := ParseOracleFile(j1.Bytes())
	if err != nil || len(back.Calibrations) != 2 {
		t.Fatalf("read back: %v", err)
	}
	var md bytes.Buffer
	if err := o.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| policy | a100-40gb-llama-3.1-8b | l4-24gb-llama-3.1-8b |", "| oracle | 1.000 | 1.000 |", "### adaptive against the oracle's vector", "### adaptive against guard-only", "### adaptive against round-robin"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("oracle.md lacks %q:\n%s", want, md.String())
		}
	}
}

func TestOracleStartOf(t *testing.T) {
	earlier := &OracleFile{Commit: "7cd6f4f", Scorers: []string{"prefix", "kvcache", "gone", "trade-cost"},
		Calibrations: []OracleCalibration{
			{Engine: "e1", Oracle: OracleEntry{Weights: []float64{2, 0.5, 9, 1}}},
			{Engine: "e2", Oracle: OracleEntry{Weights: []float64{0, 0, 9, 0}}},
			{Engine: "e3", Oracle: OracleEntry{Weights: []float64{1}}},
		}}
	search := []string{"prefix", "queue", "kvcache", "trade-cost", "token-load"}
	c, ok := earlier.startOf("e1", search)
	if !ok || c.Name != "earlier-oracle-7cd6f4f" || !slices.Equal(c.Weights, []float64{2, 0, 0.5, 1, 0}) {
		t.Errorf("e1: %v %v, want prefix 2, kvcache 0.5, trade-cost 1 by name, the rest 0", c, ok)
	}
	// Weight only on a scorer this search lacks: nothing to start from.
	if c, ok := earlier.startOf("e2", search); ok {
		t.Errorf("e2: %v, want no start (its only weight is on a scorer the search lacks)", c)
	}
	// A column with the wrong number of weights, and one that is missing.
	for _, e := range []string{"e3", "e4"} {
		if c, ok := earlier.startOf(e, search); ok {
			t.Errorf("%s: %v, want no start", e, c)
		}
	}
}

// oracleFixture is a two-calibration oracle file with adaptive,
// guard-only and round-robin on two cells; adaptive's TTFT p99 on cell
// (s, 2) of calibration e1 is ttft, its other values equal guard-only's.
func oracleFixture(seed uint64, ttft float64) *OracleFile {
	st := func(ttft float64) []CellStats {
		return []CellStats{{TTFTP99: 100, E2EP99: 1000, TokPerSec: 50, Goodput: 2}, {TTFTP99: ttft, E2EP99: 1000, TokPerSec: 50, Goodput: 2}}
	}
	cal := func(engine string, adTTFT float64) OracleCalibration {
		return OracleCalibration{Engine: engine, Cells: []Cell{{"s", 1}, {"s", 2}}, Vectors: 9,
			Oracle: OracleEntry{Name: "search-9", Weights: []float64{32, 0, 1, 0, 0, 4}, Score: 1, Ratio: 1, Worst: 1, Mean: 1, Cells: st(100)},
			Policies: []OracleEntry{
				{Name: PolicyAdaptive, Score: 0.9, Ratio: 0.9, Cells: st(adTTFT)},
				{Name: PolicyGuardOnly, Score: 0.95, Ratio: 0.95, Cells: st(100)},
				{Name: PolicyRoundRobin, Score: 0.5, Ratio: 0.5, Cells: st(400)},
			}}
	}
	return &OracleFile{Command: "trimtab sim oracle", Commit: "abc123", Date: "2026-12-06", Seeds: []uint64{seed, seed + 1, seed + 2}, Budget: 40,
		Scenarios: []string{"s"}, Scorers: []string{"prefix", "queue", "kvcache", "inflight", "pending-prefill", "token-load"},
		Guard:        OracleGuard{Factor: 2.5, Slack: 6, CrowdFactor: 1.5, CrowdSlack: 3},
		Calibrations: []OracleCalibration{cal("e1", ttft), cal("e2", 100)}}
}

// TestRenderOracleDoc checks the generated section's table and sentences
// on a fixture, that it is deterministic, and that replacing it in a
// document is idempotent and leaves the rest of the document alone.
func TestRenderOracleDoc(t *testing.T) {
	main, check := oracleFixture(1, 125), oracleFixture(4, 101)
	sec := RenderOracleDoc(main, check, "trimtab sim oracle doc")
	if again := RenderOracleDoc(oracleFixture(1, 125), oracleFixture(4, 101), "trimtab sim oracle doc"); again != sec {
		t.Fatal("two renderings of the same files differ")
	}
	for _, want := range []string{
		"| policy | e1 | e2 |",
		"| adaptive | 0.900 (0.900) | 0.900 (0.900) |",
		"| oracle | 1.000 (1.000) | 1.000 (1.000) |",
		"commit abc123, 2026-12-06",
		// e1 (s, 2): 125/100 − 1 = +25 %; on seeds 4–6 101/100 − 1 = +1 %, not worse.
		"**guard-only**: adaptive scores below guard-only on 2 of 2 calibrations: e1 (0.900 against 0.950; seeds 4–6: 0.900 against 0.950)",
		"adaptive is worse than guard-only by more than 2 % in 1 of 4 cells (0 also on seeds 4–6), the worst: e1 s@2 (TTFT p99 +25.0 %).",
		// Against round-robin: 125/400 − 1 = −69 %: never worse.
		"**round-robin**: adaptive scores at least as well as round-robin on every calibration; adaptive is worse than round-robin by more than 2 % in no cell of 4. The oracle's vector is worse than round-robin by more than 2 % in 0 of 4 cells.",
		// The oracle's vector against guard-only: the same cells, never worse.
		"(TTFT p99 +25.0 %). The oracle's vector is worse than guard-only by more than 2 % in 0 of 4 cells.",
		// Against the oracle's vector at 5 %: the same +25 % cell; the
		// score 0.9 of the oracle's is more than 5 % below it.
		"**the oracle's vector**: adaptive scores more than 5 % below the oracle on 2 of 2 calibrations: e1 (0.900 against 1.000; seeds 4–6: 0.900 against 1.000)",
		"adaptive is worse than the oracle's vector by more than 5 % in 1 of 4 cells (0 also on seeds 4–6), the worst: e1 s@2 (TTFT p99 +25.0 %).",
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("section lacks %q:\n%s", want, sec)
		}
	}
	// An oracle vector 10 % slower than guard-only on one cell counts.
	slow := oracleFixture(1, 125)
	slow.Calibrations[0].Oracle.Cells[0].TTFTP99 = 110
	if sec := RenderOracleDoc(slow, check, "c"); !strings.Contains(sec, "The oracle's vector is worse than guard-only by more than 2 % in 1 of 4 cells.") {
		t.Errorf("the oracle's own count against guard-only:\n%s", sec)
	}
	doc := []byte("# title\n\nintro\n\n" + OracleDocBegin + "\nplaceholder\n" + OracleDocEnd + "\n\n## Method\n")
	once, err := ReplaceOracleDoc(doc, sec)
	if err != nil {
		t.Fatal(err)
	}
	twice, err := ReplaceOracleDoc(once, sec)
	if err != nil || !bytes.Equal(once, twice) {
		t.Errorf("not idempotent (%v):\n%s\n---\n%s", err, once, twice)
	}
	if !bytes.HasPrefix(once, []byte("# title\n\nintro\n\n"+OracleDocBegin)) || !bytes.HasSuffix(once, []byte(OracleDocEnd+"\n\n## Method\n")) || bytes.Contains(once, []byte("placeholder")) {
		t.Errorf("replaced document:\n%s", once)
	}
	for _, bad := range []string{"no markers", OracleDocEnd + OracleDocBegin, OracleDocBegin + OracleDocEnd + OracleDocBegin} {
		if _, err := ReplaceOracleDoc([]byte(bad), sec); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestRenderOracleTable: one row per calibration from its search run and
// held-back check, deterministic, and a check with no search, a check of
// another search run or a second search run is an error naming the
// calibration.
func TestRenderOracleTable(t *testing.T) {
	search := oracleFixture(1, 125)
	// A profile scored with --profile runs the loop: never the best fixed policy.
	search.Calibrations[1].Policies = append(search.Calibrations[1].Policies, OracleEntry{Name: "adaptive-decode", Score: 0.99, Ratio: 0.99, Cells: search.Calibrations[1].Policies[1].Cells})
	check := oracleFixture(4, 101)
	check.HeldBack = search.Command
	check.Calibrations = check.Calibrations[:1] // e1 only
	check.Calibrations[0].Policies[0].Ratio = 0.97
	runs := []OracleRun{{File: check, Link: "r/e1-46/oracle.md"}, {File: search, Link: "r/both-13/oracle.md"}}
	got, err := RenderOracleTable(runs, "trimtab sim oracle table --dir r")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		OracleTableBegin, OracleTableEnd, "Generated by `trimtab sim oracle table --dir r`.",
		// e1: adaptive 0.9 (check 0.97), guard-only 0.95 the best fixed,
		// cell s@2 +25 % TTFT against the oracle (the check's +1 % is not).
		"| [e1](r/both-13/oracle.md) | 0.900 (0.970) | 0.950 (0.950) | guard-only 0.950 (0.950) | prefix 32 : kvcache 1 : token-load 4 | 1 of 2 (0 of 2); worst `s`@2 (TTFT p99 +25.0 %) | abc123 |",
		// e2 has no check run and no worse cell.
		"| [e2](r/both-13/oracle.md) | 0.900 | 0.950 | guard-only 0.950 | prefix 32 : kvcache 1 : token-load 4 | 0 of 2 | abc123 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if again, _ := RenderOracleTable(runs, "trimtab sim oracle table --dir r"); again != got {
		t.Error("two renderings differ")
	}
	if _, err := RenderOracleTable([]OracleRun{{File: check, Link: "x"}}, "c"); err == nil || !strings.Contains(err.Error(), "e1") {
		t.Errorf("a check with no search run: %v", err)
	}
	if _, err := RenderOracleTable([]OracleRun{{File: search, Link: "x"}, {File: search, Link: "y"}}, "c"); err == nil || !strings.Contains(err.Error(), "second search run") {
		t.Errorf("two search runs: %v", err)
	}
	// A re-score of the search takes its place, in either order, and
	// a check of the re-score pairs with it.
	rescored := oracleFixture(1, 125)
	rescored.Command, rescored.RescoreOf = search.Command+" --rescore r/both-13", search.Command
	rescored.Calibrations[0].Policies[0].Ratio = 0.96
	recheck := *check
	recheck.HeldBack = rescored.Command
	for _, order := range [][]*OracleFile{{search, rescored, &recheck}, {rescored, search, &recheck}} {
		var rs []OracleRun
		for _, f := range order {
			link := map[*OracleFile]string{search: "r/both-13/oracle.md", rescored: "r/re-13/oracle.md", &recheck: "r/e1-46/oracle.md"}[f]
			rs = append(rs, OracleRun{File: f, Link: link})
		}
		got, err := RenderOracleTable(rs, "c")
		if err != nil || !strings.Contains(got, "| [e1](r/re-13/oracle.md) | 0.960 (0.970) |") {
			t.Errorf("a search and its re-score (%v):\n%s", err, got)
		}
	}
	// A check of an earlier search (its oracle chosen by another run).
	stale := *check
	stale.HeldBack = search.Command + " --commit old"
	if _, err := RenderOracleTable([]OracleRun{{File: &stale, Link: "x"}, {File: search, Link: "y"}}, "c"); err == nil || !strings.Contains(err.Error(), "another search run") {
		t.Errorf("a check of another search run: %v", err)
	}
	doc := []byte("a\n" + OracleTableBegin + "\nold\n" + OracleTableEnd + "\nb\n")
	out, err := ReplaceOracleTable(doc, got)
	if err != nil || !strings.HasPrefix(string(out), "a\n"+OracleTableBegin) || !strings.HasSuffix(string(out), OracleTableEnd+"\nb\n") || strings.Contains(string(out), "old") {
		t.Errorf("replaced (%v):\n%s", err, out)
	}
}
