package scheduler

import (
	"math"
	"sync/atomic"
)

// Decision is the outcome of one Pick: the chosen endpoint, ordered
// fallbacks, and every scorer's score for every candidate, so the choice
// can be explained. It is pooled: the caller owns it from Pick until Done.
type Decision struct {
	// Request is the request the decision was made for.
	Request *Request
	// Endpoint is the endpoint the request is (now) routed to.
	Endpoint *Endpoint
	// Weights are the weights the decision was scored with.
	Weights *Weights

	s      *Scheduler
	cs     CycleState
	cands  []*Endpoint
	spare  []*Endpoint
	scores []float64 // scorer-major: scores[s*n+i]
	totals []float64
	keys   []float64 // ranking keys when the guard is on (totals minus penalties)
	waits  []float64 // expected waits (GuardConfig.Unit seconds, or the wait bound on)
	// waitLimit is the wait bound's limit at this pick (+Inf: off),
	// joinLimit its limit for a candidate whose match is still in its
	// first prefill (Match.Joining; +Inf: off), and guardKeys the ranking
	// keys before it ranked the candidates over them last (valid while
	// waitBounded).
	waitLimit float64
	joinLimit float64
	guardKeys []float64
	order     []int // candidate indexes, best first; order[0] chosen
	at        int   // index in order of the current endpoint
	rnd       Rand  // per-decision random source (here so it does not escape per call)
	// guarded says the pick ran under a guard (the weights' or the
	// scheduler's); keys then hold the ranking keys.
	guarded bool
	// calm says the pick was ranked with the calm weights (Weights.HerdOnly
	// and not a herd pick); calmTotals hold their totals then.
	calm       bool
	calmTotals []float64
	// probed says the pick was a calibration probe (Probed).
	probed bool
	// prefill is the prompt bytes counted as pending prefill on Endpoint
	// until the first byte; firstByte says they were released.
	prefill int64
	// tokens is the uncached prompt tokens counted on Endpoint
	// (PendingTokens) until the first byte; 0 without a MatchProducer.
	tokens int64
	// queue and inflightAt are the endpoint's pending work (tokens) and
	// in-flight count at the pick, before this request (Observation).
	queue, inflightAt int64
	firstByte         atomic.Bool
	done              atomic.Bool

	// seq, waiting, kv and scraped are the endpoint's pick ordinal and
	// scraped state at the pick (Observation).
	seq         uint64
	waiting, kv float64
	scraped     bool
}

func (s *Scheduler) newDecision() *Decision {
	return &Decision{s: s, cs: CycleState{slots: make([]any, len(s.entries))}}
}

func (d *Decision) reset(req *Request, w *Weights, n int) {
	d.Request, d.Weights = req, w
	d.guarded, d.calm, d.probed = false, false, false
	d.waitLimit, d.joinLimit = math.Inf(1), math.Inf(1)
	d.done.Store(false)
	d.firstByte.Store(false)
	d.prefill = int64(len(req.Prompt))
	d.tokens = 0
	d.cs.matched = false
	d.cs.affinityCut = 1 - affinityScale(w, d.s.affinity)
	if cap(d.cs.cached) < n {
		d.cs.cached = make([]int64, n)
	}
	d.cs.cached = d.cs.cached[:n]
	if cap(d.cs.joining) < n {
		d.cs.joining = make([]bool, n)
	}
	d.cs.joining = d.cs.joining[:n]
	if cap(d.cands) < n {
		d.cands = make([]*Endpoint, 0, n)
		d.spare = make([]*Endpoint, 0, n)
	}
	if cap(d.order) < 1+d.s.cfg.MaxFallbacks {
		d.order = make([]int, 1+d.s.cfg.MaxFallbacks)
	}
	d.order = d.order[:cap(d.order)]
}

// Candidates returns the endpoints that passed the filters, in the order
// the scores refer to. Valid until Done.
func (d *Decision) Candidates() []*Endpoint { return d.cands }

// Score returns scorer s's score (index in the profile) for candidate i.
func (d *Decision) Score(s, i int) float64 { return d.scores[s*len(d.cands)+i] }

// Total returns candidate i's weighted total score.
func (d *Decision) Total(i int) float64 { return d.totals[i] }

