package scheduler

import (
	"math"
)

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
// other candidates. calm nil: no herd accounting. Then the wait bound
// (applyWaitBound), when GuardConfig.WaitFactor is set.
func (s *Scheduler) applyGuard(d *Decision, w *Weights, g, crowd Guard, calm []float64) []float64 {
	cands := d.cands
	n := len(cands)
	var sum, capSum, penalty float64
	gc := s.cfg.Guard
	secs := gc.seconds()
	if gc.measuresWaits() {
		d.waits = growFloats(d.waits, n)
		least := math.Inf(1)
		for i, e := range cands {
			w := s.wait(d, e)
			d.waits[i], least = w, min(least, w)
			if secs {
				sum += w
			}
		}
		if gc.WaitFactor > 0 {
			d.waitLimit = max(gc.WaitFactor*least, least+gc.WaitSlack)
		}
		if gc.JoinFactor > 0 {
			d.joinLimit = gc.JoinFactor * least
		}
	}
	if secs {
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
	herdOnly := w.HerdOnly && calm != nil
	if herdOnly {
		d.calmTotals = growFloats(d.calmTotals, n)
	}
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
			if herdOnly {
				d.calmTotals[i] = t
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
		s.applyWaitBound(d)
		return d.keys
	}
	e := cands[calmAt]
	herd := d.keys[calmAt] != d.totals[calmAt]
	if !herd && crowd.Factor > 0 && holders >= 2 && calmAff >= topAff-eps {
		herd = over(crowd, calmAt, e)
	}
	if herd {
		e.st.herd.Add(1)
	} else if herdOnly {
		// Not a herd pick: rank with the calm weights, keeping each
		// candidate's guard penalty.
		for i := range d.keys {
			d.keys[i] = d.calmTotals[i] - (d.totals[i] - d.keys[i])
		}
		d.calm = true
	}
	s.applyWaitBound(d)
	return d.keys
}

// applyWaitBound ranks every candidate over the wait bound — a wait above
// max(WaitFactor × the shortest, the shortest + WaitSlack), d.waitLimit,
// or, for a candidate whose match is a prompt still in its first prefill
// (Match.Joining), above JoinFactor × the shortest, d.joinLimit — after
// every candidate within it (GuardConfig.WaitFactor, JoinFactor),
// whatever the keys so far (the load guard's and, under HerdOnly, the
// calm weights' ranking): it subtracts more than the keys' whole span. It
// runs after the herd accounting, so a pod held by a long prefill is not
// a herd, and it keeps the load guard's keys for Decision.OverBound. It
// counts a wait-bounded pick when the best-ranked candidate before it was
// over waitLimit, a join-spread pick when it was over joinLimit only.
func (s *Scheduler) applyWaitBound(d *Decision) {
	if !d.waitBounded() {
		return
	}
	n := len(d.keys)
	d.guardKeys = growFloats(d.guardKeys, n)
	copy(d.guardKeys, d.keys)
	best, lo := 0, d.keys[0]
	for i, k := range d.keys {
		if k > d.keys[best] {
			best = i
		}
		lo = min(lo, k)
	}
	switch {
	case d.waits[best] > d.waitLimit:
		s.m.waitBounded.Inc()
	case d.overWait(best):
		s.m.joinSpread.Inc()
	}
	span := d.keys[best] - lo + 1
	for i := range d.keys {
		if d.overWait(i) {
			d.keys[i] -= span
		}
	}
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
