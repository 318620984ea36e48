package control

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/trimtab/trimtab/configurator"
)

// Retune modes (retune.mode).
const (
	// RetuneOff runs nothing.
	RetuneOff = "off"
	// RetuneAdvisory replays, scores and reports; it never changes weights.
	RetuneAdvisory = "advisory"
	// RetuneApply also moves the calm weights toward a proposal that clears
	// min_improvement, by at most max_step per run.
	RetuneApply = "apply"
)

// Actions of a Decision.
const (
	// ActionSkip: nothing was replayed (no window, too few requests, a
	// failed or overlong replay).
	ActionSkip = "skip"
	// ActionKeep: the replay found nothing better by more than
	// min_improvement.
	ActionKeep = "keep"
	// ActionPropose: a better vector was found; advisory mode reports it.
	ActionPropose = "propose"
	// ActionHold: apply mode found a better vector but does not apply it
	// now (the loop is out of calm, or the engine is still the prior).
	ActionHold = "hold"
	// ActionApply: apply mode queued a bounded step toward the proposal.
	ActionApply = "apply"
	// ActionRefused: the step was refused (the profile was reloaded
	// during the run, or the weights do not validate).
	ActionRefused = "refused"
)

// RetuneActions lists every Action, in the order above.
var RetuneActions = []string{ActionSkip, ActionKeep, ActionPropose, ActionHold, ActionApply, ActionRefused}

// RetuneConfig is a profile's retune: section, the slow loop that re-tunes
// the calm weights on the router's own recent traffic replayed through the
// calibrated engine (docs/retune.md). Its CPU is bounded by Budget × Seeds
// replays of at most MaxRequests requests each, one at a time, and by
// Timeout.
type RetuneConfig struct {
	// Mode is "off", "advisory" (default: propose, never change weights)
	// or "apply".
	Mode string `mapstructure:"mode" json:"mode"`
	// Interval is the time between runs, 1m…24h. Default 10m, the traffic
	// recorder's default window.
	Interval time.Duration `mapstructure:"interval" json:"interval"`
	// MinRequests is the fewest recorded requests a run replays; a window
	// with fewer is skipped. 1…MaxRequests, default 200.
	MinRequests int `mapstructure:"min_requests" json:"min_requests"`
	// MaxRequests is the most requests a run replays (the window's first),
	// MinRequests…100,000. Default 2,000.
	MaxRequests int `mapstructure:"max_requests" json:"max_requests"`
	// Budget is the number of weight vectors a run evaluates, the current
	// one included, 2…100. Default 8.
	Budget int `mapstructure:"budget" json:"budget"`
	// Seeds is the number of seeds each vector is replayed with, 1…8.
	// Default 1.
	Seeds int `mapstructure:"seeds" json:"seeds"`
	// Timeout bounds one run's wall time, 1s…Interval; a run that
	// overruns is abandoned and logged. Default 2m.
	Timeout time.Duration `mapstructure:"timeout" json:"timeout"`
	// MinImprovement is the least relative gain of the best vector's score
	// over the current one's (0.05 = 5 %) for a proposal, in (0, 10].
	// Default 0.05.
	MinImprovement float64 `mapstructure:"min_improvement" json:"min_improvement"`
	// MaxStep is the largest share of the total weight one applied run
	// moves, in (0, 1]. Default 0.1.
	MaxStep float64 `mapstructure:"max_step" json:"max_step"`
}

// DefaultRetuneConfig returns the documented defaults: advisory, every 10
// minutes, 8 vectors × 1 seed on at most 2,000 requests.
func DefaultRetuneConfig() RetuneConfig {
	return RetuneConfig{
		Mode:           RetuneAdvisory,
		Interval:       10 * time.Minute,
		MinRequests:    200,
		MaxRequests:    2000,
		Budget:         8,
		Seeds:          1,
		Timeout:        2 * time.Minute,
		MinImprovement: 0.05,
		MaxStep:        0.1,
	}
}

