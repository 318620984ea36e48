package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// Errors returned by Pick. They are sentinel values so the request path
// does not allocate; the proxy maps them to status codes.
var (
	// ErrNoEndpoints: the pool is empty (or the subset hint matched none).
	ErrNoEndpoints = errors.New("scheduler: no endpoints available")
	// ErrUnknownModel: no endpoint in the pool serves the requested model.
	ErrUnknownModel = errors.New("scheduler: no endpoint serves the requested model")
	// ErrUnreachable: every endpoint left for the request is unhealthy
	// (its metrics scrapes keep failing: refused, timed out, HTTP error).
	ErrUnreachable = errors.New("scheduler: every endpoint for the request is unreachable (its metrics scrapes keep failing)")
)

// ScorerEntry is one scorer of a profile with its name and base weight.
type ScorerEntry struct {
	// Name identifies the scorer in weights, metrics and explanations.
	Name string
	// Type is the scorer's config type string ("prefix", "queue", …).
	Type   string
	Scorer Scorer
	// Weight is the profile (static) weight, ≥ 0.
	Weight float64
}

// Deps are the scheduler's collaborators. Nil fields get harmless
// defaults (no metrics, discarded logs, the real clock).
type Deps struct {
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Clock dates outlier ejections of requests whose Arrival is unset and
	// tells the metrics which endpoints are ejected now.
	Clock clock.PassiveClock
}

// Pool is one installed, immutable set of endpoints.
type Pool struct {
	// Version increases with every SetEndpoints.
	Version uint64
	// Endpoints are the installed endpoints; do not modify.
	Endpoints []Endpoint
	ptrs      []*Endpoint
}

// Pointers returns pointers to the pool's endpoints, in order; shared, do
// not modify.
func (p *Pool) Pointers() []*Endpoint { return p.ptrs }

// Scheduler picks an endpoint for each request: filters, then a weighted
// sum of scorer scores, then a picker. Pick is safe for concurrent use and
// allocation-free at steady state; SetEndpoints and Publish may run
// concurrently with it (they swap atomic pointers).
type Scheduler struct {
	cfg     Config
	entries []ScorerEntry
	filters []Filter
	empty   []error // per filter: what Pick returns when it leaves no candidate
	picker  Picker
	guard   Guard // Config.Guard's bound: the guard of weights without one
	crowd   Guard // … and its crowd bound
	log     *slog.Logger
	clk     clock.PassiveClock
	m       *metrics

	stateFlt []StateFilter // per filter: its StateFilter, nil if it is none
	matchBy  int           // index of the scorer whose Match runs; -1: none
	pickObs  []int         // indexes of scorers implementing PickObserver
	doneObs  []int         // … DoneObserver
	fbObs    []int         // … FirstByteObserver
	affinity []bool        // per scorer: its category is CategoryAffinity

	pool    atomic.Pointer[Pool]
	weights atomic.Pointer[Weights]
	seq     atomic.Uint64
	obs     atomic.Pointer[ObservationRing] // where Done records Observations; nil: nowhere

	mu     sync.Mutex                // serialises SetEndpoints
	states map[string]*endpointState // by address, across pools

	wanting atomic.Int32 // endpoints whose calibration wants probes; 0 skips probing
	// probeSeen counts picks with a candidate that could be probed since
	// the last probe that waits longer than its choice; probeEvery is
	// 1/ProbeConfig.Share, the picks such a probe takes (0: never).
	probeSeen  atomic.Int64
	probeEvery int64

	ejMu    sync.Mutex   // serialises ejections and restorations
	ejected atomic.Int32 // pool endpoints with an ejection not yet restored; 0 skips the check

	decisions sync.Pool
}

