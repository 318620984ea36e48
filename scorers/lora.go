package scorers

import (
	"fmt"
	"slices"

	"github.com/trimtab/trimtab/scheduler"
)

// LoRA scores, as constants so tests and docs agree: the residency tiers
// of llm-d-router's lora-load-state scorer (llm-d/llm-d-router#2792).
const (
	loraGPU       = 1.0 // resident in a GPU slot: no load
	loraCPU       = 0.7 // in the CPU cache: a copy to the GPU
	loraFreeSlot  = 0.6 // a free GPU slot: a load from disk, nothing evicted
	loraEvictable = 0.3 // an idle adapter must make room: a load and an eviction
	loraSaturated = 0.0 // every slot busy or pinned: the request waits for one
)

// LoRAConfig configures the lora scorer. It has no parameters today.
type LoRAConfig struct{}

// DefaultLoRAConfig returns the lora scorer's defaults.
func DefaultLoRAConfig() LoRAConfig { return LoRAConfig{} }

// Validate checks the config.
func (LoRAConfig) Validate() error { return nil }

// LoRA is an affinity scorer that prefers endpoints where the request's
// adapter is resident, then endpoints that can load it cheaply: it scores
// what serving the adapter costs on each endpoint, in tiers.
//
// Formula, for an endpoint that reports residency (LoRAState.Residency,
// vLLM's vllm:lora_adapter_loaded):
//
//	1.0  req.LoRA is in GPU,
//	0.7  req.LoRA is in CPU (the CPU cache),
//	0.6  a GPU slot is free (Used < Max; with Max unknown, Used == 0),
//	0.3  some GPU adapter is evictable: neither pinned nor busy (in
//	     Active or Waiting),
//	0    otherwise (saturated).
//
// An endpoint that reports only vllm:lora_requests_info knows which
// adapters are busy, not which are resident: 1.0 when req.LoRA is in
// Active (running requests hold a GPU slot), 0.3 when fewer than Max
// adapters are busy (an idle slot, most likely holding an idle adapter:
// vLLM keeps adapters loaded until LRU eviction), else 0.
//
// Neutral rule: a request for the base model (req.LoRA == "") gives every
// candidate 1. Adapter sets change slowly, so stale endpoints are scored
// from their last report. Score allocates nothing.
type LoRA struct{}

// NewLoRA builds a lora scorer named name.
func NewLoRA(name string, cfg LoRAConfig, _ Deps) (*LoRA, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scorer %q: %w", name, err)
	}
	return &LoRA{}, nil
}

// Category implements scheduler.Scorer: affinity.
func (*LoRA) Category() scheduler.Category { return scheduler.CategoryAffinity }

// Score implements scheduler.Scorer.
func (*LoRA) Score(_ *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	if req.LoRA == "" {
		allOnes(out)
		return
	}
	for i, e := range eps {
		out[i] = loraTier(&e.LoRA, req.LoRA)
	}
}

func loraTier(st *scheduler.LoRAState, adapter string) float64 {
	if !st.Residency {
		switch {
		case slices.Contains(st.Active, adapter):
			return loraGPU
		case len(st.Active) < st.Max:
			return loraEvictable
		}
		return loraSaturated
	}
	switch {
	case slices.Contains(st.GPU, adapter):
		return loraGPU
	case slices.Contains(st.CPU, adapter):
		return loraCPU
	case st.Used < st.Max || (st.Max == 0 && st.Used == 0):
		return loraFreeSlot
	}
	for _, a := range st.GPU {
		if !slices.Contains(st.Pinned, a) && !slices.Contains(st.Active, a) && !slices.Contains(st.Waiting, a) {
			return loraEvictable
		}
	}
	return loraSaturated
}