// OverBound reports whether candidate i was over the guard's bound (and so
// ranked after the candidates within it); always false without a guard.
func (d *Decision) OverBound(i int) bool {
	if !d.guarded || i >= len(d.keys) {
		return false
	}
	keys := d.keys
	if d.waitBounded() {
		keys = d.guardKeys // the wait bound's ranking is OverWait's
	}
	if d.calm {
		return keys[i] != d.calmTotals[i]
	}
	return keys[i] != d.totals[i]
}

// RankedCalm reports whether the pick was ranked with the calm weights
// (Weights.Calm) rather than Weights.Values: under Weights.HerdOnly, a
// request whose calm choice was within the bounds.
func (d *Decision) RankedCalm() bool { return d.calm }

// Seconds returns scorer s's estimate in seconds for candidate i when
// the scorer is a SecondsReporter (the time-cost scorer); ok is false
// otherwise. Valid until Done.
func (d *Decision) Seconds(s, i int) (seconds float64, ok bool) {
	r, isR := d.s.entries[s].Scorer.(SecondsReporter)
	if !isR || i < 0 || i >= len(d.cands) {
		return 0, false
	}
	d.cs.cur = s
	return r.Seconds(&d.cs, i)
}

// GuardWait returns candidate i's expected wait in seconds as the guard
// measured it; ok is false unless the pick ran under a guard in the
// seconds unit or with the wait bound on (GuardConfig.WaitFactor). Valid
// until Done.
func (d *Decision) GuardWait(i int) (seconds float64, ok bool) {
	if !d.guarded || !d.s.cfg.Guard.measuresWaits() || i < 0 || i >= len(d.waits) {
		return 0, false
	}
	return d.waits[i], true
}

// OverWait reports whether candidate i was over the wait bound
// (GuardConfig.WaitFactor, or JoinFactor for a candidate whose match is
// still in its first prefill) and so ranked after the candidates within
// it.
func (d *Decision) OverWait(i int) bool {
	return d.guarded && i >= 0 && i < len(d.waits) && d.overWait(i)
}

// waitBounded reports whether the wait bound ran at this pick.
func (d *Decision) waitBounded() bool {
	return !math.IsInf(d.waitLimit, 1) || !math.IsInf(d.joinLimit, 1)
}

// overWait reports whether candidate i's wait is over the wait bound: over
// waitLimit, or over joinLimit while its match is a prompt still in its
// first prefill (Match.Joining).
func (d *Decision) overWait(i int) bool {
	if d.waits[i] > d.waitLimit {
		return true
	}
	if d.waits[i] > d.joinLimit {
		m, ok := d.cs.Match(d.cands[i])
		return ok && m.Joining
	}
	return false
}

// Uncached returns the prompt tokens of the request its current endpoint
// did not hold at the pick, by the profile's MatchProducer (the prefix
// index): what that endpoint must prefill. ok is false when no
// MatchProducer answered for the endpoint. Valid until Done.
func (d *Decision) Uncached() (tokens int64, ok bool) {
	m, ok := d.cs.Match(d.Endpoint)
	if !ok {
		return 0, false
	}
	return m.Uncached(), true
}

// Ranked returns the number of ranked candidates (chosen plus fallbacks).
func (d *Decision) Ranked() int { return len(d.order) }

// RankedEndpoint returns the r-th ranked candidate (0 is the first choice).
func (d *Decision) RankedEndpoint(r int) *Endpoint { return d.cands[d.order[r]] }

// RankedIndex returns the candidate index of the r-th ranked candidate.
func (d *Decision) RankedIndex(r int) int { return d.order[r] }

// Fallbacks returns how many ranked endpoints remain after the current one.
func (d *Decision) Fallbacks() int { return len(d.order) - 1 - d.at }

// Advance moves the request to the next fallback endpoint, for a retry
// after the current endpoint failed before answering: the failure counts
// towards the current endpoint's outlier ejection, the in-flight count
// moves with it and learning scorers are told. It returns false (and keeps
// the current endpoint, whose failure Done reports) when no fallback is
// left.
func (d *Decision) Advance() bool {
	if d.at+1 >= len(d.order) {
		return false
	}
	d.s.observe(d.Endpoint, d.Request, Outcome{Kind: OutcomeError})
	d.at++
	d.move(d.cands[d.order[d.at]])
	return true
}