// New builds a scheduler from a profile's scorers, filters and picker. It
// publishes the profile weights as version 1.
func New(cfg Config, entries []ScorerEntry, filters []Filter, picker Picker, deps Deps) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, errors.New("scheduler: profile has no scorers")
	}
	if picker == nil {
		return nil, errors.New("scheduler: no picker")
	}
	seen := make(map[string]bool, len(entries))
	base := make([]float64, len(entries))
	for i, e := range entries {
		if e.Name == "" || e.Scorer == nil {
			return nil, fmt.Errorf("scheduler: scorer %d has no name or implementation", i)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("scheduler: scorer name %q used twice", e.Name)
		}
		seen[e.Name] = true
		base[i] = e.Weight
	}
	if err := cfg.Guard.ValidateScorers(entries); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	s := &Scheduler{
		cfg:     cfg,
		entries: append([]ScorerEntry(nil), entries...),
		filters: append([]Filter(nil), filters...),
		picker:  picker,
		log:     deps.Logger,
		clk:     deps.Clock,
		states:  map[string]*endpointState{},
	}
	if s.clk == nil {
		s.clk = clock.RealClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.matchBy = -1
	consumer := false
	for _, f := range s.filters {
		sf, _ := f.(StateFilter)
		s.stateFlt = append(s.stateFlt, sf)
		if _, ok := f.(MatchConsumer); ok {
			consumer = true
		}
		err := ErrUnknownModel
		if ee, ok := f.(EmptyErrorer); ok && ee.EmptyError() != nil {
			err = ee.EmptyError()
		}
		s.empty = append(s.empty, err)
	}
	for _, e := range entries {
		if _, ok := e.Scorer.(MatchConsumer); ok {
			consumer = true
		}
	}
	// The seconds guard reads the match and the pending tokens it counts,
	// the join bound the match's Joining.
	consumer = consumer || cfg.Guard.seconds() || cfg.Guard.JoinFactor > 0
	for i, e := range entries {
		if _, ok := e.Scorer.(MatchProducer); ok && consumer && s.matchBy < 0 {
			s.matchBy = i
		}
		s.affinity = append(s.affinity, e.Scorer.Category() == CategoryAffinity)
		if _, ok := e.Scorer.(PickObserver); ok {
			s.pickObs = append(s.pickObs, i)
		}
		if _, ok := e.Scorer.(DoneObserver); ok {
			s.doneObs = append(s.doneObs, i)
		}
		if _, ok := e.Scorer.(FirstByteObserver); ok {
			s.fbObs = append(s.fbObs, i)
		}
	}
	s.guard, s.crowd = cfg.Guard.Guards()
	if cfg.Probe.Share > 0 {
		s.probeEvery = int64(math.Round(1 / cfg.Probe.Share))
	}
	w := &Weights{Version: 1, Values: base, Mode: "static", Reason: "profile weights"}
	if s.guard.Factor > 0 {
		w.Guard, w.Crowd, w.Calm = s.guard, s.crowd, base
	}
	if err := w.Validate(len(entries)); err != nil {
		return nil, fmt.Errorf("scheduler: profile %w", err)
	}
	s.weights.Store(w)
	s.pool.Store(&Pool{})
	s.m = newMetrics(s, deps.Registerer)
	s.decisions.New = func() any { return s.newDecision() }
	return s, nil
}

// Scorers returns the profile's scorers, in weight-index order. The slice
// is shared; do not modify.
func (s *Scheduler) Scorers() []ScorerEntry { return s.entries }

// Weights returns the weights in force.
func (s *Scheduler) Weights() *Weights { return s.weights.Load() }

// Publish installs new weights for all subsequent picks. It rejects
// weights that do not fit the profile and keeps the old ones.
func (s *Scheduler) Publish(w *Weights) error {
	if err := w.Validate(len(s.entries)); err != nil {
		return err
	}
	s.weights.Store(w)
	return nil
}

// Pool returns the installed pool.
func (s *Scheduler) Pool() *Pool { return s.pool.Load() }

