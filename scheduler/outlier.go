package scheduler

import (
	"fmt"
	"time"
)

// OutlierConfig is outlier ejection, in the spirit of Envoy's outlier
// detection: an endpoint whose requests fail ConsecutiveFailures times in a
// row (an error outcome, a 5xx or a 429 answer, or a failure before the
// answer that moved the request to a fallback) is left out of picks for an
// ejection time. The first ejection lasts BaseEjection; each further one
// that follows within MaxEjection of the previous one's end lasts one
// BaseEjection longer, up to MaxEjection.
//
// An ejection ends early on evidence of health, as Envoy's active health
// checking unejects a host: when the endpoint's server answers a scrape
// again after failing to (Endpoint.RecoveredAt later than the ejection's
// start; a server that answered its scrapes all along gives no such
// evidence), the endpoint is half-open from the next pool update on. It
// then takes one trial request at a time (HalfOpenTrials in flight from
// this router). A trial that succeeds readmits it; one that fails ejects it
// again, one BaseEjection longer, and only a later recovery opens it
// again. Requests sent before it went half-open are not trials. At most MaxEjectedPercent of the
// pool is ejected at once, but always at least one endpoint of a pool of
// two or more, and never the last one: a pool of one is never ejected. If
// every candidate of a request is ejected (its model is served only by
// ejected endpoints), they are all kept: a guess is better than a refusal.
type OutlierConfig struct {
	// ConsecutiveFailures ejects an endpoint after this many failures in a
	// row (default 5, Envoy's consecutive_5xx); 0 turns ejection off.
	ConsecutiveFailures int `mapstructure:"consecutive_failures"`
	// BaseEjection is how long a first ejection lasts (default 30s, Envoy's
	// base_ejection_time).
	BaseEjection time.Duration `mapstructure:"base_ejection"`
	// MaxEjection caps the ejection time (default 5m, Envoy's
	// max_ejection_time). An endpoint that stays in for MaxEjection after
	// an ejection starts again at BaseEjection.
	MaxEjection time.Duration `mapstructure:"max_ejection"`
	// MaxEjectedPercent is the share of the pool that may be ejected at
	// once, in percent (default 50). Inference pools are small, so Envoy's
	// 10% would mean one endpoint in a pool of up to 19; beyond half, the
	// endpoints left would carry more than twice their load, and many
	// endpoints failing together points at a shared cause (the model, the
	// requests) that ejection cannot fix.
	MaxEjectedPercent int `mapstructure:"max_ejected_percent"`
}

// DefaultOutlierConfig returns the defaults: 5 failures, 30s, 5m, 50%.
func DefaultOutlierConfig() OutlierConfig {
	return OutlierConfig{ConsecutiveFailures: 5, BaseEjection: 30 * time.Second, MaxEjection: 5 * time.Minute, MaxEjectedPercent: 50}
}

// Validate checks the config; errors name the field under outlier.
func (c OutlierConfig) Validate() error {
	if c.ConsecutiveFailures < 0 || c.ConsecutiveFailures > 1000 {
		return fmt.Errorf("outlier.consecutive_failures: %d, want 0 (off) … 1000", c.ConsecutiveFailures)
	}
	if c.ConsecutiveFailures == 0 {
		return nil
	}
	if c.BaseEjection < time.Second {
		return fmt.Errorf("outlier.base_ejection: %v, want at least 1s", c.BaseEjection)
	}
	if c.MaxEjection < c.BaseEjection {
		return fmt.Errorf("outlier.max_ejection: %v is shorter than outlier.base_ejection %v", c.MaxEjection, c.BaseEjection)
	}
	if c.MaxEjection > 24*time.Hour {
		return fmt.Errorf("outlier.max_ejection: %v, want at most 24h", c.MaxEjection)
	}
	if c.MaxEjectedPercent < 1 || c.MaxEjectedPercent > 100 {
		return fmt.Errorf("outlier.max_ejected_percent: %d, want 1 … 100", c.MaxEjectedPercent)
	}
	return nil
}

// HalfOpenTrials is how many requests from this router a half-open
// endpoint takes at once: one, as a circuit breaker's half-open state
// lets one request through (Hystrix, Polly).
const HalfOpenTrials = 1

