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
// BaseEjection longer, up to MaxEjection. At most MaxEjectedPercent of the
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
		if o.Kind == OutcomeSuccess && st.fails.Load() != 0 {
			st.fails.Store(0)
		}
		return
	}
	now := s.now(req.Arrival).Add(o.Latency).UnixNano()
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
	st.lastEnd = now + int64(d)
	st.until.Store(st.lastEnd)
	st.ejections.Add(1)
	s.recount(pool)
	s.log.Warn("endpoint ejected after consecutive failures", "endpoint", e.Address,
		"failures", oc.ConsecutiveFailures, "for", d, "ejections", st.ejections.Load())
}

// restore puts an endpoint whose ejection (ending at until) is over back
// in service.
func (s *Scheduler) restore(st *endpointState, until int64) {
	s.ejMu.Lock()
	defer s.ejMu.Unlock()
	if st.until.CompareAndSwap(until, 0) {
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

// dropEjected removes ejected candidates, restoring those whose ejection is
// over. When every candidate is ejected it keeps them all.
func (s *Scheduler) dropEjected(req *Request, cands, spare []*Endpoint) ([]*Endpoint, []*Endpoint) {
	now := s.now(req.Arrival).UnixNano()
	out := spare[:0]
	for _, e := range cands {
		u := e.st.until.Load()
		if u != 0 {
			if now < u {
				continue
			}
			s.restore(e.st, u)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return cands, out
	}
	return out, cands[:0]
}
