package configurator

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// Modes, as written to Weights.Mode and the mode metric.
const (
	// ModeStatic: adaptive mode is off; the profile weights are in force.
	ModeStatic = "static"
	// ModeCalm: D = DMin (by default the profile's own share).
	ModeCalm = "calm"
	// ModeRebalance: D follows the sigmoid of the signal.
	ModeRebalance = "rebalance"
	// ModeFrozen: the flap watchdog holds the profile's weights until the
	// cool-down ends.
	ModeFrozen = "frozen"
)

// Modes lists every mode, in the order metrics export them.
var Modes = [...]string{ModeStatic, ModeCalm, ModeRebalance, ModeFrozen}

// Input is what one step consumes: the imbalance signal and the pool's
// queueing pressure, both in [0,1] (out-of-range and NaN values are
// clamped, NaN to 0). The detector's Signal provides them as Value and
// Pressure; the configurator does not depend on where they come from.
type Input struct {
	Value, Pressure float64
}

// Configurator turns detector signals into weights. See the package
// documentation for the exact behaviour and the concurrency model.
type Configurator struct {
	cfg   Config
	names []string
	cats  []scheduler.Category
	base  []float64
	// sa, sd: Σ base weights of the affinity and distribution scorers;
	// total = sa + sd, kept constant by every published version.
	sa, sd, total float64
	dMin          float64 // calm budget: Config.DMin, or the profile's share
	calm          []float64
	guard, crowd  scheduler.Guard

	// Step state, owned by the goroutine calling Step.
	started     bool
	mode        string
	lastSwitch  time.Time   // last mode transition; zero: none yet
	above       time.Time   // calm: first step of the current run of r ≥ ThetaOn; zero: none
	last        time.Time   // latest now seen by Step
	d           float64     // distribution budget after the latest step
	dPub        float64     // distribution budget of cur
	frozenUntil time.Time   // end of the cool-down
	flips       []time.Time // calm↔rebalance transitions inside the flap window

	cur atomic.Pointer[scheduler.Weights]
}

// New builds a configurator for a profile's scorers (names, categories
// from Scorer.Category, base weights). start is the weights in force when
// it starts (the scheduler's): versions continue from it and D starts from
// its distribution budget; nil means the profile weights as version 1,
// which is what scheduler.New publishes. In adaptive mode the profile must
// have a scorer with weight > 0 in both the affinity and the distribution
// category. It fails if cfg is invalid.
func New(cfg Config, profile []scheduler.ScorerEntry, start *scheduler.Weights) (*Configurator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(profile) == 0 {
		return nil, errors.New("configurator: profile has no scorers")
	}
	c := &Configurator{
		cfg:   cfg,
		mode:  ModeStatic,
		flips: make([]time.Time, 0, cfg.FlapMaxTransitions),
	}
	for i, e := range profile {
		if e.Scorer == nil {
			return nil, fmt.Errorf("configurator: scorer %d (%q) has no implementation", i, e.Name)
		}
		if !(e.Weight >= 0) || math.IsInf(e.Weight, 0) {
			return nil, fmt.Errorf("configurator: scorer %q has weight %v, want a finite number ≥ 0", e.Name, e.Weight)
		}
		cat := e.Scorer.Category()
		c.names = append(c.names, e.Name)
		c.cats = append(c.cats, cat)
		c.base = append(c.base, e.Weight)
		switch cat {
		case scheduler.CategoryAffinity:
			c.sa += e.Weight
		case scheduler.CategoryDistribution:
			c.sd += e.Weight
		}
	}
	c.total = c.sa + c.sd
	if cfg.Enabled && (c.sa <= 0 || c.sd <= 0) {
		return nil, fmt.Errorf("adaptive.enabled: adaptive mode needs affinity and distribution scorers with weight > 0; the profile's sums are affinity %v, distribution %v", c.sa, c.sd)
	}
	c.dMin = c.budget(c.base)
	if cfg.DMin != nil {
		c.dMin = *cfg.DMin
	}
	if cfg.Enabled {
		if !(c.dMin < cfg.DMax) {
			return nil, fmt.Errorf("adaptive.d_max: must be above the calm budget d_min %.3f (the profile's distribution share unless d_min is set), got %v", c.dMin, cfg.DMax)
		}
		if c.dMin > 1-cfg.AffinityFloor {
			return nil, fmt.Errorf("adaptive.affinity_floor: the calm budget d_min %.3f leaves affinity %.3f, below the floor %v", c.dMin, 1-c.dMin, cfg.AffinityFloor)
		}
		c.calm = c.values(c.dMin)
		if cfg.GuardFactor > 0 {
			c.guard = scheduler.Guard{Factor: cfg.GuardFactor, Slack: cfg.GuardSlack}
			if cfg.CrowdFactor > 0 {
				c.crowd = scheduler.Guard{Factor: cfg.CrowdFactor, Slack: cfg.CrowdSlack}
			}
		}
	}
	if start == nil || len(start.Values) != len(c.base) {
		start = &scheduler.Weights{Version: 1, Values: append([]float64(nil), c.base...), Mode: ModeStatic, Reason: "profile weights"}
	}
	c.cur.Store(start)
	c.d = c.budget(start.Values)
	c.dPub = c.d
	return c, nil
}

