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

// PoolObserver is implemented by scorers that keep per-endpoint state.
// PoolChanged is called with every newly installed pool (off the request
// path, from Scheduler.SetEndpoints) so they can size or purge that state;
// endpoints absent from eps have left the pool. eps must not be retained
// beyond the call except as read-only pointers.
type PoolObserver interface {
	PoolChanged(eps []*Endpoint)
}

// CycleState is per-decision scratch space owned by the scheduler and
// reused across decisions. A scorer may stash what it computed in Score
// (the request's prefix-block hashes, say) in its slot and read it back in
// Picked, so nothing is computed twice or allocated per request.
type CycleState struct {
	slots []any
	cur   int
}

// Slot returns the calling scorer's scratch slot. Only valid inside Score
// and Picked. Store a pointer in it to reuse a buffer across requests: the
// slot keeps its value when the state is recycled.
func (cs *CycleState) Slot() *any { return &cs.slots[cs.cur] }
