package engine

import (
	"errors"
	"fmt"
	"time"
)

// Config describes one vLLM-like server: its KV cache, its batching limits
// and its step-time model
//
//	step = step_fixed + step_per_prefill_token·(prefill tokens in the batch)
//	     + prefill_attention_per_1k·(prefill (token, earlier token) pairs)/1000
//	     + step_per_decode_seq·(decoding sequences)
//	     + step_per_context_token·(KV tokens the decoding sequences attend to)
//
// The defaults model Llama-3.1-8B-Instruct (bf16) on one NVIDIA A100-40GB
// with vLLM's default scheduler settings; docs/benchmarks.md derives every
// figure and cites its source.
type Config struct {
	// BlockSize is the KV block size in tokens (vLLM --block-size, 16).
	BlockSize int `mapstructure:"block_size"`
	// NumBlocks is the number of GPU KV blocks (vLLM num_gpu_blocks).
	NumBlocks int `mapstructure:"num_blocks"`
	// MaxNumSeqs bounds the running batch (vLLM --max-num-seqs, 256).
	MaxNumSeqs int `mapstructure:"max_num_seqs"`
	// MaxBatchedTokens is the token budget per step, shared by decodes and
	// prefill chunks (vLLM --max-num-batched-tokens with chunked prefill).
	MaxBatchedTokens int `mapstructure:"max_batched_tokens"`
	// StepFixed is the cost of a step independent of its contents
	// (reading the weights once, launch overhead).
	StepFixed time.Duration `mapstructure:"step_fixed"`
	// StepPerPrefillToken is the marginal cost of one prompt token.
	StepPerPrefillToken time.Duration `mapstructure:"step_per_prefill_token"`
	// StepPerDecodeSeq is the marginal cost of one decoding sequence.
	StepPerDecodeSeq time.Duration `mapstructure:"step_per_decode_seq"`
	// StepPerContextToken is the marginal cost of one KV token read by
	// decode attention (KV bytes per token ÷ memory bandwidth); may be 0.
	StepPerContextToken time.Duration `mapstructure:"step_per_context_token"`
	// PrefillAttentionPer1k is the attention cost of one prompt token per
	// 1,000 earlier tokens it attends to (cached ones included): prefill
	// attention is compute-bound and grows with the context, so a
	// prompt's n tokens cost n(n−1)/2 pairs on top of the linear layers.
	// May be 0.
	PrefillAttentionPer1k time.Duration `mapstructure:"prefill_attention_per_1k"`
	// PrefixCaching enables automatic prefix caching (vLLM default on).
	PrefixCaching bool `mapstructure:"prefix_caching"`
}

// DefaultConfig returns the Llama-3.1-8B / A100-40GB model:
// 16-token blocks, 9,000 blocks (144k tokens), 256 sequences, 2,048-token
// steps, 13 ms + 70 µs/prefill token + 2.8 µs per prefill token per 1,000
// tokens of context + 70 µs/decode sequence + 80 ns/context token, prefix
// caching on.
func DefaultConfig() Config {
	return Config{
		BlockSize:           16,
		NumBlocks:           9000,
		MaxNumSeqs:          256,
		MaxBatchedTokens:    2048,
		StepFixed:           13 * time.Millisecond,
		StepPerPrefillToken: 70 * time.Microsecond,
		StepPerDecodeSeq:    70 * time.Microsecond,
		StepPerContextToken: 80 * time.Nanosecond,
		// Causal attention costs 4·heads·head_dim·layers = 4·32·128·32 =
		// 524,288 FLOPs per (token, earlier token) pair; FlashAttention-2
		// reaches 50–73 % of the A100's 312 TFLOPS in the forward pass
		// (Dao 2023); at 61 %, 190 TFLOPS: 2.76 ns a pair.
		PrefillAttentionPer1k: 2800 * time.Nanosecond,
		PrefixCaching:         true,
	}
}

// Validate checks the config; errors name the field.
func (c Config) Validate() error {
	var errs []error
	if c.BlockSize <= 0 {
		errs = append(errs, errors.New("engine.block_size: must be > 0"))
	}
	if c.NumBlocks <= 0 {
		errs = append(errs, errors.New("engine.num_blocks: must be > 0"))
	}
	if c.MaxNumSeqs <= 0 {
		errs = append(errs, errors.New("engine.max_num_seqs: must be > 0"))
	}
	if c.MaxBatchedTokens <= 0 {
		errs = append(errs, errors.New("engine.max_batched_tokens: must be > 0"))
	}
	if c.StepFixed <= 0 {
		errs = append(errs, errors.New("engine.step_fixed: must be > 0"))
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"step_per_prefill_token", c.StepPerPrefillToken},
		{"step_per_decode_seq", c.StepPerDecodeSeq},
		{"step_per_context_token", c.StepPerContextToken},
		{"prefill_attention_per_1k", c.PrefillAttentionPer1k},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("engine.%s: %v, must be ≥ 0", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}
