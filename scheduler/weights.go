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
	// Guard, when its Factor is set, bounds the router-local load of the
	// endpoint a request may be sent to (see Guard). The zero Guard is off.
	Guard Guard
	// Calm, when set (index-aligned with Values), is the weight vector the
	// guard measures herd pressure against: for every guarded pick, the
	// endpoint that Calm would choose is charged a herd pick
	// (Endpoint.HerdPicks) when it is over the bound. Nil: no herd
	// accounting.
	Calm []float64
	// Crowd, when its Factor is set, also charges a herd pick when the
	// request's best prefix is crowded: two or more candidates share the
	// top calm-weights affinity score (the prefix has been copied to
	// several endpoints), the calm weights' choice is one of them, and it
	// is over Crowd's bound (a Guard's formula, usually tighter than
	// Guard's). Then the prefix's demand is more than its holders carry at
	// their share, and another copy is cheap against what it relieves; a
	// prefix held by one endpoint alone is judged by Guard's bound only,
	// because keeping a group of requests on one endpoint is what
	// affinity is for. The zero Crowd is off.
	Crowd Guard
	// HerdOnly, with Calm set, ranks only herd picks with Values: a
	// request whose calm weights' choice is within the guard's bound (and
	// the crowd bound, where it counts) is ranked with Calm, so weights
	// moved to relieve a herd move only the requests that herd, not those
	// whose prefix sits on an endpoint with room. False: every request
	// ranks with Values.
	HerdOnly bool
}

// Guard is the request path's bound on concentrated load, in the spirit of
// consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam
// 2018): a candidate is over the bound when, counting the request being
// placed,
//
//	(in-flight_e + 1) / capacity_e  >  max(Factor·μ, μ + Slack),
//	μ = (Σ in-flight + 1) / Σ capacity   over the candidates,
//
// with in-flight the router-local count (Endpoint.InFlight). Over-bound
// candidates rank after every candidate within it, whatever their scores,
// so affinity cannot pile more than Factor times the mean load (plus Slack
// requests per unit of capacity, which keeps a lightly loaded pool free to
// follow affinity) on one endpoint. If every candidate is over the bound,
// the scores decide as if there were no guard.
type Guard struct {
	// Factor is c ≥ 1; 0 turns the guard off.
	Factor float64
	// Slack is s ≥ 0, in requests per unit of capacity (in seconds under
	// the seconds unit, OverSeconds).
	Slack float64
}

// OverSeconds is the bound in the seconds unit (GuardConfig.Unit): a
// candidate whose expected wait is w seconds is over it when
//
//	w  >  max(Factor·μ, μ + Slack),   μ = the candidates' mean wait,
//
// each candidate's wait counting the request being placed (its queued
// uncached prompt tokens and the request's own, over its prefill rate),
// with Slack in seconds. A pod twice as fast carries twice the queue at
// the same wait, so its share follows its measured speed rather than a
// per-capacity request count.
func (g Guard) OverSeconds(w, mu float64) bool {
	return w > max(g.Factor*mu, mu+g.Slack)
}

// Over reports whether a candidate with inflight requests and capacity
// c is over the bound, given the candidates' Σ in-flight sum and Σ
// capacity capSum.
func (g Guard) Over(inflight, c, sum, capSum float64) bool {
	mu := (sum + 1) / capSum
	return (inflight+1)/c > max(g.Factor*mu, mu+g.Slack)
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
	if g := w.Guard; !(g.Factor == 0 || (g.Factor >= 1 && !math.IsInf(g.Factor, 0))) || !(g.Slack >= 0 && !math.IsInf(g.Slack, 0)) {
		return fmt.Errorf("weights: guard factor %v and slack %v, want factor 0 or ≥ 1 and slack ≥ 0, both finite", g.Factor, g.Slack)
	}
	if c := w.Crowd; !(c.Factor == 0 || (c.Factor >= 1 && !math.IsInf(c.Factor, 0))) || !(c.Slack >= 0 && !math.IsInf(c.Slack, 0)) {
		return fmt.Errorf("weights: crowd factor %v and slack %v, want factor 0 or ≥ 1 and slack ≥ 0, both finite", c.Factor, c.Slack)
	}
	if w.Calm != nil {
		if len(w.Calm) != n {
			return fmt.Errorf("weights: %d calm values for %d scorers", len(w.Calm), n)
		}
		for i, v := range w.Calm {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return fmt.Errorf("weights: calm value %d is %v, want a finite number ≥ 0", i, v)
			}
		}
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