// SetEndpoints installs a new pool built from a copy of eps, merges in the
// router-local in-flight and pick counters (kept across pools by address) and tells
// PoolObserver scorers. Counters of endpoints that left are dropped once
// they reach zero.
func (s *Scheduler) SetEndpoints(eps []Endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.pool.Load()
	p := &Pool{Version: old.Version + 1, Endpoints: make([]Endpoint, len(eps)), ptrs: make([]*Endpoint, len(eps))}
	present := make(map[string]bool, len(eps))
	for i := range eps {
		p.Endpoints[i] = eps[i]
		st := s.states[eps[i].Address]
		if st == nil {
			st = new(endpointState)
			s.states[eps[i].Address] = st
		}
		p.Endpoints[i].st = st
		p.Endpoints[i].idx = int32(i)
		p.ptrs[i] = &p.Endpoints[i]
		present[eps[i].Address] = true
	}
	for addr, st := range s.states {
		st.inPool = present[addr]
		s.countWanting(st)
		if !present[addr] && st.inflight.Load() <= 0 && st.pending.Load() <= 0 && st.tokens.Load() <= 0 && st.peerInflight.Load() == 0 && st.peerPending.Load() == 0 {
			delete(s.states, addr)
		}
	}
	for _, e := range s.entries {
		if o, ok := e.Scorer.(PoolObserver); ok {
			o.PoolChanged(p.ptrs)
		}
	}
	s.ejMu.Lock()
	s.pool.Store(p)
	s.halfOpen(p)
	s.recount(p)
	s.ejMu.Unlock()
}

// AddPeerLoad adds another router replica's in-flight requests and pending
// prefill bytes (deltas, either sign) to the endpoint at addr, so
// Endpoint.InFlight and Endpoint.PendingPrefill count them. An address not
// in the pool yet gets its counters now and keeps them until it has left
// the pool and every count is back to zero. The caller (the replica sync
// layer) keeps what it added per peer and subtracts it when the peer's
// counts change or the peer expires. Off the request path: it takes the
// lock SetEndpoints holds.
func (s *Scheduler) AddPeerLoad(addr string, inflight, pending int64) {
	if inflight == 0 && pending == 0 {
		return
	}
	s.mu.Lock()
	st := s.states[addr]
	if st == nil {
		st = new(endpointState)
		s.states[addr] = st
	}
	st.peerInflight.Add(inflight)
	st.peerPending.Add(pending)
	s.mu.Unlock()
}

// SetCalibration publishes what was learned of the endpoint at addr (see
// Calibration); it is kept across pools like the in-flight count, and
// replaces the previous value whole. For the control plane: it takes the
// scheduler's lock briefly and allocates.
func (s *Scheduler) SetCalibration(addr string, c Calibration) {
	s.mu.Lock()
	st := s.states[addr]
	if st == nil {
		st = new(endpointState)
		s.states[addr] = st
	}
	st.probes.Store(int64(c.Probes))
	st.calib.Store(&c)
	s.countWanting(st)
	s.mu.Unlock()
}

// countWanting keeps s.wanting the number of pool endpoints whose
// calibration asks for probes, after st's calibration or pool membership
// changed. Under s.mu.
func (s *Scheduler) countWanting(st *endpointState) {
	c := st.calib.Load()
	wants := st.inPool && c != nil && c.Probes > 0
	if wants == st.wants {
		return
	}
	st.wants = wants
	if wants {
		s.wanting.Add(1)
	} else {
		s.wanting.Add(-1)
	}
}

