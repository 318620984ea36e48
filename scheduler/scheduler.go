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

// Config holds the scheduler's own settings.
type Config struct {
	// Seed seeds tie-breaks and weighted-random draws.
	Seed uint64 `mapstructure:"seed"`
	// MaxFallbacks is how many fallback endpoints a decision carries, after
	// the chosen one (default 2).
	MaxFallbacks int `mapstructure:"max_fallbacks"`
	// Outlier is outlier ejection of failing endpoints.
	Outlier OutlierConfig `mapstructure:"outlier"`
	// Guard is the load guard every pick runs under when the weights in
	// force carry none (see GuardConfig).
	Guard GuardConfig `mapstructure:"guard"`
}

// DefaultConfig returns the defaults: seed 0, two fallbacks, outlier
// ejection on with DefaultOutlierConfig, the guard off (DefaultGuardConfig).
func DefaultConfig() Config {
	return Config{MaxFallbacks: 2, Outlier: DefaultOutlierConfig(), Guard: DefaultGuardConfig()}
}

// Validate checks the config.
func (c Config) Validate() error {
	if c.MaxFallbacks < 0 || c.MaxFallbacks > 16 {
		return fmt.Errorf("max_fallbacks: %d, want 0…16", c.MaxFallbacks)
	}
	if err := c.Guard.Validate(); err != nil {
		return err
	}
	return c.Outlier.Validate()
}

// GuardConfig is the scheduler's load guard (YAML scheduler.guard), a
// setting of any profile, static or adaptive. With Factor > 0 every pick
// whose weights carry no guard of their own (Weights.Guard.Factor 0: the
// profile weights of static mode) runs under Guard{Factor, Slack}, and
// herd pressure is measured against the weights in force: a pick whose
// best-scored candidate is over the bound (or over the crowd bound while
// it shares the request's prefix) charges that candidate a herd pick
// (Endpoint.HerdPicks), so the herd signal can be watched before the
// control loop is enabled. Weights that carry a guard (the adaptive
// loop's) use their own; the profile loader gives both the same values.
// docs/adaptive.md, "The load guard", has the defaults' reasons.
type GuardConfig struct {
	// Factor is the bound's factor c ≥ 1; 0 (the default) turns the
	// scheduler's guard off.
	Factor float64 `mapstructure:"factor"`
	// Slack is s ≥ 0, in requests per unit of capacity. Default 6.
	Slack float64 `mapstructure:"slack"`
	// CrowdFactor and CrowdSlack bound a crowded prefix (Weights.Crowd);
	// CrowdFactor 0 turns crowd accounting off. Defaults 1.5 and 3.
	CrowdFactor float64 `mapstructure:"crowd_factor"`
	CrowdSlack  float64 `mapstructure:"crowd_slack"`
	// Unit is what the bound counts (unit): GuardRequests (the default)
	// compares router-local in-flight requests per unit of capacity;
	// GuardSeconds compares each candidate's expected wait, its queued
	// uncached prompt tokens (this request's included) ÷ its prefill
	// rate, so Slack and CrowdSlack are seconds (see Guard). The unit
	// applies to every guard the scheduler runs, the adaptive loop's too.
	Unit string `mapstructure:"unit"`
	// PrefillTokensPerSecond is the prefill rate of an endpoint of
	// capacity 1 that has no Calibration, for the seconds unit
	// (prefill_tokens_per_second). Default 13,100, the time-cost
	// scorer's prior (scorers.TimeCostConfig).
	PrefillTokensPerSecond float64 `mapstructure:"prefill_tokens_per_second"`
}

// Guard units (GuardConfig.Unit).
const (
	GuardRequests = "requests"
	GuardSeconds  = "seconds"
)

// The seconds unit's slacks when a profile writes none: the requests
// unit's 6 and 3 requests at SMG's mean prefill of 1,024 tokens
// (docs/field-policies.md) and the prior 13,100 tokens/s, rounded:
// 6 × 1,024 ÷ 13,100 ≈ 0.47 s and half that.
const (
	DefaultGuardSlackSeconds = 0.5
	DefaultCrowdSlackSeconds = 0.25
)

