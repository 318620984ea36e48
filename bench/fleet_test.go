package bench

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/scenario"
)

// mixedScenario is a two-server scenario under the shipped mixed pool:
// server 0 an A100-40GB (the base engine), server 1 an H100-80GB.
func mixedScenario(t *testing.T) *scenario.Scenario {
	t.Helper()
	sc := testScenario(t, 2, time.Second)
	if err := sim.ApplyEngine([]*scenario.Scenario{sc}, "mixed-a100-h100-llama-3.1-8b"); err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestFleetRunsEachClassEngine: under the mixed calibration each fake
// server runs its class's engine (scenario.Scenario.ServerEngine), not the
// base engine. Observable three ways: the capacity the target declares
// (the H100 class's 3), the KV cache the server reports in
// vllm:cache_config_info (the A100 default's 9,000 blocks, the H100's
// 29,205), and how long an 8,192-token prefill takes (A100: 4 chunks of
// 2,048 tokens at 13 ms + 2,048 × 70 µs ≈ 156 ms, plus attention
// 8,192²/2 pairs × 2.8 ns ≈ 94 ms: ≈ 720 ms; H100: one 8,192-token
// chunk at 5.75 ms + 8,192 × 17.25 µs ≈ 147 ms plus 33.5 M × 0.87 ns
// ≈ 29 ms: ≈ 176 ms; a ratio of ≈ 4.1). The timing takes each server's
// fastest of three distinct prompts (a loaded machine only adds delay)
// and asks for a ratio above 2; with the base engine on both it is ≈ 1.
func TestFleetRunsEachClassEngine(t *testing.T) {
	sc := mixedScenario(t)
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	tg, err := StartFleet(gctx, g, sc, 2, 1)
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	if err != nil {
		t.Fatal(err)
	}
	if tg[0].Capacity != 1 || tg[1].Capacity != 3 {
		t.Errorf("declared capacities %g, %g; want 1 (A100) and 3 (H100)", tg[0].Capacity, tg[1].Capacity)
	}
	for i, want := range []string{`num_gpu_blocks="9000"`, `num_gpu_blocks="29205"`} {
		resp, err := http.Get("http://" + tg[i].Address + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), want) {
			t.Errorf("pod-%d: cache_config_info lacks %s", i, want)
		}
	}

	const tokens = 8192
	fastest := make([]time.Duration, len(tg))
	var sendFailed atomic.Bool
	var wg sync.WaitGroup
	for i := range tg {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rep := range 3 {
				prompt := make([]byte, tokens*scenario.BytesPerToken)
				for j := range prompt {
					prompt[j] = byte(j*7 + rep*131 + i*17)
				}
				r := send(ctx, http.DefaultClient, clock.RealClock{}, "http://"+tg[i].Address, sc.Model,
					&scenario.Rendered{Prompt: prompt, OutputTokens: 1}, "", 30*time.Second)
				if r.Err != "" || r.PromptTokens != tokens || r.CachedTokens != 0 {
					t.Errorf("pod-%d: %s, prompt tokens %d, cached %d; want a %d-token prefill", i, r.Err, r.PromptTokens, r.CachedTokens, tokens)
					sendFailed.Store(true)
					return
				}
				if rep == 0 || r.TTFT < fastest[i] {
					fastest[i] = r.TTFT
				}
			}
		}()
	}
	wg.Wait()
	if sendFailed.Load() {
		return
	}
	if ratio := float64(fastest[0]) / float64(fastest[1]); ratio < 2 {
		t.Errorf("8,192-token prefill: A100 %v, H100 %v, ratio %.2f; want ≈ 4.1 (> 2)", fastest[0], fastest[1], ratio)
	}
	t.Logf("prefill A100 %v, H100 %v", fastest[0], fastest[1])
}

// TestCompareSimScalesEveryClass: --compare-sim simulates a fleet sped
// up 20 times with every engine class's step costs divided by 20, not
// only the base engine's (H100 step_fixed 5,753 µs / 20 = 287.65 µs).
func TestCompareSimScalesEveryClass(t *testing.T) {
	sc := mixedScenario(t).Scaled(200 * time.Millisecond)
	pols, err := Policies([]string{sim.PolicyRoundRobin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Scenario: sc, Repeat: 1, Seed: 1, FleetSpeed: 20, Levels: []float64{2},
		Targets: []Target{{Address: "a"}, {Address: "b"}}, Policies: pols}
	sw, err := CompareSim(context.Background(), &cfg, sc)
	if err != nil {
		t.Fatal(err)
	}
	base, h100 := sw.Scenario.EngineConfig(), sw.Scenario.Engine.Classes[1].StepFixed
	if base.StepFixed != 13*time.Millisecond/20 || h100 != 5753*time.Microsecond/20 {
		t.Errorf("simulated step_fixed: base %v, h100 %v; want %v, %v", base.StepFixed, h100, 13*time.Millisecond/20, 5753*time.Microsecond/20)
	}
	if sc.Engine.Classes[1].StepFixed != 5753*time.Microsecond {
		t.Errorf("the played scenario's class changed: %v", sc.Engine.Classes[1].StepFixed)
	}
}