// EjectedUntil returns when the endpoint's current ejection ends, the zero
// time when it is in service. A time at or before now means the ejection
// is over and the next pick restores it.
func (e *Endpoint) EjectedUntil() time.Time {
	if e.st == nil {
		return time.Time{}
	}
	if u := e.st.until.Load(); u != 0 {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// Ejected reports whether the endpoint is ejected at now.
func (e *Endpoint) Ejected(now time.Time) bool {
	return e.st != nil && ejectedAt(e.st.until.Load(), now.UnixNano())
}

// Ejections returns how many times the endpoint was ejected since this
// router first saw its address.
func (e *Endpoint) Ejections() uint64 {
	if e.st == nil {
		return 0
	}
	return e.st.ejections.Load()
}

// ConsecutiveFailures returns the endpoint's failures since its last
// success, ejection or refused ejection.
func (e *Endpoint) ConsecutiveFailures() int {
	if e.st == nil {
		return 0
	}
	return int(e.st.fails.Load())
}

func ejectedAt(until, now int64) bool { return until != 0 && now < until }

// failed reports whether an outcome counts against the endpoint.
func failed(o Outcome) bool {
	return o.Kind == OutcomeError || o.Status == 429 || o.Status >= 500
}

// now is the outlier detector's time for a request: its arrival (so the
// simulator's virtual time drives ejection too), or the clock's when the
// caller left Arrival unset.
func (s *Scheduler) now(arrival time.Time) time.Time {
	if arrival.IsZero() {
		return s.clk.Now()
	}
	return arrival
}

// observe feeds an outcome of a request to e into outlier detection. The
// success path is one atomic load; only failures read the clock, and only
// reaching the threshold takes the ejection lock.
func (s *Scheduler) observe(e *Endpoint, req *Request, o Outcome) {
	oc := &s.cfg.Outlier
	if oc.ConsecutiveFailures == 0 {
		return
	}
	st := e.st
	if !failed(o) {
		if o.Kind == OutcomeSuccess {
			if st.fails.Load() != 0 {
				st.fails.Store(0)
			}
			if h := st.half.Load(); h != 0 && s.now(req.Arrival).UnixNano() >= h {
				s.readmit(e)
			}
		}
		return
	}
	now := s.now(req.Arrival).Add(o.Latency).UnixNano()
	if h := st.half.Load(); h != 0 {
		if s.now(req.Arrival).UnixNano() >= h {
			s.reeject(e, now)
		}
		return // sent before the endpoint went half-open
	}
	if u := st.until.Load(); u != 0 {
		if now < u {
			return // requests sent before the ejection do not count again
		}
		s.restore(st, u)
	}
	if st.fails.Add(1) >= int32(oc.ConsecutiveFailures) {
		s.eject(e, now)
	}
}

// eject takes e out of picks, unless the cap refuses it.
func (s *Scheduler) eject(e *Endpoint, now int64) {
	oc := &s.cfg.Outlier
	st := e.st
	s.ejMu.Lock()
	defer s.ejMu.Unlock()
	if st.until.Load() != 0 || st.fails.Load() < int32(oc.ConsecutiveFailures) {
		return // ejected or reset meanwhile
	}
	st.fails.Store(0)
	pool := s.pool.Load()
	n, ejected, in := len(pool.ptrs), 0, false
	for _, p := range pool.ptrs {
		in = in || p.st == st
		if ejectedAt(p.st.until.Load(), now) {
			ejected++
		}
	}
	if !in {
		return // left the pool
	}
	allowed := min(max(n*oc.MaxEjectedPercent/100, 1), n-1)
	if ejected >= allowed {
		s.m.ejectionsRefused.Inc()
		s.log.Debug("endpoint failing, but not ejected: the ejection cap is reached",
			"endpoint", e.Address, "failures", oc.ConsecutiveFailures, "ejected", ejected, "pool", n)
		return
	}
	if st.lastEnd != 0 && now-st.lastEnd < int64(oc.MaxEjection) {
		st.streak++
	} else {
		st.streak = 1
	}
	d := min(time.Duration(st.streak)*oc.BaseEjection, oc.MaxEjection)
	st.since, st.lastEnd = now, now+int64(d)
	st.until.Store(st.lastEnd)
	st.ejections.Add(1)
	s.recount(pool)
	s.log.Warn("endpoint ejected after consecutive failures", "endpoint", e.Address,
		"failures", oc.ConsecutiveFailures, "for", d, "ejections", st.ejections.Load())
}

// halfOpen makes the ejected endpoints of pool whose servers answered a
// scrape again since their ejection began half-open. The caller holds
// ejMu.
func (s *Scheduler) halfOpen(pool *Pool) {
	for _, e := range pool.ptrs {
		st := e.st
		if e.RecoveredAt.IsZero() || st.until.Load() == 0 || st.half.Load() != 0 {
			continue
		}
		if r := e.RecoveredAt.UnixNano(); r > st.since {
			st.half.Store(r)
			s.log.Info("ejected endpoint answers again: half-open, sending it a trial request",
				"endpoint", e.Address, "recovered_at", e.RecoveredAt)
		}
	}
}

// readmit ends a half-open endpoint's ejection after a successful trial.
func (s *Scheduler) readmit(e *Endpoint) {
	st := e.st
	s.ejMu.Lock()
	defer s.ejMu.Unlock()
	if st.half.Load() == 0 {
		return // readmitted or ejected again meanwhile
	}
	st.until.Store(0)
	st.half.Store(0)
	st.fails.Store(0)
	s.recount(s.pool.Load())
	s.log.Info("endpoint readmitted after a successful trial request", "endpoint", e.Address)
}

// reeject ejects a half-open endpoint again after a failed trial, one
// BaseEjection longer than its last ejection.
func (s *Scheduler) reeject(e *Endpoint, now int64) {
	oc := &s.cfg.Outlier
	st := e.st
	s.ejMu.Lock()
	defer s.ejMu.Unlock()
	if st.half.Load() == 0 {
		return // readmitted or ejected again meanwhile
	}
	st.streak++
	d := min(time.Duration(st.streak)*oc.BaseEjection, oc.MaxEjection)
	st.since, st.lastEnd = now, now+int64(d)
	st.until.Store(st.lastEnd)
	st.half.Store(0)
	st.fails.Store(0)
	st.ejections.Add(1)
	s.recount(s.pool.Load())
	s.log.Warn("half-open endpoint failed its trial request: ejected again", "endpoint", e.Address,
		"for", d, "ejections", st.ejections.Load())
}

// restore puts an endpoint whose ejection (ending at until) is over back
// in service.
func (s *Scheduler) restore(st *endpointState, until int64) {
	s.ejMu.Lock()
	defer s.ejMu.Unlock()
	if st.until.CompareAndSwap(until, 0) {
		st.half.Store(0)
		st.fails.Store(0)
		s.recount(s.pool.Load())
	}
}

// recount sets the hint Pick reads to skip the ejection check: how many of
// pool's endpoints are ejected or have an ejection not yet restored. The
// caller holds ejMu.
func (s *Scheduler) recount(pool *Pool) {
	var n int32
	for _, p := range pool.ptrs {
		if p.st.until.Load() != 0 {
			n++
		}
	}
	s.ejected.Store(n)
}

// dropEjected removes ejected candidates but half-open ones with a free
// trial slot, and restores those whose ejection is over. When every
// candidate is ejected it keeps them all.
func (s *Scheduler) dropEjected(req *Request, cands, spare []*Endpoint) ([]*Endpoint, []*Endpoint) {
	now := s.now(req.Arrival).UnixNano()
	out := spare[:0]
	for _, e := range cands {
		u := e.st.until.Load()
		if u != 0 {
			if now < u {
				if e.st.half.Load() == 0 || e.st.inflight.Load() >= HalfOpenTrials {
					continue
				}
			} else {
				s.restore(e.st, u)
			}
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return cands, out
	}
	return out, cands[:0]
}

// HalfOpen reports whether the endpoint is ejected but, its server having
// answered a scrape again since, takes trial requests.
func (e *Endpoint) HalfOpen() bool {
	return e.st != nil && e.st.half.Load() != 0 && e.st.until.Load() != 0
}