// Config returns the configurator's configuration.
func (c *Configurator) Config() Config { return c.cfg }

// Names returns the profile's scorer names, in weight-index order.
func (c *Configurator) Names() []string { return c.names }

// Mode returns the mode after the latest Step (ModeStatic before the
// first). Not safe for concurrent use with Step.
func (c *Configurator) Mode() string { return c.mode }

// Weights returns the latest weights Step produced (New's start, or the
// profile weights, before the first Step). Safe for concurrent use.
func (c *Configurator) Weights() *scheduler.Weights { return c.cur.Load() }

// Budget returns the distribution budget D of w: the distribution
// scorers' share of the categorised weights, Σ_dist w / (Σ_aff w + Σ_dist w).
// It returns the profile's share when w has no categorised weight (or the
// wrong length). Safe for concurrent use.
func (c *Configurator) Budget(w *scheduler.Weights) float64 {
	if w == nil || len(w.Values) != len(c.base) {
		return c.budget(c.base)
	}
	return c.budget(w.Values)
}

func (c *Configurator) budget(v []float64) float64 {
	var a, d float64
	for i, x := range v {
		switch c.cats[i] {
		case scheduler.CategoryAffinity:
			a += x
		case scheduler.CategoryDistribution:
			d += x
		}
	}
	if a+d > 0 {
		return d / (a + d)
	}
	if c.total > 0 {
		return c.sd / c.total
	}
	return 0
}

// Sigmoid is the generalised logistic σ(r) = (1 + e^(−k(r − s0)))^(−1/ν),
// increasing from σ(−∞) = 0 to σ(∞) = 1; σ(s0) = 2^(−1/ν).
func Sigmoid(r, k, s0, nu float64) float64 {
	return math.Pow(1+math.Exp(-k*(r-s0)), -1/nu)
}

// CalmBudget returns the distribution budget of calm mode: Config.DMin,
// or the profile's own share when it is unset.
func (c *Configurator) CalmBudget() float64 { return c.dMin }

// Target returns the distribution budget mode aims at for signal r and
// pressure p, before the slew limit:
//
//	calm:      DMin (the profile's share unless set)
//	rebalance: DMin + σ(r)·(DMax − DMin)·(1 − PressureCut·p)
//	frozen:    the profile's share (the watchdog's safe state)
//	static:    the profile's share
//
// capped at 1 − AffinityFloor. r and p are clamped to [0,1] (NaN → 0).
func (c *Configurator) Target(mode string, r, p float64) float64 {
	r, p = scheduler.Clamp01(r), scheduler.Clamp01(p)
	var d float64
	switch mode {
	case ModeCalm:
		d = c.dMin
	case ModeRebalance:
		d = c.rebalance(r, p)
	default:
		d = c.budget(c.base)
	}
	return min(d, 1-c.cfg.AffinityFloor)
}

