package configurator

import (
	"fmt"
	"math"
	"time"
)

// Config is the configurator's part of the profile's adaptive section
// (YAML: adaptive.*; the detector's settings sit under adaptive.detector).
// Every field has a default in DefaultConfig; docs/adaptive.md tabulates
// them with their reasons. Budgets and thresholds are fractions in [0,1];
// the signal they are compared with is detector.Signal.Value.
type Config struct {
	// Enabled turns adaptive mode on. Off (static mode), the configurator
	// publishes the profile weights unchanged. Default false: adaptive
	// mode is opted into per profile.
	Enabled bool `mapstructure:"enabled"`

	// DMin is the distribution budget in calm mode and the bottom of the
	// sigmoid, in [0, DMax). Default 0.3: affinity 0.7 while calm.
	DMin float64 `mapstructure:"d_min"`
	// DMax is the top of the sigmoid, in (DMin, 1]. Default 0.9.
	DMax float64 `mapstructure:"d_max"`
	// AffinityFloor is the least affinity budget A = 1 − D ever published,
	// in (0, 1 − DMin]; D is capped at 1 − AffinityFloor. Default 0.1, so
	// a warm cache always counts for something.
	AffinityFloor float64 `mapstructure:"affinity_floor"`

	// K is the sigmoid's steepness, > 0. Default 25: σ goes from 0.1 to
	// 0.9 over a signal range of ln(81)/25 ≈ 0.18 (ν = 1), so a partial
	// herd already gets nearly the full budget. With the shipped
	// prefix 3 : queue 2 : kvcache 2 : inflight 1 profile a cold pod wins
	// a request for a prefix cached on a hot pod only when D > 0.83
	// (docs/benchmarks.md, finding 2); a half-herd on 16 pods (8 busy)
	// reads only r ≈ 0.26, where σ(0.258) = 1/(1+e^(−25·0.108)) = 0.937
	// gives D = 0.86, and a quarter-herd (r 0.447) gets σ 0.9994, D 0.8996.
	K float64 `mapstructure:"k"`
	// S0 is the sigmoid's midpoint, in [0,1]. Default 0.15 (σ(S0) = 0.5
	// for ν = 1), below ThetaOn: entering rebalance at r = 0.2 already
	// gives σ = 1/(1+e^(−25·0.05)) = 0.777, D = 0.766, and D passes 0.83
	// (the level at which a cold pod takes hot-prefix requests,
	// docs/benchmarks.md finding 2) at r ≈ 0.231, load concentrated on
	// about 9 of 16 pods. With the detector's SubtractNoise the signal
	// reads lower, and docs/benchmarks.md finding 6 pairs it with 0.06,
	// which gives D = 0.739 at ThetaOff (0.1), 0.882 at ThetaOn and passes
	// 0.83 at r ≈ 0.141.
	S0 float64 `mapstructure:"s0"`
	// Nu is the generalised-logistic shape ν, > 0: σ(r) =
	// (1 + e^(−K(r − S0)))^(−1/ν). 1 is the plain logistic; ν < 1 delays
	// the rise, ν > 1 brings it forward. Default 1.
	Nu float64 `mapstructure:"nu"`

	// ThetaOn is the signal at or above which calm mode switches to
	// rebalance, in (ThetaOff, 1]. Default 0.2: a herd on 9 of 16 pods
	// reads √((16/9 − 1)/15) ≈ 0.23 and must enter rebalance, a half-herd
	// 0.26 (docs/benchmarks.md, finding 2). It cannot go much lower:
	// random placement of μ requests per pod on N pods alone reads
	// ≈ 1/√(μ(N−1)), ≈ 0.18 at two requests per pod on sixteen pods
	// (finding 3), and a lower threshold would flap into rebalance on
	// that noise at low concurrency.
	ThetaOn float64 `mapstructure:"theta_on"`
	// ThetaOff is the signal at or below which rebalance returns to calm,
	// in [0, ThetaOn). Default 0.1: it keeps a gap of 0.1 below ThetaOn
	// for hysteresis and sits above the random-placement noise
	// 1/√(μ(N−1)) at eight or more requests per pod on sixteen pods
	// (1/√(8·15) ≈ 0.091; docs/benchmarks.md, findings 2 and 3).
	ThetaOff float64 `mapstructure:"theta_off"`
	// MinDwell is the least time spent in calm or rebalance before a
	// switch to the other, ≥ 0. Default 2s: 40 steps at 50 ms, longer than
	// the time a new weight needs to show in the scraped queues.
	MinDwell time.Duration `mapstructure:"min_dwell"`

	// SlewRate caps how fast the distribution budget D moves, in budget
	// units per second, > 0. Every categorised weight then moves at most
	// SlewRate × T × its in-category share per second (T the sum of the
	// categorised profile weights). Default 1.0: the full default swing
	// 0.3 → 0.9 takes 0.6 s, 12 steps of 0.05.
	SlewRate float64 `mapstructure:"slew_rate"`
	// MinChange is the least change of D (budget units) worth a new weights
	// version within a mode, in [0, DMax − DMin). Mode changes, and the
	// step that lands exactly on the target, are published regardless.
	// Default 0.01.
	MinChange float64 `mapstructure:"min_change"`

	// FlapMaxTransitions is K of the flap watchdog: more than this many
	// calm↔rebalance transitions within FlapWindow freezes the
	// configurator. 0 disables the watchdog. Default 4 (two full cycles).
	FlapMaxTransitions int `mapstructure:"flap_max_transitions"`
	// FlapWindow is the watchdog's window, > 0. Default 1m.
	FlapWindow time.Duration `mapstructure:"flap_window"`
	// FlapCooldown is how long a freeze lasts, ≥ MinDwell and > 0.
	// Default 1m.
	FlapCooldown time.Duration `mapstructure:"flap_cooldown"`

	// PressureCut lowers the sigmoid's ceiling with the detector's
	// pressure P: D = DMin + σ(r)·(DMax − DMin)·(1 − PressureCut·P), in
	// [0,1]. Default 0 (off): pressure is high both when one pod is
	// swamped, where spreading helps, and when all pods are, where cache
	// hits save more; the signal alone cannot tell them apart.
	PressureCut float64 `mapstructure:"pressure_cut"`
}

