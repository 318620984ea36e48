package sim

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim/scenario"
)

// render returns the prompt bytes of the next request of g.
func render(g scenario.Generator, c int) []byte {
	var r scenario.Request
	g.Next(rand.New(rand.NewPCG(1, 2)), c, &r)
	var b []byte
	for _, s := range r.Segs {
		b = scenario.AppendSegment(b, s)
	}
	return b
}

// TestSharedPrefixLadderShape: the shipped ladder has llm-d-benchmark
// #1908's shape — eight 60 s constant-rate steps from 4 to 96 req/s, a
// 60 s timeout, 512 groups × 8 prompts of a 2,048-token prefix and a
// 256-token question, cycled group-major — and its control shares
// nothing.
func TestSharedPrefixLadderShape(t *testing.T) {
	sc, err := ShippedScenario("shared-prefix-ladder")
	if err != nil {
		t.Fatal(err)
	}
	wantRates := []float64{4, 8, 16, 24, 32, 48, 64, 96}
	if len(sc.Phases) != len(wantRates) || sc.Timeout != time.Minute || sc.Load.Mode != scenario.ModeOpen || sc.Load.Arrivals != scenario.ArrivalsConstant {
		t.Fatalf("%d phases, timeout %v, mode %s, arrivals %s; want 8 steps, 1m, open, constant", len(sc.Phases), sc.Timeout, sc.Load.Mode, sc.Load.Arrivals)
	}
	for i, ph := range sc.Phases {
		rate := ph.Level
		if rate == 0 {
			rate = sc.Load.Levels[0] // the last step runs at the sweep level
		}
		if rate != wantRates[i] || ph.Duration != time.Minute {
			t.Errorf("step %d: %v req/s for %v, want %v req/s for 1m", i, rate, ph.Duration, wantRates[i])
		}
	}
	w := sc.Phases[0].Work()
	g, err := scenario.NewGenerator(sc, w, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	prefix := 2048 * scenario.BytesPerToken
	var prompts [][]byte
	for range 512*8 + 1 {
		prompts = append(prompts, render(g, -1))
	}
	for k, p := range prompts[:16] {
		if len(p) != (2048+256)*scenario.BytesPerToken {
			t.Fatalf("prompt %d: %d bytes, want (2048 + 256) tokens × %d", k, len(p), scenario.BytesPerToken)
		}
	}
	// Requests 0–7 are group 0's eight questions: the same 2,048-token
	// prefix, then different questions; request 8 starts group 1.
	for k := 1; k < 8; k++ {
		if !bytes.Equal(prompts[k][:prefix], prompts[0][:prefix]) || bytes.Equal(prompts[k][prefix:], prompts[0][prefix:]) {
			t.Errorf("request %d: want group 0's prefix and its own question", k)
		}
	}
	if bytes.Equal(prompts[8][:scenario.BytesPerToken*16], prompts[0][:scenario.BytesPerToken*16]) {
		t.Error("request 8 shares group 0's first block: want group 1's prefix")
	}
	// 512 × 8 = 4,096 distinct prompts, then the cycle repeats them.
	if !bytes.Equal(prompts[4096], prompts[0]) {
		t.Error("request 4096 is not request 0 again: the group-major cycle does not wrap")
	}
	ctl, err := ShippedScenario("shared-prefix-ladder-control")
	if err != nil {
		t.Fatal(err)
	}
	cg, err := scenario.NewGenerator(ctl, ctl.Phases[0].Work(), 1, "")
	if err != nil {
		t.Fatal(err)
	}
	a, b := render(cg, -1), render(cg, -1)
	if bytes.Equal(a[:scenario.BytesPerToken*16], b[:scenario.BytesPerToken*16]) {
		t.Error("control: two prompts share their first block; want nothing shared")
	}
}

// TestSharedPrefixLadderRuns plays the ladder and its control in 10 s
// (eight steps of 1.25 s). Each step issues rate × 1.25 s requests, give
// or take the one at its edge; group-major arrivals let prefix affinity
// reuse each group's prefix for its 7 later prompts, at most 7 × 2,048 ÷
// (8 × 2,304) = 77.8 % of prompt tokens, while round robin sends the 8
// prompts of a group to 8 different pods and reuses almost nothing; the
// control reuses nothing under any policy. The phases share one
// group-major cycle, so the steps after the first do not restart it.
func TestSharedPrefixLadderRuns(t *testing.T) {
	pols, err := Policies([]string{PolicyRoundRobin, PolicyPrefixOnly})
	if err != nil {
		t.Fatal(err)
	}
	sc := loadShipped(t, "shared-prefix-ladder", 10*time.Second)
	hit := map[string]float64{}
	for _, p := range pols {
		r, err := Run(RunConfig{Scenario: sc, Policy: p, Level: 96, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		hit[p.Name] = r.PrefixHitRate
		for i, ph := range r.Phases {
			rate := sc.Phases[i].Level
			if rate == 0 {
				rate = 96
			}
			if want := rate * 1.25; math.Abs(float64(ph.Measured)-want) > 1 {
				t.Errorf("%s step %s: %d requests, want %v ± 1", p.Name, ph.Name, ph.Measured, want)
			}
		}
	}
	if hit[PolicyPrefixOnly] < 0.6 || hit[PolicyPrefixOnly] > 0.778 || hit[PolicyRoundRobin] > 0.1 {
		t.Errorf("prefix hit: prefix-only %.3f, round-robin %.3f; want 0.6–0.778 and < 0.1", hit[PolicyPrefixOnly], hit[PolicyRoundRobin])
	}
	ctl := loadShipped(t, "shared-prefix-ladder-control", 10*time.Second)
	r, err := Run(RunConfig{Scenario: ctl, Policy: pols[1], Level: 32, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.PrefixHitRate > 0.01 {
		t.Errorf("control prefix hit %.3f under prefix-only, want ≈ 0", r.PrefixHitRate)
	}
}
