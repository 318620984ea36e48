package scheduler

// Scorer answers one question for a request: how good is each candidate, in
// [0,1]. Implementations document what 1 and 0 mean and their neutral score.
//
// Score must write out[i] for candidate eps[i], for every i; len(out) ==
// len(eps). It must not fail, block on I/O, or allocate at steady state:
// missing data yields a neutral score. It must be safe for concurrent use.
// The scheduler clamps scores to [0,1] and counts values outside it.
type Scorer interface {
	Category() Category
	Score(cs *CycleState, req *Request, eps []*Endpoint, out []float64)
}

// Filter narrows the candidate list. It appends the endpoints it keeps from
// in to out (which has enough capacity for all of in) and returns out. It
// must not modify in or the endpoints.
type Filter interface {
	Filter(req *Request, in, out []*Endpoint) []*Endpoint
}

// EmptyErrorer is implemented by filters that know why they removed every
// candidate. EmptyError is the error Pick returns when the filter leaves
// none; it must be a sentinel (Pick does not allocate). Filters without
// it mean ErrUnknownModel.
type EmptyErrorer interface {
	EmptyError() error
}

// Picker ranks candidates from their total scores. Rank writes into order
// the indexes of the n best candidates (n ≤ len(order), n ≤ len(totals)),
// best first, and returns n. rnd is a per-request random source derived
// from the scheduler seed, so a picker is deterministic for a seed.
type Picker interface {
	Rank(totals []float64, rnd *Rand, order []int) int
}

// PickObserver is implemented by scorers that learn from decisions (the
// prefix index, in-flight accounting). Picked is called once per decision,
// after the ranking, with the chosen endpoint; cs is the same state Score
// saw for this request.
type PickObserver interface {
	Picked(cs *CycleState, req *Request, chosen *Endpoint)
}

// FirstByteObserver is implemented by scorers that learn when an endpoint
// starts answering (the prefix index records a prompt once the endpoint has
// computed it). FirstByte is called at most once per decision, from
// Decision.FirstByte (or from a successful Done when the first byte was
// never reported), with the endpoint serving the request and the state
// Score saw.
type FirstByteObserver interface {
	FirstByte(cs *CycleState, req *Request, ep *Endpoint)
}

// DoneObserver is implemented by scorers that account for completions.
// Done is called exactly once per decision, from Decision.Done.
type DoneObserver interface {
	Done(req *Request, ep *Endpoint, o Outcome)
}

// SecondsReporter is implemented by scorers whose scores rank an
// estimate in seconds (the time-cost scorer). Seconds returns candidate
// i's estimate, in seconds ≥ 0, as the last Score of this decision
// computed it (read back from the scorer's CycleState slot); ok is false
// when Score left none. Called off the hot path (Decision.Seconds,
// Explain), by the decision's owner, before Done.
type SecondsReporter interface {
	Seconds(cs *CycleState, i int) (seconds float64, ok bool)
}

// PoolObserver is implemented by scorers that keep per-endpoint state.
// PoolChanged is called with every newly installed pool (off the request
// path, from Scheduler.SetEndpoints) so they can size or purge that state;
// endpoints absent from eps have left the pool. eps must not be retained
// beyond the call except as read-only pointers.
type PoolObserver interface {
	PoolChanged(eps []*Endpoint)
}

// StateFilter is implemented by filters that read the decision's
// CycleState (CycleState.Match). Pick calls FilterState instead of Filter;
// the contract is Filter's. cs is read-only to a filter.
type StateFilter interface {
	Filter
	FilterState(cs *CycleState, req *Request, in, out []*Endpoint) []*Endpoint
}

// MatchProducer is implemented by scorers that know how much of a request
// each endpoint already holds (the prefix index). When the profile has a
// MatchConsumer, Pick calls the first producer's Match once per decision,
// before the filters, with every candidate; Match records its answer with
// CycleState.SetMatch, in the producer's own slot context (cs.Slot is
// the producer's). The scheduler then also counts each pick's uncached
// prompt tokens as pending on the chosen endpoint until its first byte
// (Endpoint.PendingTokens). Match must not fail, block or allocate at
// steady state.
type MatchProducer interface {
	Match(cs *CycleState, req *Request, eps []*Endpoint)
}

// MatchConsumer is implemented by filters and scorers that read
// CycleState.Match; its presence in a profile makes Pick run the
// MatchProducer. ConsumesMatch is a marker and is never called on the
// request path.
type MatchConsumer interface {
	ConsumesMatch()
}

// JoinReporter is implemented by MatchProducers that can report
// Match.Joining; ReportsJoins says whether this one is configured to (the
// prefix scorer's join_spread_fill). A scheduler whose guard sets
// GuardConfig.JoinFactor needs one.
type JoinReporter interface {
	ReportsJoins() bool
}

// FillReporter is implemented by scorers that keep an index of what each
// endpoint's prefix cache holds (the prefix scorer). Fill is the mean over
// the pool's endpoints the index knows of the share of what the index can
// hold for each that it holds, in [0,1]; ok is false when it knows none.
// Evictions is how many entries the index has evicted for capacity since
// it started, and how many it can hold in all. The control loop's fill
// law (adaptive.fill) reads both off the request path; they must be safe
// for concurrent use with Score.
type FillReporter interface {
	Fill(pool []*Endpoint) (fill float64, ok bool)
	Evictions() (evicted uint64, capacity int)
}