// DefaultGuardConfig returns the guard off, with the slack and crowd
// bound the adaptive loop's guard uses (factor 2.5 there), in requests.
func DefaultGuardConfig() GuardConfig {
	return GuardConfig{Slack: 6, CrowdFactor: 1.5, CrowdSlack: 3, Unit: GuardRequests, PrefillTokensPerSecond: 13100}
}

// seconds reports whether the guard counts seconds.
func (g GuardConfig) seconds() bool { return g.Unit == GuardSeconds }

// Validate checks the guard; errors name the field under scheduler.
func (g GuardConfig) Validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !(g.Factor == 0 || g.Factor >= 1) || !finite(g.Factor):
		return fmt.Errorf("guard.factor: must be 0 (off) or a finite number ≥ 1, got %v", g.Factor)
	case !(g.Slack >= 0) || !finite(g.Slack):
		return fmt.Errorf("guard.slack: must be a finite number ≥ 0, got %v", g.Slack)
	case !(g.CrowdFactor == 0 || g.CrowdFactor >= 1) || !finite(g.CrowdFactor):
		return fmt.Errorf("guard.crowd_factor: must be 0 (off) or a finite number ≥ 1, got %v", g.CrowdFactor)
	case !(g.CrowdSlack >= 0) || !finite(g.CrowdSlack):
		return fmt.Errorf("guard.crowd_slack: must be a finite number ≥ 0, got %v", g.CrowdSlack)
	case g.Unit != "" && g.Unit != GuardRequests && g.Unit != GuardSeconds:
		return fmt.Errorf("guard.unit: must be %q or %q, got %q", GuardRequests, GuardSeconds, g.Unit)
	case g.seconds() && !(g.PrefillTokensPerSecond > 0 && g.PrefillTokensPerSecond <= 1e9):
		return fmt.Errorf("guard.prefill_tokens_per_second: must be in (0, 1e9] with unit %q, got %v", GuardSeconds, g.PrefillTokensPerSecond)
	}
	return nil
}

// Guards returns the guard and the crowd bound the config describes; both
// zero when Factor is 0, the crowd bound zero when CrowdFactor is 0.
func (g GuardConfig) Guards() (guard, crowd Guard) {
	if g.Factor <= 0 {
		return Guard{}, Guard{}
	}
	guard = Guard{Factor: g.Factor, Slack: g.Slack}
	if g.CrowdFactor > 0 {
		crowd = Guard{Factor: g.CrowdFactor, Slack: g.CrowdSlack}
	}
	return guard, crowd
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
	// The seconds guard reads the match and the pending tokens it counts.
	consumer = consumer || cfg.Guard.seconds()
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
	s.mu.Unlock()
	st.calib.Store(&c)
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
	d.at = 0
	d.Endpoint = cands[d.order[0]]
	d.markPick()
	d.Endpoint.st.inflight.Add(1)
	d.Endpoint.st.picks.Add(1)
	d.Endpoint.st.pending.Add(d.prefill)
	d.chargeTokens()
	s.m.picks.Inc()
	for _, si := range s.pickObs {
		d.cs.cur = si
		s.entries[si].Scorer.(PickObserver).Picked(&d.cs, req, d.Endpoint)
	}
	return d, nil
}

// guardFor returns the guard a pick with weights w runs under, its crowd
// bound, and the weights herd pressure is measured against: w's own when
// w carries a guard, else the scheduler's (Config.Guard) measured against
// w's values, else none.
func (s *Scheduler) guardFor(w *Weights) (g, crowd Guard, calm []float64) {
	if w.Guard.Factor > 0 {
		return w.Guard, w.Crowd, w.Calm
	}
	if s.guard.Factor > 0 {
		return s.guard, s.crowd, w.Values
	}
	return Guard{}, Guard{}, nil
}

