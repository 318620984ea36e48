package sim

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"
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
	oc := scoreOracle("e", res, []*Evaluated{p})
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
	if len(base) != 9 || base[0].Name != PolicyGuardOnly || base[8].Name != "token-load" {
		t.Errorf("baselines %v: want guard-only, three load shares, four built-ins, token-load", base)
	}
	if len(o.Calibrations) != 2 || len(o.Scorers) != 6 || o.Scorers[5] != "token-load" || o.Guard.Factor != 2.5 {
		t.Fatalf("file %+v", o)
	}
	if steps != 2*(9+3) {
		t.Errorf("%d progress calls, want 2 × (9 baselines + 3 policies)", steps)
	}
	for _, c := range o.Calibrations {
		g, _ := c.entry(PolicyGuardOnly)
		if c.Oracle.Ratio != 1 || g.Score > c.Oracle.Score || len(c.Oracle.Weights) != 6 || len(c.Cells) != 2 {
			t.Errorf("%s: oracle %v (ratio %v, score %v), guard-only %v; %d cells", c.Engine, c.Oracle.Weights, c.Oracle.Ratio, c.Oracle.Score, g.Score, len(c.Cells))
		}
		if len(c.Comparisons()) != 2 {
			t.Errorf("%s: comparisons %v", c.Engine, c.Comparisons())
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
	back, err := ParseOracleFile(j1.Bytes())
	if err != nil || len(back.Calibrations) != 2 {
		t.Fatalf("read back: %v", err)
	}
	var md bytes.Buffer
	if err := o.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| policy | a100-40gb-llama-3.1-8b | l4-24gb-llama-3.1-8b |", "| oracle | 1.000 | 1.000 |", "### adaptive against guard-only", "### adaptive against round-robin"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("oracle.md lacks %q:\n%s", want, md.String())
		}
	}
}