// Pick chooses an endpoint for req. On success the caller owns the returned
// Decision until it calls Done exactly once; afterwards it must not touch
// it. Errors are ErrNoEndpoints, ErrUnknownModel, ErrUnreachable or a
// filter's EmptyError.
func (s *Scheduler) Pick(ctx context.Context, req *Request) (*Decision, error) {
	pool := s.pool.Load()
	w := s.weights.Load()
	d := s.decisions.Get().(*Decision)
	d.reset(req, w, len(pool.ptrs))

	cands := d.cands[:0]
	if len(req.Subset) > 0 {
		for _, e := range pool.ptrs {
			if inSubset(req.Subset, e.Address) {
				cands = append(cands, e)
			}
		}
	} else {
		cands = append(cands, pool.ptrs...)
	}
	if len(cands) == 0 {
		s.release(d)
		s.m.errNoEndpoints.Inc()
		return nil, ErrNoEndpoints
	}
	if s.matchBy >= 0 {
		d.cs.cur = s.matchBy
		s.entries[s.matchBy].Scorer.(MatchProducer).Match(&d.cs, req, cands)
	}
	spare := d.spare[:0]
	for fi, f := range s.filters {
		var out []*Endpoint
		if sf := s.stateFlt[fi]; sf != nil {
			out = sf.FilterState(&d.cs, req, cands, spare)
		} else {
			out = f.Filter(req, cands, spare)
		}
		cands, spare = out, cands[:0]
		if len(cands) == 0 {
			s.release(d)
			err := s.empty[fi]
			s.m.pickError(err)
			return nil, err
		}
	}
	// Every filter left a candidate; outlier ejection never empties the
	// list (when all are ejected it keeps them).
	if s.ejected.Load() > 0 {
		cands, spare = s.dropEjected(req, cands, spare)
	}
	d.cands, d.spare = cands, spare

	n := len(cands)
	d.scores = growFloats(d.scores, n*len(s.entries))
	d.totals = growFloats(d.totals, n)
	clear(d.totals)
	for si := range s.entries {
		d.cs.cur = si
		out := d.scores[si*n : (si+1)*n]
		s.entries[si].Scorer.Score(&d.cs, req, cands, out)
		wi := w.Values[si]
		for i, v := range out {
			if !(v >= 0 && v <= 1) { // also catches NaN
				v = Clamp01(v)
				out[i] = v
				s.m.clamped[si].Inc()
			}
			d.totals[i] += wi * v
		}
	}

	if req.ID != "" {
		d.rnd = NewRand(mix(s.cfg.Seed, xxhash.Sum64String(req.ID)))
	} else {
		d.rnd = NewRand(mix(s.cfg.Seed, s.seq.Add(1)))
	}
	keys := d.totals
	if g, crowd, calm := s.guardFor(w); g.Factor > 0 {
		d.guarded = true
		keys = s.applyGuard(d, w, g, crowd, calm)
	}
	k := min(n, 1+s.cfg.MaxFallbacks)
	k = s.picker.Rank(keys, &d.rnd, d.order[:k])
	d.order = d.order[:k]
	if s.cfg.Probe.Interval > 0 && s.wanting.Load() > 0 {
		s.probe(d, req, cands)
	}
	d.at = 0
	d.Endpoint = cands[d.order[0]]
	d.markPick()
	d.Endpoint.st.inflight.Add(1)
	d.Endpoint.st.picks.Add(1)
	d.Endpoint.st.pending.Add(d.prefill)
	d.chargeTokens(true)
	s.m.picks.Inc()
	for _, si := range s.pickObs {
		d.cs.cur = si
		s.entries[si].Scorer.(PickObserver).Picked(&d.cs, req, d.Endpoint)
	}
	return d, nil
}

func inSubset(subset []string, addr string) bool {
	for _, a := range subset {
		if a == addr {
			return true
		}
	}
	return false
}

// Clamp01 returns v clamped to [0,1], with NaN mapped to 0.
func Clamp01(v float64) float64 {
	switch {
	case math.IsNaN(v) || v < 0:
		return 0
	case v > 1:
		return 1
	}
	return v
}

func growFloats(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	return b[:n]
}

func (s *Scheduler) release(d *Decision) {
	d.Request, d.Endpoint, d.Weights = nil, nil, nil
	clear(d.cands[:cap(d.cands)])
	clear(d.spare[:cap(d.spare)])
	s.decisions.Put(d)
}
