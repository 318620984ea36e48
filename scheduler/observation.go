package scheduler

import (
	"sync"
	"sync/atomic"
	"time"
)

// BytesPerToken is the prompt bytes the scheduler counts as one token when
// no MatchProducer measured the prompt (the ≈4 bytes per token of English
// text under BPE tokenizers, as the prefix index assumes by default).
const BytesPerToken = 4

// Usage is what the endpoint's response said of the request's tokens, as
// the proxy found it (the OpenAI usage object) or the simulator knows it.
// Zero fields are unknown.
type Usage struct {
	// PromptTokens is usage.prompt_tokens; 0 when not reported.
	PromptTokens int64
	// CachedTokens is usage.prompt_tokens_details.cached_tokens, the
	// prompt tokens the server found in its prefix cache; meaningful only
	// when CachedReported.
	CachedTokens   int64
	CachedReported bool
	// OutputTokens is usage.completion_tokens; 0 when not reported.
	OutputTokens int64
	// Chunks is the number of token-bearing streamed events the response
	// carried (the proxy counts data events of a chat or completions
	// stream other than [DONE], and content delta events of a Responses
	// or Messages stream); 0 when it was not streamed or they were not
	// counted. An estimate of the output tokens when OutputTokens is 0.
	Chunks int64
}

// Observation is what one finished request tells the control plane about
// its endpoint's speed: how much prefill work was ahead of it and its own,
// how long the first byte and the whole answer took, and what the server
// reported. It is a plain value; Endpoint aliases the pool's address
// string (never modified).
type Observation struct {
	// Endpoint is the address of the endpoint that served the request.
	Endpoint string
	// Arrival is the request's Arrival (zero when the proxy left it unset).
	Arrival time.Time
	// Kind is the outcome's kind.
	Kind OutcomeKind
	// PromptTokens is the router's count of the prompt: the
	// MatchProducer's, or the prompt bytes ÷ BytesPerToken.
	PromptTokens int64
	// UncachedTokens is the prompt tokens the endpoint did not hold by the
	// MatchProducer's answer at the pick; PromptTokens without one.
	UncachedTokens int64
	// QueueTokens is the prefill work this router had pending on the
	// endpoint when the request was sent to it, in tokens: the
	// PendingTokens of the requests still awaiting their first byte when
	// Matched, else their prompt bytes ÷ BytesPerToken (cached prefixes
	// included).
	QueueTokens int64
	// Matched says the token counts above came from a MatchProducer.
	Matched bool
	// InFlight is this router's in-flight requests on the endpoint at the
	// pick, not counting this one.
	InFlight int64
	// Seq is how many picks this router had sent to the endpoint before
	// this one: it orders requests picked at the same Arrival.
	Seq uint64
	// Waiting and KVUtil are the endpoint's scraped waiting requests and
	// KV-cache utilisation at the pick; Scraped says they were fresh
	// (State fresh, ScrapedAt set), else they are zero.
	Waiting, KVUtil float64
	Scraped         bool
	// TTFT and Latency are the outcome's.
	TTFT, Latency time.Duration
	// Usage is what the server reported.
	Usage Usage
}

// ObservationRing is a bounded buffer of Observations between the request
// path (Record, from Decision.Done) and the control plane (Drain). Record
// never waits for the control plane: it holds one mutex for the copy of
// one value, and Drain holds it only to swap buffers. When the buffer is
// full Record drops the observation and counts it. Safe for concurrent
// use.
type ObservationRing struct {
	mu      sync.Mutex
	buf     []Observation
	size    int
	dropped atomic.Uint64
	total   atomic.Uint64
}

// NewObservationRing returns a ring holding up to size observations
// between two Drains (size < 1 is taken as 1).
func NewObservationRing(size int) *ObservationRing {
	size = max(size, 1)
	return &ObservationRing{buf: make([]Observation, 0, size), size: size}
}

// Record adds o, or drops it when the ring is full; it reports whether o
// was kept. Allocation-free.
func (r *ObservationRing) Record(o Observation) bool {
	r.total.Add(1)
	r.mu.Lock()
	if len(r.buf) >= r.size {
		r.mu.Unlock()
		r.dropped.Add(1)
		return false
	}
	r.buf = append(r.buf, o)
	r.mu.Unlock()
	return true
}

// Drain returns the observations recorded since the last Drain, oldest
// first, and keeps spare (emptied) as the buffer for the next ones, so a
// caller that passes back the slice the previous Drain returned allocates
// nothing. The returned slice is the caller's until it passes it back.
func (r *ObservationRing) Drain(spare []Observation) []Observation {
	if cap(spare) < r.size {
		spare = make([]Observation, 0, r.size)
	}
	clear(spare[:cap(spare)])
	r.mu.Lock()
	out := r.buf
	r.buf = spare[:0]
	r.mu.Unlock()
	return out
}

// Dropped returns how many observations Record dropped because the ring
// was full.
func (r *ObservationRing) Dropped() uint64 { return r.dropped.Load() }

// Recorded returns how many observations Record was given, kept or not.
func (r *ObservationRing) Recorded() uint64 { return r.total.Load() }

// ObserveInto makes every later Done record its Observation in ring (nil
// stops it). For wiring, before or while serving: the ring is read through
// an atomic pointer.
func (s *Scheduler) ObserveInto(ring *ObservationRing) { s.obs.Store(ring) }

// markPick records, for the decision's current endpoint just charged with
// it, the work ahead of the request, the in-flight count, the pick's
// ordinal and the scraped state at the pick.
// Called before the request's own tokens and in-flight count are added.
func (d *Decision) markPick() {
	e := d.Endpoint
	d.inflightAt = e.st.inflight.Load()
	d.seq = e.st.picks.Load()
	d.scraped = e.State == StateFresh && !e.ScrapedAt.IsZero()
	d.waiting, d.kv = 0, 0
	if d.scraped {
		d.waiting, d.kv = e.Waiting, e.KVUtil
	}
	if d.cs.matched {
		d.queue = e.st.tokens.Load()
	} else {
		d.queue = e.st.pending.Load() / BytesPerToken
	}
}

// observation builds the Observation Done records.
func (d *Decision) observation(o Outcome) Observation {
	ob := Observation{
		Endpoint:    d.Endpoint.Address,
		Kind:        o.Kind,
		QueueTokens: d.queue,
		InFlight:    d.inflightAt,
		Seq:         d.seq,
		Waiting:     d.waiting,
		KVUtil:      d.kv,
		Scraped:     d.scraped,
		TTFT:        o.TTFT,
		Latency:     o.Latency,
		Usage:       o.Usage,
	}
	if r := d.Request; r != nil {
		ob.Arrival = r.Arrival
		ob.PromptTokens = int64(len(r.Prompt)) / BytesPerToken
		ob.UncachedTokens = ob.PromptTokens
	}
	if m, ok := d.cs.Match(d.Endpoint); ok {
		ob.Matched = true
		ob.PromptTokens, ob.UncachedTokens = m.Prompt, m.Uncached()
	}
	return ob
}
