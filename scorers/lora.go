package scorers

import (
	"fmt"
	"slices"

	"github.com/trimtab/trimtab/scheduler"
)

// LoRA scores, as constants so tests and docs agree.
const (
	loraActive   = 1.0
	loraFreeSlot = 0.8
)

// LoRAConfig configures the lora scorer. It has no parameters today.
type LoRAConfig struct{}

// DefaultLoRAConfig returns the lora scorer's defaults.
func DefaultLoRAConfig() LoRAConfig { return LoRAConfig{} }

// Validate checks the config.
func (LoRAConfig) Validate() error { return nil }

// LoRA is an affinity scorer that prefers endpoints that already have the
// request's LoRA adapter loaded, then endpoints that can load it without
// evicting another adapter.
//
// Formula:
//
//	1.0  req.LoRA is in Endpoint.LoRA.Active,
//	0.8  otherwise, if the endpoint has a free adapter slot
//	     (len(Active) < Max; Max 0 means unknown, so no known free slot),
//	0    otherwise.
//
// Neutral rule: a request for the base model (req.LoRA == "") gives every
// candidate 1. Adapter sets change slowly, so stale endpoints are scored
// from their last report.
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
		switch {
		case slices.Contains(e.LoRA.Active, req.LoRA):
			out[i] = loraActive
		case len(e.LoRA.Active) < e.LoRA.Max:
			out[i] = loraFreeSlot
		default:
			out[i] = 0
		}
	}
}