// MoveTo credits the request to the candidate at addr, for a gateway that
// reports it served the request from another endpoint than the current one
// (after its own retry along the fallbacks): the in-flight count and, before
// the first byte, the pending prefill move with it, Done reports the
// outcome for it, and learning scorers are told. A ranked endpoint becomes
// the current rank, so Fallbacks counts from it. It returns false, and
// keeps the current endpoint, when addr is not one of the decision's
// candidates; true when it is (also when it is already the current one).
func (d *Decision) MoveTo(addr string) bool {
	if d.Endpoint.Address == addr {
		return true
	}
	for r, i := range d.order {
		if d.cands[i].Address == addr {
			d.at = r
			d.move(d.cands[i])
			return true
		}
	}
	for _, e := range d.cands {
		if e.Address == addr {
			d.move(e)
			return true
		}
	}
	return false
}

// move shifts the request's accounting from d.Endpoint to e.
func (d *Decision) move(e *Endpoint) {
	prefill := !d.firstByte.Load()
	d.Endpoint.st.inflight.Add(-1)
	if prefill {
		d.Endpoint.st.pending.Add(-d.prefill)
	}
	d.Endpoint.st.tokens.Add(-d.tokens)
	d.tokens = 0
	d.Endpoint = e
	d.markPick()
	e.st.inflight.Add(1)
	e.st.picks.Add(1)
	if prefill {
		e.st.pending.Add(d.prefill)
	}
	d.chargeTokens(prefill)
	s := d.s
	for _, si := range s.pickObs {
		d.cs.cur = si
		s.entries[si].Scorer.(PickObserver).Picked(&d.cs, d.Request, e)
	}
}

// chargeTokens adds the request's KV tokens to its endpoint's picked
// tokens, like its pick to Picks — its uncached tokens by the
// MatchProducer's answer when one ran, else its prompt bytes ÷
// BytesPerToken — and, while its prompt is pending (prefill), counts the
// uncached tokens as the endpoint's pending tokens.
func (d *Decision) chargeTokens(prefill bool) {
	kv := d.prefill / BytesPerToken
	if m, ok := d.cs.Match(d.Endpoint); ok {
		kv = m.Uncached()
		if prefill {
			d.tokens = kv
			d.Endpoint.st.tokens.Add(kv)
		}
	}
	d.Endpoint.st.picked.Add(uint64(max(kv, 0)))
}

// FirstByte records that the first byte of the endpoint's response reached
// the router: the request's prompt no longer counts as pending prefill on
// the endpoint (Endpoint.PendingPrefill). Only the first call counts; Done
// releases the prompt itself when FirstByte was never called.
func (d *Decision) FirstByte() { d.firstByteSeen(true) }

// firstByteSeen releases the pending prefill once and, when answered,
// tells the FirstByteObserver scorers that the endpoint computed the
// prompt.
func (d *Decision) firstByteSeen(answered bool) {
	if d.firstByte.Swap(true) {
		return
	}
	d.Endpoint.st.pending.Add(-d.prefill)
	d.Endpoint.st.tokens.Add(-d.tokens)
	d.tokens = 0
	if !answered {
		return
	}
	s := d.s
	for _, si := range s.fbObs {
		d.cs.cur = si
		s.entries[si].Scorer.(FirstByteObserver).FirstByte(&d.cs, d.Request, d.Endpoint)
	}
}

// Done records how the request ended: it releases the in-flight count,
// tells completion-aware scorers and recycles the decision. It must be
// called exactly once. Done recycles d, so the caller must drop every
// reference to d when it calls Done: a second call that races the first is
// ignored, but one made after d was handed to another request would finish
// that request instead.
func (d *Decision) Done(o Outcome) {
	if d.done.Swap(true) {
		return
	}
	s := d.s
	// A request that ended without a first byte stands for one only when
	// it succeeded (a proxy that did not report it); a failed one may not
	// have been computed at all.
	d.firstByteSeen(o.Kind == OutcomeSuccess)
	d.Endpoint.st.inflight.Add(-1)
	s.observe(d.Endpoint, d.Request, o)
	if ring := s.obs.Load(); ring != nil {
		ring.Record(d.observation(o))
	}
	for _, si := range s.doneObs {
		s.entries[si].Scorer.(DoneObserver).Done(d.Request, d.Endpoint, o)
	}
	s.m.outcome(o.Kind)
	s.release(d)
}

