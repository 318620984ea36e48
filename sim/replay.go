package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/sim/scenario"
)

// The slow loop's replay (control.Retuner): a window of the router's own
// traffic (the traffic recorder's Mooncake trace) replayed on the engine
// the calibrator learned, searched around the calm weights in force with
// Tune — the same coordinate search and objective as `trimtab sim tune
// --loop`, bounded by the window's budget and seeds and run on the
// caller's goroutine (one replay at a time). control.Retune decides what
// to do with the result; docs/retune.md describes both. It lives here so
// that a simulated run can run the slow loop too (RunConfig.Retune);
// package sim/retune is its name for trimtab serve.

// ReplaySeed is the first seed every replay runs with: a window replays
// the same way on every run and every replica.
const ReplaySeed = 1

// ReplayCurrent names the weights in force among the candidates.
const ReplayCurrent = "current"

// Replay replays windows over a profile's scorers. Safe for concurrent
// use; Propose allocates a scenario per call.
type Replay struct {
	profile *configs.File
}

var _ control.Retuner = (*Replay)(nil)

// NewReplay returns a Replay over profile's scorers, picker and filters (its
// weights and adaptive section come from each window). The profile must
// be valid; it is not modified.
func NewReplay(profile *configs.File) (*Replay, error) {
	if profile == nil || len(profile.Scorers) == 0 {
		return nil, errors.New("replay: the profile has no scorers")
	}
	return &Replay{profile: profile}, nil
}

// Propose replays w.Trace on w.Endpoints servers of the engine w.Engine
// and runs a search of at most w.Budget vectors × w.Seeds seeds from
// w.Calm (named ReplayCurrent), the loop on as w.Adaptive has it. It is
// deterministic for a window; ctx's deadline is checked between replays.
func (r *Replay) Propose(ctx context.Context, w *control.Window) (*control.Proposal, error) {
	if len(w.Calm) != len(r.profile.Scorers) {
		return nil, fmt.Errorf("replay: %d calm weights for %d scorers", len(w.Calm), len(r.profile.Scorers))
	}
	sc, err := scenario.FromTraceData("window", w.Trace, scenario.TraceConfig{Servers: w.Endpoints})
	if err != nil {
		return nil, fmt.Errorf("window: %w", err)
	}
	eng, err := ParseEngine(w.Engine)
	if err != nil {
		return nil, fmt.Errorf("calibrated engine: %w", err)
	}
	sc.Engine, sc.EngineName = eng, "calibrated"
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("calibrated engine: %w", err)
	}
	f := *r.profile
	f.Adaptive = w.Adaptive
	// A replay never runs a slow loop of its own (RunConfig.Retune would
	// replay inside the replay).
	f.Retune.Mode = control.RetuneOff
	f.Scorers = slices.Clone(r.profile.Scorers)
	for i := range f.Scorers {
		v := w.Calm[i]
		f.Scorers[i].Weight = &v
	}
	res, err := Tune(ctx, TuneConfig{Scenarios: []*scenario.Scenario{sc}, Profile: &f, Loop: w.Adaptive.Enabled,
		Seed: ReplaySeed, Seeds: w.Seeds, Budget: w.Budget, Parallel: 1},
		[]Candidate{{Name: ReplayCurrent, Weights: slices.Clone(w.Calm)}})
	if err != nil {
		return nil, err
	}
	p := &control.Proposal{Best: res.Best, Current: -1, Invalid: res.Invalid}
	for i, ev := range res.Vectors {
		if ev.Name == ReplayCurrent {
			p.Current = i
		}
		p.Candidates = append(p.Candidates, control.Scored{Name: ev.Name, Weights: ev.Weights, Score: ev.Score,
			TTFTP99: ev.TTFTP99[0], TokPerSec: ev.TokPerSec[0]})
	}
	if p.Current < 0 {
		return nil, errors.New("replay: the weights in force do not make a valid profile")
	}
	return p, nil
}
