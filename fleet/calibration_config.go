package fleet

import (
	"errors"
	"fmt"
	"time"
)

// CalibrationConfig is the calibrator's settings (docs/calibration.md).
type CalibrationConfig struct {
	// Interval is how often the calibrator drains the observations,
	// re-estimates and publishes (> 0). Default 5s.
	Interval time.Duration `mapstructure:"interval"`
	// Window is how many observations it keeps per endpoint (16…4096):
	// the prefill estimate follows the last Window requests, the decode
	// line the last 128 of them. Default 1024.
	Window int `mapstructure:"window"`
	// MinSamples is N: an estimate resting on n observations is blended
	// with the prior with weight min(1, n/N) (1…Window). Default 20.
	MinSamples int `mapstructure:"min_samples"`
	// MaxAge forgets observations older than this (> 0), so an endpoint
	// that changed (a new model, a new GPU) is relearned. Default 10m.
	MaxAge time.Duration `mapstructure:"max_age"`
	// Buffer is how many observations the request path may record between
	// two steps (64…1<<20); more are dropped and counted. Default 8192.
	Buffer int `mapstructure:"buffer"`
	// Prior is the engine assumed before anything is learned.
	Prior CalibrationPrior `mapstructure:"prior"`
}

// CalibrationPrior is the engine the calibrator assumes for an endpoint of
// capacity 1 until it has observed it, in the simulator's step model
// (sim/engine.Config, whose keys it shares): a step of a batch costs
// step_fixed + step_per_prefill_token·(prefill tokens) +
// step_per_decode_seq·(decoding sequences) + the attention terms, and
// carries at most max_batched_tokens tokens. An endpoint of capacity c is
// assumed c times as fast with c times the KV blocks (as the simulator
// scales it).
type CalibrationPrior struct {
	BlockSize             int           `mapstructure:"block_size"`
	NumBlocks             int           `mapstructure:"num_blocks"`
	MaxNumSeqs            int           `mapstructure:"max_num_seqs"`
	MaxBatchedTokens      int           `mapstructure:"max_batched_tokens"`
	StepFixed             time.Duration `mapstructure:"step_fixed"`
	StepPerPrefillToken   time.Duration `mapstructure:"step_per_prefill_token"`
	StepPerDecodeSeq      time.Duration `mapstructure:"step_per_decode_seq"`
	StepPerContextToken   time.Duration `mapstructure:"step_per_context_token"`
	PrefillAttentionPer1k time.Duration `mapstructure:"prefill_attention_per_1k"`
}

// DefaultCalibrationPrior returns the simulator's default engine,
// sim/engine.DefaultConfig (Llama-3.1-8B-Instruct bf16 on one
// A100-40GB, vLLM defaults; docs/benchmarks.md derives and cites every
// figure): 16-token blocks, 9,000 blocks, 256 sequences, 2,048-token
// steps, 13 ms + 70 µs per prefill token + 70 µs per decoding sequence,
// 80 ns per context token, 2.8 µs per prefill token per 1,000 tokens of
// context. A test in sim keeps the two equal.
func DefaultCalibrationPrior() CalibrationPrior {
	return CalibrationPrior{
		BlockSize:             16,
		NumBlocks:             9000,
		MaxNumSeqs:            256,
		MaxBatchedTokens:      2048,
		StepFixed:             13 * time.Millisecond,
		StepPerPrefillToken:   70 * time.Microsecond,
		StepPerDecodeSeq:      70 * time.Microsecond,
		StepPerContextToken:   80 * time.Nanosecond,
		PrefillAttentionPer1k: 2800 * time.Nanosecond,
	}
}

// PrefillTokensPerSecond is the prior's prefill throughput when busy
// prefilling: one full step of max_batched_tokens prompt tokens per
// step_fixed + max_batched_tokens·step_per_prefill_token (attention left
// out: it depends on the prompts).
func (p CalibrationPrior) PrefillTokensPerSecond() float64 {
	b := float64(p.MaxBatchedTokens)
	return b / (p.StepFixed.Seconds() + b*p.StepPerPrefillToken.Seconds())
}

// Validate checks the prior; errors name the field under prior.
func (p CalibrationPrior) Validate() error {
	switch {
	case p.BlockSize <= 0 || p.BlockSize > 1<<12:
		return fmt.Errorf("prior.block_size: %d, want 1…4096", p.BlockSize)
	case p.NumBlocks <= 0 || p.NumBlocks > 1<<26:
		return fmt.Errorf("prior.num_blocks: %d, want 1…%d", p.NumBlocks, 1<<26)
	case p.MaxNumSeqs <= 0 || p.MaxNumSeqs > 1<<16:
		return fmt.Errorf("prior.max_num_seqs: %d, want 1…65536", p.MaxNumSeqs)
	case p.MaxBatchedTokens <= 0 || p.MaxBatchedTokens > 1<<20:
		return fmt.Errorf("prior.max_batched_tokens: %d, want 1…%d", p.MaxBatchedTokens, 1<<20)
	case p.StepFixed <= 0 || p.StepFixed > time.Minute:
		return fmt.Errorf("prior.step_fixed: %v, want > 0 and ≤ 1m", p.StepFixed)
	case p.StepPerPrefillToken < 0 || p.StepPerDecodeSeq < 0 || p.StepPerContextToken < 0 || p.PrefillAttentionPer1k < 0:
		return errors.New("prior.step_per_*, prior.prefill_attention_per_1k: must be ≥ 0")
	}
	return nil
}

// DefaultCalibrationConfig returns the defaults: publish every 5s from the
// last 1,024 observations per endpoint, fully learned at 20, forgotten after
// 10m, 8,192 buffered, the default prior.
func DefaultCalibrationConfig() CalibrationConfig {
	return CalibrationConfig{Interval: 5 * time.Second, Window: 1024, MinSamples: 20, MaxAge: 10 * time.Minute, Buffer: 8192, Prior: DefaultCalibrationPrior()}
}

// Validate checks the config; errors name the field.
func (c CalibrationConfig) Validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("calibration.interval: %v, want > 0", c.Interval)
	case c.Window < 16 || c.Window > 4096:
		return fmt.Errorf("calibration.window: %d, want 16…4096", c.Window)
	case c.MinSamples < 1 || c.MinSamples > c.Window:
		return fmt.Errorf("calibration.min_samples: %d, want 1…window (%d)", c.MinSamples, c.Window)
	case c.MaxAge <= 0:
		return fmt.Errorf("calibration.max_age: %v, want > 0", c.MaxAge)
	case c.Buffer < 64 || c.Buffer > 1<<20:
		return fmt.Errorf("calibration.buffer: %d, want 64…%d", c.Buffer, 1<<20)
	}
	if err := c.Prior.Validate(); err != nil {
		return fmt.Errorf("calibration.%w", err)
	}
	return nil
}
