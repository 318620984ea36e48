package detector

import (
	"fmt"
	"math"
	"time"
)

// Signals: what Signal.Value measures.
const (
	// SignalHerd is the share of recent picks whose calm-weights choice
	// was over the load guard's bound, or over the crowd bound for a
	// prefix several endpoints hold (Endpoint.HerdPicks over Picks):
	// how much traffic affinity would pile onto endpoints already
	// carrying more than their share. It does not depend on the weights in
	// force, so spreading load does not talk it down (default).
	SignalHerd = "herd"
	// SignalCV is the normalised coefficient of variation of per-endpoint
	// load and KV utilisation, combined by Combine.
	SignalCV = "cv"
)

// Combine rules: how the request-load CV and the KV-utilisation CV become
// one raw signal.
const (
	// CombineMax takes the larger of the two: either kind of imbalance
	// counts (default).
	CombineMax = "max"
	// CombineMin takes the smaller: both must be imbalanced.
	CombineMin = "min"
	// CombineWeighted takes (1 − kv_weight)·request + kv_weight·kv.
	CombineWeighted = "weighted"
)

// Config is the detector's part of the profile's adaptive section
// (YAML: adaptive.detector.*). Every field has a default in DefaultConfig;
// docs/adaptive.md gives the reason for each.
type Config struct {
	// Signal is "herd" (default) or "cv": see SignalHerd and SignalCV.
	Signal string `mapstructure:"signal"`
	// HerdWindow is the time constant of the herd signal's averages: it
	// counts herd picks and picks with an exponential decay of this
	// time constant. Default 1s. Must be ≥ Interval.
	HerdWindow time.Duration `mapstructure:"herd_window"`
	// MinPicks gates the herd signal: with fewer picks than this in the
	// herd window the signal is held at 0 (gate "low_load"): a handful of
	// requests says nothing about herding. Default 20. Must be ≥ 1.
	MinPicks float64 `mapstructure:"min_picks"`
	// Interval is how often the control loop ticks (and steps the
	// detector). Default 50ms, the fleet's scrape interval: stepping
	// faster only re-reads the same metrics.
	Interval time.Duration `mapstructure:"interval"`
	// MinEndpoints is the fewest fresh endpoints that make a signal; with
	// fewer the signal is held at 0 (gate "too_few_endpoints"). Default 2,
	// the least for which imbalance means anything. Must be ≥ 2.
	MinEndpoints int `mapstructure:"min_endpoints"`
	// MinLoad is the least total load (Σ running + waiting [+ in-flight],
	// capacity-divided, over fresh endpoints) that makes a signal; below it
	// the signal is held at 0 (gate "low_load"): a nearly idle pool gains
	// nothing from spreading. Default 5. Must be ≥ 0.
	MinLoad float64 `mapstructure:"min_load"`
	// IncludeInFlight adds the router-local in-flight count
	// (Endpoint.InFlight) to each endpoint's load. It is fresher than the
	// scrape but counts requests the server also reports, and only this
	// replica's. Default false.
	IncludeInFlight bool `mapstructure:"include_inflight"`
	// Combine is "max" (default), "min" or "weighted".
	Combine string `mapstructure:"combine"`
	// KVWeight is the KV share of the weighted rule, in [0,1]. Default 0.5.
	// Ignored by min and max.
	KVWeight float64 `mapstructure:"kv_weight"`
	// SubtractNoise removes from the request-load signal the imbalance
	// that random placement of the same number of requests would show by
	// chance (see NoiseCorrected), so a small, calm pool reads calmer.
	// Default false; only the CV signal uses it. The corrected signal is
	// lower at every level, so it pairs with a lower configurator S0.
	SubtractNoise bool `mapstructure:"subtract_noise"`
	// Smoothing is the EWMA factor α per step, in (0,1]:
	// smoothed = α·raw + (1 − α)·smoothed (the CV signal; the herd signal
	// averages over HerdWindow instead). 1 disables smoothing. Default
	// 0.2: at 50 ms steps a half-life of ln 2 / −ln 0.8 ≈ 3.1 steps
	// (155 ms), 95 % of a step change after 14 steps (0.7 s).
	Smoothing float64 `mapstructure:"smoothing"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Signal:       SignalHerd,
		HerdWindow:   time.Second,
		MinPicks:     20,
		Interval:     50 * time.Millisecond,
		MinEndpoints: 2,
		MinLoad:      5,
		Combine:      CombineMax,
		KVWeight:     0.5,
		Smoothing:    0.2,
	}
}

// Validate checks the config. Errors name the field by its YAML path,
// e.g. "adaptive.detector.smoothing: must be in (0,1], got 0".
func (c Config) Validate() error {
	const p = "adaptive.detector."
	switch {
	case c.Signal != SignalHerd && c.Signal != SignalCV:
		return fmt.Errorf(p+"signal: must be %q or %q, got %q", SignalHerd, SignalCV, c.Signal)
	case !(c.MinPicks >= 1) || math.IsInf(c.MinPicks, 0):
		return fmt.Errorf(p+"min_picks: must be a finite number ≥ 1, got %v", c.MinPicks)
	case c.Interval <= 0:
		return fmt.Errorf(p+"interval: must be > 0, got %v", c.Interval)
	case c.HerdWindow < c.Interval:
		return fmt.Errorf(p+"herd_window: must be ≥ interval (%v), got %v", c.Interval, c.HerdWindow)
	case c.MinEndpoints < 2:
		return fmt.Errorf(p+"min_endpoints: must be ≥ 2, got %d", c.MinEndpoints)
	case !(c.MinLoad >= 0) || math.IsInf(c.MinLoad, 0):
		return fmt.Errorf(p+"min_load: must be a finite number ≥ 0, got %v", c.MinLoad)
	case c.Combine != CombineMax && c.Combine != CombineMin && c.Combine != CombineWeighted:
		return fmt.Errorf(p+"combine: must be %q, %q or %q, got %q", CombineMax, CombineMin, CombineWeighted, c.Combine)
	case !(c.KVWeight >= 0 && c.KVWeight <= 1):
		return fmt.Errorf(p+"kv_weight: must be in [0,1], got %v", c.KVWeight)
	case !(c.Smoothing > 0 && c.Smoothing <= 1):
		return fmt.Errorf(p+"smoothing: must be in (0,1], got %v", c.Smoothing)
	}
	return nil
}
