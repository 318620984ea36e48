package scorers

import (
	"fmt"

	"github.com/trimtab/trimtab/scheduler"
)

// PendingPrefillConfig configures the pending-prefill scorer. It has no
// parameters today.
type PendingPrefillConfig struct{}

// DefaultPendingPrefillConfig returns the pending-prefill scorer's defaults.
func DefaultPendingPrefillConfig() PendingPrefillConfig { return PendingPrefillConfig{} }

// Validate checks the config.
func (PendingPrefillConfig) Validate() error { return nil }

// PendingPrefill is a distribution scorer that prefers endpoints with
// little prefill work queued by this router: the prompt bytes of requests
// sent there that have not received their first response byte
// (Endpoint.PendingPrefill; the scheduler adds a prompt at pick time and
// releases it at Decision.FirstByte, on a retry, or at Done). A new
// request's time to first token waits for exactly that work, and unlike
// the scraped queue it is never stale; unlike in-flight counts it ignores
// requests that are only decoding.
//
// Formula: with p_i = PendingPrefill_i / Capacity_i (capacity 1 unless
// declared),
//
//	score_i = (max p − p_i) / (max p − min p),  and 1 for all when max = min.
//
// 1 means the least pending prefill among the candidates, 0 the most.
// Neutral rule: none needed — the count is local and always current; all
// candidates equal (e.g. nothing pending) gives every candidate 1.
type PendingPrefill struct{}

// NewPendingPrefill builds a pending-prefill scorer named name.
func NewPendingPrefill(name string, cfg PendingPrefillConfig, _ Deps) (*PendingPrefill, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scorer %q: %w", name, err)
	}
	return &PendingPrefill{}, nil
}

// Category implements scheduler.Scorer: distribution.
func (*PendingPrefill) Category() scheduler.Category { return scheduler.CategoryDistribution }

// Score implements scheduler.Scorer.
func (*PendingPrefill) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i, e := range eps {
		out[i] = float64(max(e.PendingPrefill(), 0)) / e.CapacityOrOne()
	}
	if !minMaxInPlace(out) {
		allOnes(out)
	}
}