func (c *Configurator) rebalance(r, p float64) float64 {
	cfg := &c.cfg
	return c.dMin + Sigmoid(r, cfg.K, cfg.S0, cfg.Nu)*(cfg.DMax-c.dMin)*(1-cfg.PressureCut*p)
}

// values maps a distribution budget to weights: scorers without a
// category keep their base weight; affinity scorer j gets T·(1−D)·a_j/Σa
// and distribution scorer j gets T·D·d_j/Σd, so ratios inside a category
// are the profile's and the categorised weights always sum to T, the
// profile's categorised sum (a profile run in static mode and in adaptive
// mode has the same scale).
func (c *Configurator) values(d float64) []float64 {
	v := make([]float64, len(c.base))
	for i, b := range c.base {
		switch c.cats[i] {
		case scheduler.CategoryAffinity:
			v[i] = c.total * (1 - d) * b / c.sa
		case scheduler.CategoryDistribution:
			v[i] = c.total * d * b / c.sd
		default:
			v[i] = b
		}
	}
	return v
}

// Step advances the configurator to now with input in (the signal r and
// the pressure) and returns the weights in force afterwards: a new
// *Weights (Version+1) when anything changed, otherwise the same pointer
// as before — publish when the pointer differs. Weights.Reason says why
// the version was made.
//
// Static mode (Enabled false): the first Step returns the profile weights,
// as a new version if New's start differed from them; later steps change
// nothing.
//
// Adaptive mode, in this order on each step:
//
//  1. The first Step enters calm (a new version with mode "calm") and
//     keeps D where New's start put it (capped at 1 − AffinityFloor);
//     later steps move D from there.
//  2. Mode machine. calm → rebalance when r ≥ ThetaOn at every step for
//     OnHold (from the first step of the run at or above it); rebalance →
//     calm when r ≤ ThetaOff; both only once MinDwell has passed since the
//     last transition (the first transition needs no dwell). Such a transition
//     that would be the (FlapMaxTransitions+1)-th within FlapWindow
//     (counting itself) goes to frozen instead: D's target is then the
//     profile's share (the operator's weights, the safe state) for
//     FlapCooldown; when it ends the mode becomes rebalance if r >
//     ThetaOff, else calm, and the watchdog's count starts afresh.
//  3. Slew: D moves toward Target(mode, r, pressure) by at most
//     SlewRate × (now − previous step) and is capped at 1 − AffinityFloor
//     (the floor is hard; a start above it is cut at once).
//  4. A new version is made when the mode changed, when D moved by ≥
//     MinChange since the last version, or when D reached its target
//     exactly. Its values are values(D); Signal is r; At is now; Guard is
//     the load guard (GuardFactor, GuardSlack) and Calm the calm weights
//     values(DMin) it measures herd pressure against.
//
// If now is before the previous step's time the step counts as taking no
// time. Step is deterministic: two configurators with the same config,
// profile and start fed the same sequence of (now, in) return equal
// weights (Values, Mode, Reason, Version, At) and modes. It is not safe
// for concurrent use.
func (c *Configurator) Step(now time.Time, in Input) *scheduler.Weights {
	cur := c.cur.Load()
	if !c.cfg.Enabled {
		if !c.started {
			c.started = true
			if cur.Mode != ModeStatic || !slices.Equal(cur.Values, c.base) {
				c.publish(now, in, c.budget(c.base), "adaptive mode off: profile weights")
			}
		}
		return c.cur.Load()
	}
	r := scheduler.Clamp01(in.Value)
	from := c.mode
	var reason string
	if !c.started {
		c.started = true
		c.last = now
		c.mode = ModeCalm
		reason = "adaptive mode on"
	}
	dt := now.Sub(c.last)
	if dt < 0 {
		dt = 0
	} else {
		c.last = now
	}

	switch c.mode {
	case ModeCalm:
		if r < c.cfg.ThetaOn {
			c.above = time.Time{}
			break
		}
		if c.above.IsZero() {
			c.above = now
		}
		if held := now.Sub(c.above); held >= c.cfg.OnHold && c.dwelled(now) {
			why := fmt.Sprintf("signal %.3f ≥ theta_on %.3f", r, c.cfg.ThetaOn)
			if c.cfg.OnHold > 0 {
				why += fmt.Sprintf(" for %v", held)
			}
			reason = c.transition(now, ModeRebalance, why)
		}
	case ModeRebalance:
		if r <= c.cfg.ThetaOff && c.dwelled(now) {
			reason = c.transition(now, ModeCalm, fmt.Sprintf("signal %.3f ≤ theta_off %.3f", r, c.cfg.ThetaOff))
		}
	case ModeFrozen:
		if !now.Before(c.frozenUntil) {
			to := ModeCalm
			if r > c.cfg.ThetaOff {
				to = ModeRebalance
			}
			c.setMode(now, to)
			reason = fmt.Sprintf("cool-down over, signal %.3f: %s", r, to)
		}
	}

	target := c.Target(c.mode, r, in.Pressure)
	step := c.cfg.SlewRate * dt.Seconds()
	d := c.d
	switch {
	case math.Abs(target-d) <= step*(1+1e-9)+1e-12: // within reach: land exactly
		d = target
	case target > d:
		d += step
	default:
		d -= step
	}
	d = min(d, 1-c.cfg.AffinityFloor)
	c.d = d

	moved := math.Abs(d-c.dPub) >= c.cfg.MinChange && d != c.dPub
	landed := d == target && d != c.dPub
	if c.mode == from && !moved && !landed && reason == "" {
		return cur
	}
	if reason == "" {
		reason = fmt.Sprintf("%s: signal %.3f, D %.3f → %.3f (target %.3f)", c.mode, r, c.dPub, d, target)
	}
	c.publish(now, in, d, reason)
	return c.cur.Load()
}

