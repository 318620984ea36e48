package scorers

import (
	"fmt"

	"github.com/trimtab/trimtab/scheduler"
)

// InFlightConfig configures the inflight scorer. It has no parameters today.
type InFlightConfig struct{}

// DefaultInFlightConfig returns the inflight scorer's defaults.
func DefaultInFlightConfig() InFlightConfig { return InFlightConfig{} }

// Validate checks the config.
func (InFlightConfig) Validate() error { return nil }

// InFlight is a distribution scorer that prefers endpoints with few
// requests in flight from this router. The count is router-local
// (Endpoint.InFlight: incremented by the scheduler at pick time, released
// by Decision.Done), so a burst of simultaneous requests does not all see
// the same idle pod between two metric scrapes.
//
// Formula: with f_i = InFlight_i / Capacity_i (capacity 1 unless declared),
//
//	score_i = (max f − f_i) / (max f − min f),  and 1 for all when max = min.
//
// 1 means the fewest in-flight requests among the candidates, 0 the most.
// Neutral rule: none needed — the count is local and always current, so
// stale metrics do not affect it; all candidates equal (e.g. all idle)
// gives every candidate 1.
type InFlight struct{}

// NewInFlight builds an inflight scorer named name.
func NewInFlight(name string, cfg InFlightConfig, _ Deps) (*InFlight, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scorer %q: %w", name, err)
	}
	return &InFlight{}, nil
}

// Category implements scheduler.Scorer: distribution.
func (*InFlight) Category() scheduler.Category { return scheduler.CategoryDistribution }

// Score implements scheduler.Scorer.
func (*InFlight) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i, e := range eps {
		// A negative count would be a bookkeeping bug elsewhere; treat it
		// as idle rather than as better than idle.
		out[i] = float64(max(e.InFlight(), 0)) / e.CapacityOrOne()
	}
	if !minMaxInPlace(out) {
		allOnes(out)
	}
}
