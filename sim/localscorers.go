package sim

import (
	"sync/atomic"

	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/scheduler"
)

// The two baselines that are not weighted sums are sim-local scorers that
// write a one-hot score, plugged into the real scheduler with weight 1 and
// the max-score picker (ties broken by its seeded random draw).

// roundRobin scores the next endpoint in turn 1 and the rest 0: a plain
// Kubernetes Service. Category none.
type roundRobin struct{ next atomic.Uint64 }

func (*roundRobin) Category() scheduler.Category { return scheduler.CategoryNone }

func (r *roundRobin) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	k := int(r.next.Load() % uint64(len(eps)))
	for i := range out {
		out[i] = 0
	}
	out[k] = 1
}

// Picked advances the turn.
func (r *roundRobin) Picked(*scheduler.CycleState, *scheduler.Request, *scheduler.Endpoint) {
	r.next.Add(1)
}

func buildRoundRobin(seed uint64, _ *Scenario) (*scheduler.Scheduler, *control.Loop, error) {
	cfg := scheduler.DefaultConfig()
	cfg.Seed = seed
	s, err := scheduler.New(cfg, []scheduler.ScorerEntry{{Name: "round-robin", Type: "round-robin", Scorer: &roundRobin{}, Weight: 1}}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	return s, nil, err
}

// sglangSwitch is SGLang's cache-aware router decision rule (sgl-router
// cache_aware policy): when the router-local loads are imbalanced
// (max − min > AbsThreshold and max > RelThreshold · min) it goes to the
// least-loaded endpoint; otherwise to the endpoint with the longest
// prefix match if that match ratio exceeds CacheThreshold; otherwise to the
// least-loaded endpoint. The prefix match is the real prefix scorer's
// score (matched leading blocks ÷ request blocks), the load is the
// router's in-flight count. It writes 1 for the chosen endpoint(s) and 0
// elsewhere. Category none.
type sglangSwitch struct {
	prefix         scheduler.Scorer
	absThreshold   float64
	relThreshold   float64
	cacheThreshold float64
}

func (*sglangSwitch) Category() scheduler.Category { return scheduler.CategoryNone }

func (s *sglangSwitch) Score(cs *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	minL, maxL := float64(eps[0].InFlight()), float64(eps[0].InFlight())
	for _, e := range eps[1:] {
		l := float64(e.InFlight())
		minL, maxL = min(minL, l), max(maxL, l)
	}
	leastLoaded := func() {
		for i, e := range eps {
			out[i] = 0
			if float64(e.InFlight()) == minL {
				out[i] = 1
			}
		}
	}
	// The prefix scorer always sees the request so its index learns from
	// every decision at the pick, as SGLang's radix tree does.
	s.prefix.Score(cs, req, eps, out)
	if maxL-minL > s.absThreshold && maxL > s.relThreshold*minL {
		leastLoaded()
		return
	}
	best := 0.0
	for _, v := range out {
		best = max(best, v)
	}
	if best <= s.cacheThreshold {
		leastLoaded()
		return
	}
	for i, v := range out {
		if v == best {
			out[i] = 1
		} else {
			out[i] = 0
		}
	}
}

func (s *sglangSwitch) Picked(cs *scheduler.CycleState, req *scheduler.Request, chosen *scheduler.Endpoint) {
	if o, ok := s.prefix.(scheduler.PickObserver); ok {
		o.Picked(cs, req, chosen)
	}
}

func (s *sglangSwitch) FirstByte(cs *scheduler.CycleState, req *scheduler.Request, ep *scheduler.Endpoint) {
	if o, ok := s.prefix.(scheduler.FirstByteObserver); ok {
		o.FirstByte(cs, req, ep)
	}
}

func (s *sglangSwitch) Done(req *scheduler.Request, ep *scheduler.Endpoint, o scheduler.Outcome) {
	if d, ok := s.prefix.(scheduler.DoneObserver); ok {
		d.Done(req, ep, o)
	}
}

func (s *sglangSwitch) PoolChanged(eps []*scheduler.Endpoint) {
	if p, ok := s.prefix.(scheduler.PoolObserver); ok {
		p.PoolChanged(eps)
	}
}

func buildSGLang(seed uint64, _ *Scenario) (*scheduler.Scheduler, *control.Loop, error) {
	p, err := newPrefixScorer("prefix")
	if err != nil {
		return nil, nil, err
	}
	sw := &sglangSwitch{prefix: p, absThreshold: 64, relThreshold: 1.5, cacheThreshold: 0.3}
	cfg := scheduler.DefaultConfig()
	cfg.Seed = seed
	s, err := scheduler.New(cfg, []scheduler.ScorerEntry{{Name: "sglang-switch", Type: "sglang-switch", Scorer: sw, Weight: 1}}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	return s, nil, err
}