// Validate checks every key; errors name it as retune.<key>.
func (c RetuneConfig) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("retune.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	switch c.Mode {
	case RetuneOff, RetuneAdvisory, RetuneApply:
	default:
		bad("mode", "%q, want off, advisory or apply", c.Mode)
	}
	if c.Interval < time.Minute || c.Interval > 24*time.Hour {
		bad("interval", "%v, want 1m…24h", c.Interval)
	}
	if c.MaxRequests < 1 || c.MaxRequests > 100_000 {
		bad("max_requests", "%d, want 1…100000", c.MaxRequests)
	}
	if c.MinRequests < 1 || c.MinRequests > c.MaxRequests {
		bad("min_requests", "%d, want 1…max_requests (%d)", c.MinRequests, c.MaxRequests)
	}
	if c.Budget < 2 || c.Budget > 100 {
		bad("budget", "%d, want 2…100", c.Budget)
	}
	if c.Seeds < 1 || c.Seeds > 8 {
		bad("seeds", "%d, want 1…8", c.Seeds)
	}
	if c.Timeout < time.Second || c.Timeout > c.Interval {
		bad("timeout", "%v, want 1s…interval (%v)", c.Timeout, c.Interval)
	}
	if !(c.MinImprovement > 0 && c.MinImprovement <= 10) {
		bad("min_improvement", "%v, want (0, 10]", c.MinImprovement)
	}
	if !(c.MaxStep > 0 && c.MaxStep <= 1) {
		bad("max_step", "%v, want (0, 1]", c.MaxStep)
	}
	return errors.Join(errs...)
}

// Window is what one retune run replays.
type Window struct {
	// Trace is the recorded traffic as Mooncake JSONL (block ids and
	// lengths, never prompt text), at most MaxRequests entries; Requests
	// is their number.
	Trace    []byte
	Requests int
	// Endpoints is the pool size to replay it on.
	Endpoints int
	// Engine is the calibrated engine as the simulator's engine keys
	// (YAML); EngineLearned is how many endpoints' calibration rests on
	// their own observations rather than the prior.
	Engine        []byte
	EngineLearned int
	// Calm are the base weights in force (index-aligned with the
	// profile's scorers) and Adaptive the loop's configuration: the
	// search starts from Calm and runs the loop as Adaptive has it.
	Calm     []float64
	Adaptive Config
	// Budget and Seeds bound the search (retune.budget, retune.seeds).
	Budget, Seeds int
}

// Scored is one weight vector the replay evaluated.
type Scored struct {
	Name    string    `json:"name"`
	Weights []float64 `json:"weights"`
	// Score is the tune objective on the replay, in [0, 1]: the mean of
	// the worst and the mean ratio to the best vector on TTFT p99 and
	// output tokens/s (1: best on both).
	Score     float64 `json:"score"`
	TTFTP99   float64 `json:"ttft_p99_ms"`
	TokPerSec float64 `json:"output_tokens_per_second"`
}

// Proposal is a finished replay search.
type Proposal struct {
	// Candidates in evaluation order; Current and Best index it (the
	// current calm weights, the highest score).
	Candidates    []Scored
	Current, Best int
	// Invalid counts candidates skipped because the loop cannot run them.
	Invalid int
}

// Retuner searches weight vectors on a window. Implementations replay it
// in the simulator (sim/retune); Propose must honour ctx's deadline
// between replays and be deterministic for a window.
type Retuner interface {
	Propose(ctx context.Context, w *Window) (*Proposal, error)
}

// RetuneInput is what Decide weighs.
type RetuneInput struct {
	// Calm are the base weights in force.
	Calm []float64
	// Proposal is the replay's result.
	Proposal *Proposal
	// LoopMode is the configurator's mode (static, calm, rebalance,
	// frozen); "" before the loop's first tick.
	LoopMode string
	// EngineLearned is Window.EngineLearned.
	EngineLearned int
}

