package sim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/trimtab/trimtab/sim/engine"
	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// TestAdapterDrawZipf: with exponent 1 over 32 adapters, adapter k is
// drawn with probability (1/k) / H(32), H(32) = 4.0585: adapter 1 25 %,
// adapter 2 12.3 %, adapter 32 0.77 %.
func TestAdapterDrawZipf(t *testing.T) {
	d := newAdapterDraw(&scenario.Workload{Adapters: 32, AdapterZipf: 1}, 1)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	count := make([]int, 32)
	for range n {
		count[d.draw(rng)]++
	}
	h := 0.0
	for k := 1; k <= 32; k++ {
		h += 1 / float64(k)
	}
	for _, k := range []int{1, 2, 32} {
		want := 1 / float64(k) / h
		got := float64(count[k-1]) / n
		if math.Abs(got-want) > 0.1*want {
			t.Errorf("adapter %d drawn %.4f of the time, want %.4f", k, got, want)
		}
	}
	if d.names[0] != "lora-1" || d.names[31] != "lora-32" {
		t.Errorf("names %q … %q", d.names[0], d.names[31])
	}
	if newAdapterDraw(&scenario.Workload{}, 1) != nil {
		t.Error("a workload without adapters has a draw")
	}
}

// loraRun runs the shipped lora-skew scenario under policy for 60 s.
func loraRun(t *testing.T, policy string, seed uint64) report.RunSummary {
	t.Helper()
	sc, err := ShippedScenario("lora-skew")
	if err != nil {
		t.Fatal(err)
	}
	p, ok := builtinPolicy(policy)
	if !ok {
		t.Fatalf("no policy %s", policy)
	}
	res, err := Run(RunConfig{Scenario: sc.Scaled(60e9), Policy: p, Level: sc.Load.Levels[0], Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary()
	if s.AdapterLoads == nil || s.TTFTP99 == nil {
		t.Fatalf("%s seed %d: no adapter loads or TTFT measured", policy, seed)
	}
	t.Logf("%-13s seed %d: %d adapter loads, TTFT p99 %.0f ms", policy, seed, *s.AdapterLoads, *s.TTFTP99)
	return s
}

// TestLoRASkewResidency: on skewed adapter popularity, scoring residency
// loads at least 30 % fewer adapters than least-loaded routing
// (least-queue) with a TTFT p99 no worse.
func TestLoRASkewResidency(t *testing.T) {
	if testing.Short() {
		t.Skip("two simulated runs of a minute")
	}
	lq := loraRun(t, PolicyLeastQueue, 1)
	lo := loraRun(t, PolicyAdaptiveLoRA, 1)
	if float64(*lo.AdapterLoads) > 0.7*float64(*lq.AdapterLoads) {
		t.Errorf("adaptive-lora loaded %d adapters, want ≤ 70 %% of least-queue's %d", *lo.AdapterLoads, *lq.AdapterLoads)
	}
	if *lo.TTFTP99 > *lq.TTFTP99 {
		t.Errorf("adaptive-lora TTFT p99 %.0f ms, worse than least-queue's %.0f ms", *lo.TTFTP99, *lq.TTFTP99)
	}
}

// TestApplyEngineKeepsAdapterSlots: an engine calibration replaces the
// GPU model but not the scenario's adapter slots.
func TestApplyEngineKeepsAdapterSlots(t *testing.T) {
	sc, err := ShippedScenario("lora-skew")
	if err != nil {
		t.Fatal(err)
	}
	if err := ApplyEngine([]*scenario.Scenario{sc}, "h100-80gb-llama-3.1-8b"); err != nil {
		t.Fatal(err)
	}
	if c := sc.EngineConfig(); c.MaxLoRAs != 4 || c.MaxCPULoRAs != 8 || c.NumBlocks == engine.DefaultConfig().NumBlocks {
		t.Errorf("after the h100 calibration: max_loras %d, max_cpu_loras %d, num_blocks %d; want 4, 8 and the h100's", c.MaxLoRAs, c.MaxCPULoRAs, c.NumBlocks)
	}
}
