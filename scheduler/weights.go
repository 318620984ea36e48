package scheduler

import (
	"fmt"
	"math"
	"time"
)

// Weights is one immutable version of the scoring weights, index-aligned
// with the profile's scorers. It is published whole (atomic pointer) and
// never modified afterwards; readers may keep it as long as they like.
type Weights struct {
	// Version increases by one with every publication.
	Version uint64
	// Values holds one weight ≥ 0 per scorer, in profile order.
	Values []float64
	// Mode is the configurator mode that produced them ("static", "calm",
	// "rebalance", "frozen").
	Mode string
	// Reason is a short human explanation of the last change.
	Reason string
	// Signal is the imbalance signal the weights were computed from.
	Signal float64
	// At is when they were computed (configurator time).
	At time.Time
}

// Validate checks that the weights fit a profile of n scorers: finite,
// non-negative and not all zero.
func (w *Weights) Validate(n int) error {
	if w == nil {
		return fmt.Errorf("weights: nil")
	}
	if len(w.Values) != n {
		return fmt.Errorf("weights: %d values for %d scorers", len(w.Values), n)
	}
	var sum float64
	for i, v := range w.Values {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("weights: value %d is %v, want a finite number ≥ 0", i, v)
		}
		sum += v
	}
	if sum <= 0 {
		return fmt.Errorf("weights: all %d values are zero", n)
	}
	return nil
}

// Sum returns the sum of the values.
func (w *Weights) Sum() float64 {
	var s float64
	for _, v := range w.Values {
		s += v
	}
	return s
}