// Explanation is a self-contained, JSON-ready account of a decision.
type Explanation struct {
	RequestID      string             `json:"request_id,omitempty"`
	Model          string             `json:"model,omitempty"`
	SessionID      string             `json:"session_id,omitempty"`
	Chosen         string             `json:"chosen"`
	Fallbacks      []string           `json:"fallbacks,omitempty"`
	WeightsVersion uint64             `json:"weights_version"`
	Mode           string             `json:"mode"`
	Weights        map[string]float64 `json:"weights"`
	// RankedCalm: the candidates were ranked with the calm weights, not
	// Weights — the loop rebalances only herd picks
	// (adaptive.rebalance_scope: herd) and this was not one.
	RankedCalm bool `json:"ranked_calm,omitempty"`
	// Probe: the request was sent to an idle endpoint whose calibration
	// wanted observations, not to the best-ranked candidate
	// (scheduler.probe); the ranking it displaced follows as fallbacks.
	Probe      bool             `json:"probe,omitempty"`
	Candidates []CandidateScore `json:"candidates"`
}

// CandidateScore is one candidate's scores in an Explanation.
type CandidateScore struct {
	Address string             `json:"address"`
	Total   float64            `json:"total"`
	Scores  map[string]float64 `json:"scores"`
	// Seconds holds, per scorer that estimates seconds (the time-cost
	// scorer), its estimate for the candidate: the expected seconds
	// until the request's first token there.
	Seconds map[string]float64 `json:"seconds,omitempty"`
	// GuardWaitSeconds is the candidate's expected wait as a guard in
	// the seconds unit, or the wait bound, measured it (absent
	// otherwise).
	GuardWaitSeconds *float64 `json:"guard_wait_seconds,omitempty"`
	// OverWait: the wait bound ranked the candidate after those within
	// it (its expected wait was far above the shortest, or above
	// join_factor × the shortest while Joining).
	OverWait bool `json:"over_wait,omitempty"`
	// Joining: the candidate's match is a prompt still in its first
	// prefill there (Match.Joining), so the request would wait for it.
	Joining bool `json:"joining,omitempty"`
	// OverBound: the guard ranked the candidate after those within its
	// bound.
	OverBound bool `json:"over_bound,omitempty"`
}

// Explain copies the decision into an Explanation. It allocates; call it
// off the hot path (debug endpoints, opt-in headers), before Done.
func (d *Decision) Explain() Explanation {
	ents := d.s.entries
	x := Explanation{
		Chosen:         d.Endpoint.Address,
		WeightsVersion: d.Weights.Version,
		Mode:           d.Weights.Mode,
		RankedCalm:     d.calm,
		Probe:          d.probed,
		Weights:        make(map[string]float64, len(ents)),
		Candidates:     make([]CandidateScore, len(d.cands)),
	}
	if r := d.Request; r != nil {
		x.RequestID, x.Model, x.SessionID = r.ID, r.Model, r.SessionID
	}
	for si, e := range ents {
		x.Weights[e.Name] = d.Weights.Values[si]
	}
	for r := d.at + 1; r < len(d.order); r++ {
		x.Fallbacks = append(x.Fallbacks, d.RankedEndpoint(r).Address)
	}
	for i, c := range d.cands {
		cs := CandidateScore{Address: c.Address, Total: d.totals[i], Scores: make(map[string]float64, len(ents)), OverBound: d.OverBound(i)}
		for si, e := range ents {
			cs.Scores[e.Name] = d.Score(si, i)
			if v, ok := d.Seconds(si, i); ok {
				if cs.Seconds == nil {
					cs.Seconds = make(map[string]float64, 1)
				}
				cs.Seconds[e.Name] = v
			}
		}
		if w, ok := d.GuardWait(i); ok {
			cs.GuardWaitSeconds = &w
		}
		cs.OverWait = d.OverWait(i)
		if m, ok := d.cs.Match(c); ok {
			cs.Joining = m.Joining
		}
		x.Candidates[i] = cs
	}
	return x
}