// DefaultConfig returns the documented defaults (adaptive mode off).
func DefaultConfig() Config {
	return Config{
		DMin:               0.3,
		DMax:               0.9,
		AffinityFloor:      0.1,
		K:                  25,
		S0:                 0.15,
		Nu:                 1,
		ThetaOn:            0.2,
		ThetaOff:           0.1,
		MinDwell:           2 * time.Second,
		SlewRate:           1,
		MinChange:          0.01,
		FlapMaxTransitions: 4,
		FlapWindow:         time.Minute,
		FlapCooldown:       time.Minute,
	}
}

// Validate checks the config. Errors name the field by its YAML path,
// e.g. "adaptive.theta_off: must be < theta_on (0.2), got 0.4".
func (c Config) Validate() error {
	const p = "adaptive."
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !(c.DMin >= 0 && c.DMin < 1):
		return fmt.Errorf(p+"d_min: must be in [0,1), got %v", c.DMin)
	case !(c.DMax > c.DMin && c.DMax <= 1):
		return fmt.Errorf(p+"d_max: must be > d_min (%v) and ≤ 1, got %v", c.DMin, c.DMax)
	case !(c.AffinityFloor > 0 && c.AffinityFloor <= 1-c.DMin):
		return fmt.Errorf(p+"affinity_floor: must be > 0 and ≤ 1 − d_min (%v), got %v", 1-c.DMin, c.AffinityFloor)
	case !(c.K > 0) || !finite(c.K):
		return fmt.Errorf(p+"k: must be a finite number > 0, got %v", c.K)
	case !(c.S0 >= 0 && c.S0 <= 1):
		return fmt.Errorf(p+"s0: must be in [0,1], got %v", c.S0)
	case !(c.Nu > 0) || !finite(c.Nu):
		return fmt.Errorf(p+"nu: must be a finite number > 0, got %v", c.Nu)
	case !(c.ThetaOn > 0 && c.ThetaOn <= 1):
		return fmt.Errorf(p+"theta_on: must be in (0,1], got %v", c.ThetaOn)
	case !(c.ThetaOff >= 0):
		return fmt.Errorf(p+"theta_off: must be ≥ 0, got %v", c.ThetaOff)
	case !(c.ThetaOff < c.ThetaOn):
		return fmt.Errorf(p+"theta_off: must be < theta_on (%v), got %v", c.ThetaOn, c.ThetaOff)
	case c.MinDwell < 0:
		return fmt.Errorf(p+"min_dwell: must be ≥ 0, got %v", c.MinDwell)
	case !(c.SlewRate > 0) || !finite(c.SlewRate):
		return fmt.Errorf(p+"slew_rate: must be a finite number > 0, got %v", c.SlewRate)
	case !(c.MinChange >= 0 && c.MinChange < c.DMax-c.DMin):
		return fmt.Errorf(p+"min_change: must be ≥ 0 and < d_max − d_min (%v), got %v", c.DMax-c.DMin, c.MinChange)
	case c.FlapMaxTransitions < 0:
		return fmt.Errorf(p+"flap_max_transitions: must be ≥ 0 (0 disables the watchdog), got %d", c.FlapMaxTransitions)
	case c.FlapMaxTransitions > 0 && c.FlapWindow <= 0:
		return fmt.Errorf(p+"flap_window: must be > 0, got %v", c.FlapWindow)
	case c.FlapMaxTransitions > 0 && (c.FlapCooldown <= 0 || c.FlapCooldown < c.MinDwell):
		return fmt.Errorf(p+"flap_cooldown: must be > 0 and ≥ min_dwell (%v), got %v", c.MinDwell, c.FlapCooldown)
	case !(c.PressureCut >= 0 && c.PressureCut <= 1):
		return fmt.Errorf(p+"pressure_cut: must be in [0,1], got %v", c.PressureCut)
	}
	return nil
}