// applyGuard applies guard g to the decision's candidates: it returns
// ranking keys in which every over-bound candidate ranks below every
// candidate within the bound (totals minus more than any total can be),
// counts a guarded pick when the best total was over the bound, and
// charges a herd pick to the calm weights' choice when that one is over
// the bound, or over the crowd bound while it shares its prefix with
// other candidates. calm nil: no herd accounting.
func (s *Scheduler) applyGuard(d *Decision, w *Weights, g, crowd Guard, calm []float64) []float64 {
	cands := d.cands
	n := len(cands)
	var sum, capSum, penalty float64
	secs := s.cfg.Guard.seconds()
	if secs {
		d.waits = growFloats(d.waits, n)
		for i, e := range cands {
			d.waits[i] = s.wait(d, e)
			sum += d.waits[i]
		}
		sum /= float64(n) // the mean wait
	} else {
		for _, e := range cands {
			sum += float64(max(e.InFlight(), 0))
			capSum += e.CapacityOrOne()
		}
	}
	over := func(g Guard, i int, e *Endpoint) bool {
		if secs {
			return g.OverSeconds(d.waits[i], sum)
		}
		return g.Over(float64(max(e.InFlight(), 0)), e.CapacityOrOne(), sum, capSum)
	}
	for _, v := range w.Values {
		penalty += v
	}
	penalty++
	d.keys = growFloats(d.keys, n)
	best, calmAt := 0, 0
	// The calm choice's total and affinity part; the top affinity part
	// and how many candidates share it (within eps: scores are sums of
	// the same products, so equal prefixes give equal parts).
	const eps = 1e-9
	var calmBest, calmAff, topAff float64
	holders := 0
	for i, e := range cands {
		d.keys[i] = d.totals[i]
		if d.totals[i] > d.totals[best] {
			best = i
		}
		if calm != nil {
			var t, a float64
			for si, cw := range calm {
				v := cw * d.scores[si*n+i]
				t += v
				if s.affinity[si] {
					a += v
				}
			}
			if i == 0 || t > calmBest {
				calmAt, calmBest, calmAff = i, t, a
			}
			switch {
			case a > topAff+eps:
				topAff, holders = a, 1
			case a > eps && a >= topAff-eps:
				holders++
			}
		}
		if over(g, i, e) {
			d.keys[i] -= penalty
		}
	}
	if d.keys[best] != d.totals[best] {
		s.m.guarded.Inc()
	}
	if calm == nil {
		return d.keys
	}
	e := cands[calmAt]
	herd := d.keys[calmAt] != d.totals[calmAt]
	if !herd && crowd.Factor > 0 && holders >= 2 && calmAff >= topAff-eps {
		herd = over(crowd, calmAt, e)
	}
	if herd {
		e.st.herd.Add(1)
	}
	return d.keys
}

// bytesPerToken converts prompt bytes to tokens where the seconds guard
// has no token count (other replicas' pending prefill, a profile
// without a prefix index): the prefix scorer's default.
const bytesPerToken = 4

// wait returns e's expected wait for the decision's request in seconds,
// the seconds guard's measure: e's pending uncached prompt tokens
// (PendingTokens, plus other replicas' pending bytes ÷ 4) and the
// request's own uncached tokens on e, over e's prefill rate
// (Calibration, else GuardConfig.PrefillTokensPerSecond × capacity).
// Without a match (no prefix index) the tokens are undiscounted
// prompt bytes ÷ 4.
func (s *Scheduler) wait(d *Decision, e *Endpoint) float64 {
	var work int64
	if m, ok := d.cs.Match(e); ok {
		peer := max(e.PendingPrefill()-e.LocalPendingPrefill(), 0)
		work = max(e.PendingTokens(), 0) + peer/bytesPerToken + m.Uncached()
	} else {
		work = (max(e.PendingPrefill(), 0) + int64(len(d.Request.Prompt))) / bytesPerToken
	}
	rate := e.Calibration().PrefillTokensPerSecond
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = s.cfg.Guard.PrefillTokensPerSecond * e.CapacityOrOne()
	}
	return float64(work) / rate
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
