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
	// MaxLoRAs is the number of GPU adapter slots (vLLM --max-loras); a
	// batch holds sequences of at most MaxLoRAs distinct adapters. 0 turns
	// the adapter model off: a sequence's adapter costs nothing.
	MaxLoRAs int `mapstructure:"max_loras"`
	// MaxCPULoRAs is the number of adapters the CPU cache holds, GPU ones
	// included (vLLM --max-cpu-loras); 0 means MaxLoRAs.
	MaxCPULoRAs int `mapstructure:"max_cpu_loras"`
	// LoRALoadCPU is the time to copy an adapter from the CPU cache into a
	// GPU slot; LoRALoadDisk the time to load one from disk (read, convert,
	// copy). A step that needs adapters not on the GPU loads them first
	// and takes that much longer, as vLLM's worker loads the batch's
	// adapters before the forward pass.
	LoRALoadCPU  time.Duration `mapstructure:"lora_load_cpu"`
	LoRALoadDisk time.Duration `mapstructure:"lora_load_disk"`
}

// DefaultConfig returns the Llama-3.1-8B / A100-40GB model:
// 16-token blocks, 9,000 blocks (144k tokens), 256 sequences, 2,048-token
// steps, 13 ms + 70 µs/prefill token + 2.8 µs per prefill token per 1,000
// tokens of context + 70 µs/decode sequence + 80 ns/context token, prefix
// caching on; adapters off (MaxLoRAs 0) with load times of 5 ms from the
// CPU cache and 50 ms from disk.
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
		// A rank-16 adapter on all seven projections of Llama-3.1-8B has
		// 16·(8192+5120+5120+8192+3·18432) = 1,310,720 parameters a layer,
		// 41.9 M over 32 layers: 84 MB in bf16. Over PCIe 4.0 x16 (~25 GB/s)
		// that is 3.4 ms, 5 ms with per-module copies; from local NVMe
		// (~2 GB/s) 42 ms, 50 ms with the copy. These are the fast end:
		// unbatched per-layer copies have been measured at 0.5–1 s
		// (predibase/lorax#433).
		LoRALoadCPU:  5 * time.Millisecond,
		LoRALoadDisk: 50 * time.Millisecond,
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
		{"lora_load_cpu", c.LoRALoadCPU},
		{"lora_load_disk", c.LoRALoadDisk},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("engine.%s: %v, must be ≥ 0", f.name, f.v))
		}
	}
	if c.MaxLoRAs < 0 || c.MaxLoRAs > MaxLoRASlots {
		errs = append(errs, fmt.Errorf("engine.max_loras: %d, must be in [0, %d]", c.MaxLoRAs, MaxLoRASlots))
	}
	if c.MaxCPULoRAs != 0 && (c.MaxCPULoRAs < c.MaxLoRAs || c.MaxCPULoRAs > MaxLoRASlots) {
		errs = append(errs, fmt.Errorf("engine.max_cpu_loras: %d, must be 0 (max_loras) or in [max_loras, %d]", c.MaxCPULoRAs, MaxLoRASlots))
	}
	return errors.Join(errs...)
}

// MaxLoRASlots bounds max_loras and max_cpu_loras (the adapter caches are
// searched linearly).
const MaxLoRASlots = 1024
