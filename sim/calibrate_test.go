package sim

import (
	"math"
	"testing"
	"time"

	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/sim/engine"
)

// calibrationEngines are the engine calibrations the convergence test
// runs on: every one the simulator knows.
func calibrationEngines() map[string]engine.Config {
	return map[string]engine.Config{"default": engine.DefaultConfig()}
}

// overrides spells cfg as a scenario's engine section.
func overrides(cfg engine.Config) EngineOverrides {
	return EngineOverrides{
		BlockSize: cfg.BlockSize, NumBlocks: cfg.NumBlocks, MaxNumSeqs: cfg.MaxNumSeqs, MaxBatchedTokens: cfg.MaxBatchedTokens,
		StepFixed: cfg.StepFixed, StepPerPrefillToken: cfg.StepPerPrefillToken, StepPerDecodeSeq: cfg.StepPerDecodeSeq,
		StepPerContextToken: cfg.StepPerContextToken, PrefillAttention1k: cfg.PrefillAttentionPer1k, DisablePrefixCache: !cfg.PrefixCaching,
	}
}

// TestCalibrationConverges runs 60 s of the chat scenario's traffic on
// each engine with a prior twice too slow per prefill token and checks
// that every endpoint then publishes a learned prefill throughput within
// 10 % of the engine's true value (TruePrefillTokensPerSecond at the
// prompts' mean length).
func TestCalibrationConverges(t *testing.T) {
	for name, ecfg := range calibrationEngines() {
		t.Run(name, func(t *testing.T) {
			scs, err := LoadScenarios([]string{"chat"}, 60*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			sc := scs[0]
			sc.Engine = overrides(ecfg)
			pols, err := Policies([]string{PolicyAdaptive})
			if err != nil {
				t.Fatal(err)
			}
			cc := fleet.DefaultCalibrationConfig()
			cc.Prior.StepPerPrefillToken = 2 * ecfg.StepPerPrefillToken
			res, err := Run(RunConfig{Scenario: sc, Policy: pols[0], Level: 125, Seed: 1, Calibration: &cc})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Calibration) != sc.Servers {
				t.Fatalf("%d endpoints calibrated, want %d", len(res.Calibration), sc.Servers)
			}
			for _, e := range res.Calibration {
				truth := TruePrefillTokensPerSecond(sc.EngineFor(e.Capacity), e.MeanPromptTokens)
				got := e.Calibration.PrefillTokensPerSecond
				if e.Source != "learned" || math.Abs(got/truth-1) > 0.10 {
					t.Errorf("%s: %s %.0f tokens/s (own estimate %.0f from %d samples), true %.0f: off by %+.1f %%",
						e.Address, e.Source, got, e.LearnedPrefillTokensPerSecond, e.PrefillSamples, truth, 100*(got/truth-1))
				}
			}
		})
	}
}

// TestCalibrationPriorIsTheDefaultEngine keeps fleet's prior equal to the
// simulator's default engine, which it cites.
func TestCalibrationPriorIsTheDefaultEngine(t *testing.T) {
	p, e := fleet.DefaultCalibrationPrior(), engine.DefaultConfig()
	if p.BlockSize != e.BlockSize || p.NumBlocks != e.NumBlocks || p.MaxNumSeqs != e.MaxNumSeqs || p.MaxBatchedTokens != e.MaxBatchedTokens ||
		p.StepFixed != e.StepFixed || p.StepPerPrefillToken != e.StepPerPrefillToken || p.StepPerDecodeSeq != e.StepPerDecodeSeq ||
		p.StepPerContextToken != e.StepPerContextToken || p.PrefillAttentionPer1k != e.PrefillAttentionPer1k {
		t.Errorf("prior %+v differs from sim/engine.DefaultConfig %+v", p, e)
	}
}

func TestTruePrefillTokensPerSecond(t *testing.T) {
	// 2,048 / (13 ms + 2,048·(70 µs + 2.8 µs·(1,001−1)/2,000))
	// = 2,048 / (0.013 + 2,048·71.4 µs) = 2,048 / 0.1592272 = 12,862.2
	got := TruePrefillTokensPerSecond(engine.DefaultConfig(), 1001)
	if math.Abs(got-12862.2) > 0.5 {
		t.Errorf("default engine at 1,001-token prompts: %.1f tokens/s, want 12,862.2", got)
	}
}
