package configurator

import (
	"fmt"
	"math"
	"time"
)

// Config is the configurator's part of the profile's adaptive section
// (YAML: adaptive.*; the detector's settings sit under adaptive.detector).
// Every field has a default in DefaultConfig (listed in
// docs/configuration.md); docs/adaptive.md gives the reason for each value.
// Budgets and thresholds are fractions in [0,1]; the signal they are
// compared with is Input.Value, the detector's signal.
type Config struct {
	// Enabled turns adaptive mode on. Off (static mode), the configurator
	// publishes the profile weights unchanged. Default false: adaptive
	// mode is opted into per profile.
	Enabled bool `mapstructure:"enabled"`

	// DMin is the distribution budget in calm mode and the bottom of the
	// sigmoid, in [0, DMax). Unset (the default), it is the profile's own
	// distribution share, so calm mode runs the weights the operator wrote.
	DMin *float64 `mapstructure:"d_min"`
	// DMax is the top of the sigmoid, in (DMin, 1]. Default 0.9.
	DMax float64 `mapstructure:"d_max"`
	// AffinityFloor is the least affinity budget A = 1 − D ever published,
	// in (0, 1 − DMin]; D is capped at 1 − AffinityFloor. Default 0.1, so
	// a warm cache always counts for something.
	AffinityFloor float64 `mapstructure:"affinity_floor"`

	// K is the sigmoid's steepness, > 0. Default 30.
	K float64 `mapstructure:"k"`
	// S0 is the sigmoid's midpoint, in [0,1]. Default 0.1.
	S0 float64 `mapstructure:"s0"`
	// Nu is the generalised-logistic shape ν, > 0: σ(r) =
	// (1 + e^(−K(r − S0)))^(−1/ν). 1 is the plain logistic; ν < 1 delays
	// the rise, ν > 1 brings it forward. Default 1.
	Nu float64 `mapstructure:"nu"`

	// ThetaOn is the signal at or above which calm mode switches to
	// rebalance, in (ThetaOff, 1]. Default 0.2.
	ThetaOn float64 `mapstructure:"theta_on"`
	// ThetaOff is the signal at or below which rebalance returns to calm,
	// in [0, ThetaOn). Default 0.05.
	ThetaOff float64 `mapstructure:"theta_off"`
	// MinDwell is the least time spent in calm or rebalance before a
	// switch to the other, ≥ 0. Default 15s: long enough for a rebalance to
	// copy a hot prefix to the pods that relieve its holders, so the calm
	// weights that follow find it spread.
	MinDwell time.Duration `mapstructure:"min_dwell"`
	// OnHold is how long the signal must stay at or above ThetaOn, step
	// after step, before calm switches to rebalance, ≥ 0 (0: at the first
	// such step). Default 1s: a herd lasts while its cause does, while
	// chance — a cluster of random arrivals that opens the detector's
	// min_picks gate for a step or two — reads above ThetaOn only for an
	// instant.
	OnHold time.Duration `mapstructure:"on_hold"`

	// SlewRate caps how fast the distribution budget D moves, in budget
	// units per second, > 0. Default 2.0: a full swing of 0.6 in 0.3 s.
	SlewRate float64 `mapstructure:"slew_rate"`
	// MinChange is the least change of D (budget units) worth a new weights
	// version within a mode, in [0, DMax − DMin). Mode changes, and the
	// step that lands exactly on the target, are published regardless.
	// Default 0.01.
	MinChange float64 `mapstructure:"min_change"`

	// GuardFactor is the load guard's factor c ≥ 1 in adaptive mode
	// (scheduler.Guard): no endpoint is sent a request while it carries
	// more than max(c × the mean, the mean + GuardSlack) router-local
	// in-flight requests per unit of capacity, unless every candidate
	// does. 0 turns the guard, and with it the herd signal, off. Default 2.5.
	GuardFactor float64 `mapstructure:"guard_factor"`
	// GuardSlack is the guard's slack s ≥ 0, in requests per unit of
	// capacity (in seconds when scheduler.guard.unit is seconds). Default 6: a small pool's chance imbalance (a few requests) never trips it.
	GuardSlack float64 `mapstructure:"guard_slack"`
	// CrowdFactor and CrowdSlack bound a crowded prefix (scheduler.Weights.Crowd):
	// when a prefix is already held by two or more endpoints and the calm
	// weights' choice among them carries more than max(CrowdFactor × the
	// mean, the mean + CrowdSlack) in-flight requests per unit of capacity,
	// the pick counts towards the herd signal. It measures only; it diverts
	// nothing. CrowdFactor 0 turns it off. Defaults 1.5 and 3.
	CrowdFactor float64 `mapstructure:"crowd_factor"`
	CrowdSlack  float64 `mapstructure:"crowd_slack"`

	// FlapMaxTransitions is K of the flap watchdog: more than this many
	// calm↔rebalance transitions within FlapWindow freezes the
	// configurator on the profile's weights. 0 disables the watchdog.
	// Default 4 (two full cycles).
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

	// RebalanceScope says which requests the rebalanced weights rank:
	// "pool" (every request) or "herd" (only the requests whose calm
	// weights' choice is over the guard's bound, or over the crowd bound
	// while sharing its prefix — the picks the herd signal counts; the
	// rest keep the calm weights, so requests whose prefix sits on an
	// endpoint with room are not sent to recompute it elsewhere).
	// Default "herd" (docs/adaptive.md, "Rebalance scope").
	RebalanceScope string `mapstructure:"rebalance_scope"`
}

