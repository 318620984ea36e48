package scenario

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/trimtab/trimtab/sim/engine"
)

// EngineOverrides are optional replacements for engine defaults: a
// scenario's engine: section, or an engine calibration file (sim/engines).
// Classes, when set, make the pool mixed (see EngineClass).
type EngineOverrides struct {
	BlockSize           int           `yaml:"block_size"`
	NumBlocks           int           `yaml:"num_blocks"`
	MaxNumSeqs          int           `yaml:"max_num_seqs"`
	MaxBatchedTokens    int           `yaml:"max_batched_tokens"`
	StepFixed           time.Duration `yaml:"step_fixed"`
	StepPerPrefillToken time.Duration `yaml:"step_per_prefill_token"`
	StepPerDecodeSeq    time.Duration `yaml:"step_per_decode_seq"`
	StepPerContextToken time.Duration `yaml:"step_per_context_token"`
	PrefillAttention1k  time.Duration `yaml:"prefill_attention_per_1k"`
	DisablePrefixCache  bool          `yaml:"disable_prefix_caching"`
	MaxLoRAs            int           `yaml:"max_loras"`
	MaxCPULoRAs         int           `yaml:"max_cpu_loras"`
	LoRALoadCPU         time.Duration `yaml:"lora_load_cpu"`
	LoRALoadDisk        time.Duration `yaml:"lora_load_disk"`
	// Classes split the servers into engine classes (GPU generations,
	// models), each with its own engine.
	Classes []EngineClass `yaml:"classes"`
}

// Apply returns base with the non-zero overrides applied (Classes aside:
// see Scenario.ServerEngine).
func (o EngineOverrides) Apply(base engine.Config) engine.Config {
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	setD := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	set(&base.BlockSize, o.BlockSize)
	set(&base.NumBlocks, o.NumBlocks)
	set(&base.MaxNumSeqs, o.MaxNumSeqs)
	set(&base.MaxBatchedTokens, o.MaxBatchedTokens)
	setD(&base.StepFixed, o.StepFixed)
	setD(&base.StepPerPrefillToken, o.StepPerPrefillToken)
	setD(&base.StepPerDecodeSeq, o.StepPerDecodeSeq)
	setD(&base.StepPerContextToken, o.StepPerContextToken)
	setD(&base.PrefillAttentionPer1k, o.PrefillAttention1k)
	if o.DisablePrefixCache {
		base.PrefixCaching = false
	}
	set(&base.MaxLoRAs, o.MaxLoRAs)
	set(&base.MaxCPULoRAs, o.MaxCPULoRAs)
	setD(&base.LoRALoadCPU, o.LoRALoadCPU)
	setD(&base.LoRALoadDisk, o.LoRALoadDisk)
	return base
}

// EngineClass is one class of a mixed pool: a share of the servers that
// run the pool's engine with the class's own overrides (another GPU
// generation: its own KV cache and step costs), and declare Capacity to
// the router.
type EngineClass struct {
	// Name labels the class (e.g. "h100-80gb").
	Name string `yaml:"name"`
	// Share is the fraction of the servers in the class, in (0, 1]; the
	// shares sum to 1.
	Share float64 `yaml:"share"`
	// Capacity is what each server of the class declares to the router,
	// relative to the others, in (0, 64] (default 1).
	Capacity float64 `yaml:"capacity"`
	// EngineOverrides apply on top of the pool's engine; they cannot
	// nest classes or change block_size.
	EngineOverrides `yaml:",inline"`
}

// ClassOf returns the engine class of server i (−1 without classes).
// Servers are dealt to classes by smooth weighted round robin over the
// shares, so every prefix of the servers holds each class in close to its
// share (with shares ½ and ½: A B A B …) and a pod lost or joined is not
// always of one class.
func (o *EngineOverrides) ClassOf(i int) int {
	if len(o.Classes) == 0 {
		return -1
	}
	credit := make([]float64, len(o.Classes))
	pick := 0
	for range i + 1 {
		pick = 0
		for k, c := range o.Classes {
			credit[k] += c.Share
			if credit[k] > credit[pick] {
				pick = k
			}
		}
		credit[pick]--
	}
	return pick
}

// Validate checks the overrides applied to the engine defaults and every
// class; errors name the key as the YAML spells it under engine:.
func (o *EngineOverrides) Validate() error {
	base := o.Apply(engine.DefaultConfig())
	errs := []error{base.Validate()}
	if len(o.Classes) == 0 {
		return errors.Join(errs...)
	}
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(o.Classes) > 16 {
		bad("engine.classes: %d classes, want at most 16", len(o.Classes))
	}
	sum := 0.0
	for k := range o.Classes {
		c := &o.Classes[k]
		f := fmt.Sprintf("engine.classes[%d]", k)
		if c.Name == "" {
			bad("%s.name: must be set", f)
		}
		if !(c.Share > 0) || c.Share > 1 {
			bad("%s.share: %v, want in (0, 1]", f, c.Share)
		}
		sum += c.Share
		if !(c.Capacity > 0) || c.Capacity > 64 {
			bad("%s.capacity: %v, want in (0, 64]", f, c.Capacity)
		}
		if len(c.Classes) > 0 {
			bad("%s.classes: classes cannot nest", f)
		}
		if c.BlockSize != 0 && c.BlockSize != base.BlockSize {
			bad("%s.block_size: %d, but the pool's is %d (the router hashes one block size)", f, c.BlockSize, base.BlockSize)
		}
		if err := c.Apply(base).Validate(); err != nil {
			bad("%s: %w", f, err)
		}
	}
	if math.Abs(sum-1) > 1e-9 {
		bad("engine.classes: shares sum to %v, want 1", sum)
	}
	return errors.Join(errs...)
}

// setDefaults fills each class's capacity left zero with 1.
func (o *EngineOverrides) SetDefaults() {
	for k := range o.Classes {
		if o.Classes[k].Capacity == 0 {
			o.Classes[k].Capacity = 1
		}
	}
}