// dwelled reports whether MinDwell has passed since the last transition.
func (c *Configurator) dwelled(now time.Time) bool {
	return c.lastSwitch.IsZero() || now.Sub(c.lastSwitch) >= c.cfg.MinDwell
}

// transition switches between calm and rebalance, or to frozen when the
// flap watchdog trips, and returns the reason.
func (c *Configurator) transition(now time.Time, to, why string) string {
	if k := c.cfg.FlapMaxTransitions; k > 0 {
		kept := c.flips[:0]
		for _, t := range c.flips {
			if now.Sub(t) < c.cfg.FlapWindow {
				kept = append(kept, t)
			}
		}
		c.flips = kept
		if len(c.flips)+1 > k {
			c.flips = c.flips[:0]
			c.frozenUntil = now.Add(c.cfg.FlapCooldown)
			c.setMode(now, ModeFrozen)
			return fmt.Sprintf("%s, but %d transitions within %v > flap_max_transitions %d: frozen on the profile's weights until %s",
				why, k+1, c.cfg.FlapWindow, k, c.frozenUntil.UTC().Format(time.RFC3339Nano))
		}
		c.flips = append(c.flips, now)
	}
	c.setMode(now, to)
	return why + ": " + to
}

func (c *Configurator) setMode(now time.Time, to string) {
	c.mode = to
	c.lastSwitch = now
	c.above = time.Time{}
}

// publish makes a new version with budget d.
func (c *Configurator) publish(now time.Time, in Input, d float64, reason string) {
	old := c.cur.Load()
	mode := c.mode
	if !c.cfg.Enabled {
		mode = ModeStatic
	}
	w := &scheduler.Weights{Version: old.Version + 1, Mode: mode, Reason: reason, Signal: scheduler.Clamp01(in.Value), At: now}
	if mode == ModeStatic {
		w.Values = append([]float64(nil), c.base...)
	} else {
		w.Values, w.Guard, w.Crowd, w.Calm = c.values(d), c.guard, c.crowd, c.calm
		w.HerdOnly = c.cfg.RebalanceScope == ScopeHerd && c.calm != nil
	}
	c.cur.Store(w)
	c.dPub = d
}