// Rebalance scopes (Config.RebalanceScope).
const (
	ScopePool = "pool"
	ScopeHerd = "herd"
)

// DefaultConfig returns the documented defaults (adaptive mode off).
func DefaultConfig() Config {
	return Config{
		DMax:               0.9,
		AffinityFloor:      0.1,
		K:                  30,
		S0:                 0.1,
		Nu:                 1,
		ThetaOn:            0.2,
		ThetaOff:           0.05,
		MinDwell:           15 * time.Second,
		OnHold:             time.Second,
		SlewRate:           2,
		MinChange:          0.01,
		GuardFactor:        2.5,
		GuardSlack:         6,
		CrowdFactor:        1.5,
		CrowdSlack:         3,
		FlapMaxTransitions: 4,
		FlapWindow:         time.Minute,
		FlapCooldown:       time.Minute,
		RebalanceScope:     ScopeHerd,
	}
}

// Validate checks the config. Errors name the field by its YAML path,
// e.g. "adaptive.theta_off: must be < theta_on (0.2), got 0.4".
func (c Config) Validate() error {
	const p = "adaptive."
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	dmin := 0.0
	if c.DMin != nil {
		dmin = *c.DMin
	}
	switch {
	case c.DMin != nil && !(dmin >= 0 && dmin < 1):
		return fmt.Errorf(p+"d_min: must be in [0,1), got %v", dmin)
	case !(c.DMax > dmin && c.DMax <= 1):
		return fmt.Errorf(p+"d_max: must be > d_min (%v) and ≤ 1, got %v", dmin, c.DMax)
	case !(c.AffinityFloor > 0 && c.AffinityFloor <= 1-dmin):
		return fmt.Errorf(p+"affinity_floor: must be > 0 and ≤ 1 − d_min (%v), got %v", 1-dmin, c.AffinityFloor)
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
	case c.OnHold < 0:
		return fmt.Errorf(p+"on_hold: must be ≥ 0, got %v", c.OnHold)
	case !(c.SlewRate > 0) || !finite(c.SlewRate):
		return fmt.Errorf(p+"slew_rate: must be a finite number > 0, got %v", c.SlewRate)
	case !(c.MinChange >= 0 && c.MinChange < c.DMax-dmin):
		return fmt.Errorf(p+"min_change: must be ≥ 0 and < d_max − d_min (%v), got %v", c.DMax-dmin, c.MinChange)
	case !(c.GuardFactor == 0 || c.GuardFactor >= 1) || !finite(c.GuardFactor):
		return fmt.Errorf(p+"guard_factor: must be 0 (off) or a finite number ≥ 1, got %v", c.GuardFactor)
	case !(c.GuardSlack >= 0) || !finite(c.GuardSlack):
		return fmt.Errorf(p+"guard_slack: must be a finite number ≥ 0, got %v", c.GuardSlack)
	case !(c.CrowdFactor == 0 || c.CrowdFactor >= 1) || !finite(c.CrowdFactor):
		return fmt.Errorf(p+"crowd_factor: must be 0 (off) or a finite number ≥ 1, got %v", c.CrowdFactor)
	case !(c.CrowdSlack >= 0) || !finite(c.CrowdSlack):
		return fmt.Errorf(p+"crowd_slack: must be a finite number ≥ 0, got %v", c.CrowdSlack)
	case c.FlapMaxTransitions < 0:
		return fmt.Errorf(p+"flap_max_transitions: must be ≥ 0 (0 disables the watchdog), got %d", c.FlapMaxTransitions)
	case c.FlapMaxTransitions > 0 && c.FlapWindow <= 0:
		return fmt.Errorf(p+"flap_window: must be > 0, got %v", c.FlapWindow)
	case c.FlapMaxTransitions > 0 && (c.FlapCooldown <= 0 || c.FlapCooldown < c.MinDwell):
		return fmt.Errorf(p+"flap_cooldown: must be > 0 and ≥ min_dwell (%v), got %v", c.MinDwell, c.FlapCooldown)
	case !(c.PressureCut >= 0 && c.PressureCut <= 1):
		return fmt.Errorf(p+"pressure_cut: must be in [0,1], got %v", c.PressureCut)
	case c.RebalanceScope != ScopePool && c.RebalanceScope != ScopeHerd:
		return fmt.Errorf(p+"rebalance_scope: must be %q or %q, got %q", ScopePool, ScopeHerd, c.RebalanceScope)
	}
	return nil
}
