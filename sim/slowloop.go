package sim

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/scheduler"
)

// The slow loop in a simulated run (RunConfig.Retune): the first router
// records its traffic as trimtab serve's traffic recorder does
// (sim/window.go), and every retune interval of virtual time
// control.Retune replays the window on the engine that router's
// calibrator learned (Replay, a nested simulation on the caller's
// goroutine) and keeps or applies a calm vector exactly as in serve.
// Virtual time stands still during a replay, so a run is deterministic
// for its seed (a step's wall time is not part of the result).

// RetuneStep is one run of the slow loop in a simulated run.
type RetuneStep struct {
	// At is the virtual time of the run.
	At time.Duration
	// Action and Reason are control.Retune's decision (keep, propose,
	// hold, apply, refused or skip).
	Action, Reason string
	// Requests is the window's size.
	Requests int
	// To is the calm vector applied (apply only).
	To []float64
}

// simRetune is the run's slow loop, and its control.RetuneSource
// (sim/window.go): the window being recorded and the first router's
// calibrator and scheduler.
type simRetune struct {
	loop     *control.Retune
	win      *trafficWindow
	max      int // requests a window keeps: what a replay reads
	interval time.Duration
	cal      *fleet.Calibrator
	sched    *scheduler.Scheduler
}

// errRetuneNoLoop: the slow loop moves the calm weights of a control
// loop, which a static policy has not.
var errRetuneNoLoop = errors.New("retune: the policy has no control loop (a static policy, or adaptive.enabled false)")

// buildRetune wires the slow loop on the first router when cfg.Retune is
// set (a policy that is not a profile, or has no loop, cannot run it), or
// when the policy is a profile with its loop on and retune.mode apply, as
// trimtab serve would run it. Advisory mode changes no weight, so a
// simulated run leaves it out.
func (r *runner) buildRetune() error {
	cfg := r.cfg.Retune
	if cfg != nil && cfg.Mode == control.RetuneOff {
		return nil
	}
	if r.cfg.Policy.Profile == nil || r.ctl == nil {
		if cfg != nil {
			return errRetuneNoLoop
		}
		return nil
	}
	f, err := r.cfg.Policy.Profile()
	if err != nil {
		return err
	}
	if cfg == nil {
		if f.Retune.Mode != control.RetuneApply {
			return nil
		}
		cfg = &f.Retune
	}
	c := *cfg
	// retune.timeout bounds a run's wall time; a replay here takes none
	// of the run's virtual time, so allow it the most Validate does.
	c.Timeout = c.Interval
	tuner, err := NewReplay(f)
	if err != nil {
		return err
	}
	rt := r.routers[0]
	sr := &simRetune{win: newTrafficWindow(c.MaxRequests), max: c.MaxRequests, interval: c.Interval, cal: rt.cal, sched: rt.sched}
	if sr.loop, err = control.NewRetune(c, rt.ctl, tuner, sr, control.RetuneDeps{}); err != nil {
		return err
	}
	r.retune = sr
	r.h.push(event{at: c.Interval, kind: evRetune})
	return nil
}

// retuneStep runs the slow loop once at the current virtual time.
func (r *runner) retuneStep() {
	rep := r.retune.loop.Step(context.Background(), Epoch.Add(r.now))
	st := RetuneStep{At: r.now, Action: rep.Decision.Action, Reason: rep.Decision.Reason, Requests: rep.Window.Requests}
	if rep.Decision.Action == control.ActionApply {
		st.To = slices.Clone(rep.Decision.To)
	}
	r.res.Retune = append(r.res.Retune, st)
}