// Decision is what a run decided, and why.
type Decision struct {
	// Action is one of RetuneActions.
	Action string `json:"action"`
	// Reason says why, with the numbers.
	Reason string `json:"reason"`
	// Improvement is the best score over the current one, less 1.
	Improvement float64 `json:"improvement"`
	// Target is the best vector scaled to the calm weights' total; To is
	// where an applied run moves the calm weights (nil otherwise), Moved
	// the share of the total weight that moves, at most max_step.
	Target []float64 `json:"target,omitempty"`
	To     []float64 `json:"to,omitempty"`
	Moved  float64   `json:"moved"`
}

// Decide is the slow loop's decision as a pure step: keep when the best
// vector improves on the current one by no more than MinImprovement;
// otherwise propose (advisory), or, in apply mode, hold while the loop is
// out of calm or the engine is the prior, and else step toward it by at
// most MaxStep (StepToward).
func Decide(cfg RetuneConfig, in RetuneInput) Decision {
	p := in.Proposal
	cur, best := p.Candidates[p.Current], p.Candidates[p.Best]
	d := Decision{Improvement: improvement(best.Score, cur.Score)}
	score := fmt.Sprintf("best %s scores %.4f, current %.4f: %+.1f %%", best.Name, best.Score, cur.Score, 100*d.Improvement)
	if p.Best == p.Current || !(d.Improvement > cfg.MinImprovement) {
		d.Action = ActionKeep
		d.Reason = fmt.Sprintf("%s, not above min_improvement %.1f %%", score, 100*cfg.MinImprovement)
		return d
	}
	d.Target = scaleTo(best.Weights, in.Calm)
	score = fmt.Sprintf("%s > min_improvement %.1f %%", score, 100*cfg.MinImprovement)
	switch {
	case cfg.Mode != RetuneApply:
		d.Action, d.Reason = ActionPropose, score+"; advisory: weights unchanged"
	case in.LoopMode != configurator.ModeStatic && in.LoopMode != configurator.ModeCalm:
		d.Action, d.Reason = ActionHold, fmt.Sprintf("%s; the loop is in mode %q: the calm weights change only in calm", score, in.LoopMode)
	case in.EngineLearned < 1:
		d.Action, d.Reason = ActionHold, score+"; the calibrator has learned no endpoint yet: apply waits for a learned engine"
	default:
		d.To, d.Moved = StepToward(in.Calm, d.Target, cfg.MaxStep)
		d.Action = ActionApply
		d.Reason = fmt.Sprintf("%s; moving %.1f %% of the weight toward it (max_step %.1f %%)", score, 100*d.Moved, 100*cfg.MaxStep)
	}
	return d
}

// improvement is best/current − 1, with current floored at 0.001 so that
// it stays finite.
func improvement(best, current float64) float64 {
	return best/max(current, 1e-3) - 1
}

// scaleTo returns w scaled to ref's total (a max-score pick is the same
// for w and c·w). w must have a positive total.
func scaleTo(w, ref []float64) []float64 {
	var sw, sr float64
	for i := range w {
		sw += w[i]
		sr += ref[i]
	}
	out := make([]float64, len(w))
	for i, v := range w {
		out[i] = v * sr / sw
	}
	return out
}

// StepToward moves from toward target (of the same total) by at most
// maxStep of the total weight: the distance is Σ|target−from| ÷ (2 ×
// total), the share of weight that would change hands, in [0, 1]; a
// target within maxStep is reached. It returns the new weights and the
// share moved.
func StepToward(from, target []float64, maxStep float64) ([]float64, float64) {
	var total, diff float64
	for i := range from {
		total += from[i]
		diff += math.Abs(target[i] - from[i])
	}
	dist := diff / (2 * total)
	alpha := 1.0
	if dist > maxStep {
		alpha = maxStep / dist
	}
	out := make([]float64, len(from))
	for i := range from {
		out[i] = from[i] + alpha*(target[i]-from[i])
	}
	return out, alpha * dist
}