// Match is what a MatchProducer says of one request on one endpoint, in
// tokens.
type Match struct {
	// Prompt is the request's prompt length in tokens.
	Prompt int64
	// Indexed is how many leading prompt tokens the producer indexes
	// (whole blocks, up to its bound); ≤ Prompt.
	Indexed int64
	// Cached is how many leading prompt tokens the endpoint holds, ≤
	// Indexed.
	Cached int64
	// Joining says the endpoint's match is a prompt picked onto it that
	// has not answered yet — its first prefill is queued or running, so
	// this request would wait for it — while the candidates' caches have
	// room for another copy (the prefix scorer's join_spread_fill and
	// join_kv_util). The
	// wait bound's GuardConfig.JoinFactor ranks such a candidate after
	// the others when its wait is long.
	Joining bool
}

// Ratio returns Cached ÷ Indexed, the share of the indexed prompt the
// endpoint holds, in [0,1]; 0 when nothing is indexed.
func (m Match) Ratio() float64 {
	if m.Indexed <= 0 {
		return 0
	}
	return float64(m.Cached) / float64(m.Indexed)
}

// Uncached returns the prompt tokens the endpoint would have to compute,
// Prompt − Cached, at least 0.
func (m Match) Uncached() int64 { return max(m.Prompt-m.Cached, 0) }

// CycleState is per-decision scratch space owned by the scheduler and
// reused across decisions. A scorer may stash what it computed in Score
// (the request's prefix-block hashes, say) in its slot and read it back in
// Picked, so nothing is computed twice or allocated per request. It also
// carries the MatchProducer's answer for the decision (Match).
type CycleState struct {
	slots []any
	cur   int

	// The MatchProducer's answer: prompt and indexed tokens, and per pool
	// endpoint (Endpoint.idx) the cached tokens. matched false: none.
	matched         bool
	prompt, indexed int64
	cached          []int64
	joining         []bool

	// affinityCut is 1 − AffinityScale for this decision (the zero
	// state reads as calm).
	affinityCut float64
}

// AffinityScale is the affinity scorers' share of the weights in force
// over their share of the calm weights (Weights.Calm), in [0,1]: 1 while
// the loop is calm, in static mode and without a calm vector; towards
// d_max's floor as the loop moves weight to distribution. A scorer that
// weighs affinity inside its own score (time-cost's cache_credit) scales
// that part by it, so the loop's trade reaches it too.
func (cs *CycleState) AffinityScale() float64 { return 1 - cs.affinityCut }

// affinityScale computes AffinityScale for w; aff[i] says whether scorer
// i is an affinity scorer.
func affinityScale(w *Weights, aff []bool) float64 {
	if w == nil || len(w.Calm) != len(w.Values) || len(aff) != len(w.Values) {
		return 1
	}
	var a, t, ca, ct float64
	for i, v := range w.Values {
		t += v
		ct += w.Calm[i]
		if aff[i] {
			a += v
			ca += w.Calm[i]
		}
	}
	if !(t > 0 && ct > 0 && ca > 0) {
		return 1
	}
	r := (a / t) / (ca / ct)
	if !(r >= 0) {
		return 1
	}
	return min(r, 1)
}

// Slot returns the calling scorer's scratch slot. Only valid inside Score
// and Picked. Store a pointer in it to reuse a buffer across requests: the
// slot keeps its value when the state is recycled.
func (cs *CycleState) Slot() *any { return &cs.slots[cs.cur] }

// SetMatch records the request's prompt and indexed lengths in tokens;
// called by a MatchProducer in Match, before SetCached.
func (cs *CycleState) SetMatch(prompt, indexed int64) {
	cs.matched = true
	cs.prompt, cs.indexed = max(prompt, 0), min(max(indexed, 0), max(prompt, 0))
	clear(cs.cached)
	clear(cs.joining)
}

// SetCached records how many leading prompt tokens e holds (clamped to
// the indexed length); called by a MatchProducer in Match. Endpoints not
// set hold none.
func (cs *CycleState) SetCached(e *Endpoint, tokens int64) {
	if i := int(e.idx); i >= 0 && i < len(cs.cached) {
		cs.cached[i] = min(max(tokens, 0), cs.indexed)
	}
}

// SetJoining marks e's match as a prompt still in its first prefill there
// (Match.Joining); called by a MatchProducer in Match, after SetMatch.
func (cs *CycleState) SetJoining(e *Endpoint) {
	if i := int(e.idx); i >= 0 && i < len(cs.joining) {
		cs.joining[i] = true
	}
}

// Match returns the MatchProducer's answer for e in this decision; ok is
// false when no producer ran (the profile has none, or no consumer).
func (cs *CycleState) Match(e *Endpoint) (m Match, ok bool) {
	if !cs.matched {
		return Match{}, false
	}
	m = Match{Prompt: cs.prompt, Indexed: cs.indexed}
	if i := int(e.idx); i >= 0 && i < len(cs.cached) {
		m.Cached = cs.cached[i]
	}
	if i := int(e.idx); i >= 0 && i < len(cs.joining) {
		m.Joining = cs.joining[i]
	}
	return m, true
}
