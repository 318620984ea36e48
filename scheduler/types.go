package scheduler

import (
	"sync/atomic"
	"time"
)

// Category says which budget a scorer's weight belongs to when the
// configurator rebalances weights.
type Category uint8

const (
	// CategoryNone scorers keep their profile weight; the configurator
	// never touches them.
	CategoryNone Category = iota
	// CategoryAffinity scorers prefer endpoints that already hold state for
	// the request (prefix cache, session, LoRA adapter).
	CategoryAffinity
	// CategoryDistribution scorers prefer idle endpoints (queue depth, KV
	// utilisation, in-flight requests).
	CategoryDistribution
)

// String returns "none", "affinity" or "distribution".
func (c Category) String() string {
	switch c {
	case CategoryAffinity:
		return "affinity"
	case CategoryDistribution:
		return "distribution"
	default:
		return "none"
	}
}

// Request is what the scheduler knows about one inference request. The
// proxy fills it once per request; the scheduler and scorers only read it.
type Request struct {
	// ID identifies the request in logs and decisions. When set it also
	// seeds the picker's tie-break, so the same request with the same
	// scheduler seed gets the same decision on every replica.
	ID string
	// Model is the base model the request must be served by ("" matches
	// any endpoint).
	Model string
	// LoRA is the adapter the request asks for, "" for the base model.
	LoRA string
	// Prompt is the prompt as bytes. For chat requests it is a canonical
	// rendering of the messages so that a shared system prompt and shared
	// earlier turns become shared leading bytes. The scheduler never
	// modifies it.
	Prompt []byte
	// SessionID is the sticky-session key ("" when the client sent none).
	SessionID string
	// SessionKey is the session key derived from the conversation's
	// lineage when the client sent no session id (0: none): the proxy sets
	// it from a Responses continuation's previous_response_id, or from the
	// conversation's root (its scaffold and first turn, LineageKey). The
	// session scorer uses SessionID's hash (SessionIDKey) when SessionID is
	// set, else SessionKey.
	SessionKey uint64
	// CacheSalt isolates prefix-cache sharing between tenants ("" for none).
	CacheSalt string
	// Subset, when non-empty, restricts candidates to these addresses
	// (the gateway's subset hint). An address not in the pool is ignored.
	Subset []string
	// Arrival is when the request arrived; scorers take time from here,
	// never from the wall clock.
	Arrival time.Time
}

// State is the freshness of an endpoint's scraped metrics.
type State uint8

const (
	// StateFresh endpoints have metrics younger than the scraper's max age.
	StateFresh State = iota
	// StateStale endpoints have metrics older than the max age; their load
	// figures should not be trusted.
	StateStale
	// StateUnhealthy endpoints failed several scrapes in a row.
	StateUnhealthy
)

// String returns "fresh", "stale" or "unhealthy".
func (s State) String() string {
	switch s {
	case StateStale:
		return "stale"
	case StateUnhealthy:
		return "unhealthy"
	default:
		return "fresh"
	}
}

// LoRAState is what an endpoint reports about its LoRA adapters: where
// each adapter is resident (vLLM's vllm:lora_adapter_loaded, level "gpu"
// or "cpu") and, from the older vllm:lora_requests_info, which adapters
// have requests. Lists hold at most MaxLoRAAdapters names of at most
// MaxLoRANameBytes bytes each; the scraper drops the rest.
type LoRAState struct {
	// Active adapters have running requests (running_lora_adapters).
	// An adapter with running requests occupies a GPU slot.
	Active []string
	// Waiting adapters have queued requests (waiting_lora_adapters).
	Waiting []string
	// Max is the number of GPU adapter slots (vllm:max_gpu_lora_adapters,
	// else the max_lora label, vLLM's --max-loras); 0 means unknown.
	Max int
	// Residency reports whether the server exports residency: GPU, CPU,
	// Pinned and Used are meaningful, even when empty. Without it only
	// Active, Waiting and Max are known.
	Residency bool
	// GPU adapters are loaded in GPU slots (level="gpu"); CPU adapters are
	// in the CPU cache only (level="cpu", not also on the GPU): serving
	// them costs a copy to the GPU, not a load from disk.
	GPU, CPU []string
	// Pinned adapters are resident and never evicted (pinned="true").
	Pinned []string
	// Used is the number of GPU slots in use (vllm:num_gpu_loaded_lora_adapters,
	// else the number of GPU series, names dropped by the bounds included).
	Used int
}

// Bounds on the adapter state an endpoint reports (LoRAState).
const (
	// MaxLoRAAdapters bounds each adapter list of one endpoint (vLLM's
	// --max-cpu-loras is rarely above a few dozen).
	MaxLoRAAdapters = 256
	// MaxLoRANameBytes bounds one adapter name.
	MaxLoRANameBytes = 256
)

// Endpoint is the scheduler's view of one model-server endpoint. Values in a
// published pool are immutable; only the router-local in-flight counter,
// read with InFlight, changes underneath.
type Endpoint struct {
	// Address is "ip:port", the identity of the endpoint.
	Address string
	// Name is a human label (pod name); may be empty.
	Name string
	// Models served by the endpoint; empty means it serves any model.
	Models []string
	// Labels from discovery (pod labels); may be nil.
	Labels map[string]string
	// Waiting and Running are the scraped request counts.
	Waiting, Running float64
	// KVUtil is the scraped KV-cache utilisation in [0,1].
	KVUtil float64
	// Capacity is the endpoint's relative capacity weight (1 for a
	// homogeneous pool; 2 for a pod twice as large). Zero means 1.
	Capacity float64
	// LoRA adapters reported by the server.
	LoRA LoRAState
	// CacheBlockSize and CacheBlocks are the server's KV block size in
	// tokens and number of GPU blocks (vllm:cache_config_info); 0 when
	// unknown. The prefix scorer sizes its per-endpoint index from them.
	CacheBlockSize, CacheBlocks int
	// ScrapedAt is when the metrics above were taken (zero: never).
	ScrapedAt time.Time
	// State is the freshness of the metrics at publication time.
	State State
	// RecoveredAt is when the endpoint's server last answered a scrape
	// after failing to (refused, reset, timed out or an HTTP error): the
	// evidence of health that moves an ejected endpoint to half-open (see
	// OutlierConfig). Zero: never.
	RecoveredAt time.Time

	st  *endpointState
	idx int32 // position in the installed pool (CycleState.Match)
}

// endpointState is the router-local state of an endpoint, kept by address
// across pools.
type endpointState struct {
	inflight atomic.Int64
	picks    atomic.Uint64
	herd     atomic.Uint64 // guarded picks whose calm choice was this endpoint, over the bound
	pending  atomic.Int64  // prompt bytes of requests awaiting their first byte
	tokens   atomic.Int64  // uncached prompt tokens of requests awaiting their first byte

	// What the control plane learned of the endpoint's speed
	// (SetCalibration); nil until something was learned.
	calib atomic.Pointer[Calibration]

	// Other routers' counts for the endpoint, as their sync updates
	// reported them (AddPeerLoad); 0 without replica sync.
	peerInflight atomic.Int64
	peerPending  atomic.Int64

	// Outlier ejection (outlier.go).
	fails     atomic.Int32  // consecutive failures
	until     atomic.Int64  // end of the current ejection, Unix ns; 0 in service
	ejections atomic.Uint64 // times ejected
	half      atomic.Int64  // half-open since (the recovery's time), Unix ns; 0 when not
	streak    int32         // ejections in a row (the ejection time multiplier); under ejMu
	since     int64         // start of the current or last ejection, Unix ns; under ejMu
	lastEnd   int64         // end of the last ejection, Unix ns; under ejMu
}

// InFlight returns the number of requests sent to the endpoint that have
// not completed yet: this router's own (LocalInFlight) plus what other
// router replicas reported through Scheduler.AddPeerLoad, so the in-flight
// scorer and the load guard see the pool-wide count when replicas sync. It
// is 0 for endpoints that were never installed in a Scheduler.
func (e *Endpoint) InFlight() int64 {
	if e.st == nil {
		return 0
	}
	return e.st.inflight.Load() + e.st.peerInflight.Load()
}

// LocalInFlight returns the requests this router has sent to the endpoint
// that have not completed yet, without other replicas' counts.
func (e *Endpoint) LocalInFlight() int64 {
	if e.st == nil {
		return 0
	}
	return e.st.inflight.Load()
}

// PendingPrefill returns the prompt bytes of the requests sent to the
// endpoint that have not received their first response byte yet: a fresh
// estimate of the prefill work queued there, which is what a new request's
// time to first token waits for. Like InFlight it is this router's own
// count (LocalPendingPrefill) plus other replicas' reported counts. 0 for
// endpoints never installed in a Scheduler.
func (e *Endpoint) PendingPrefill() int64 {
	if e.st == nil {
		return 0
	}
	return e.st.pending.Load() + e.st.peerPending.Load()
}

// LocalPendingPrefill returns the prompt bytes of the requests this router
// sent to the endpoint that have no first response byte yet, without other
// replicas' counts.
func (e *Endpoint) LocalPendingPrefill() int64 {
	if e.st == nil {
		return 0
	}
	return e.st.pending.Load()
}

// PendingTokens returns the uncached prompt tokens of the requests this
// router sent to the endpoint that have not received their first response
// byte: each request counts its prompt tokens less those the endpoint held
// by the profile's MatchProducer (the prefix index) at the pick. It is 0
// for profiles without a MatchProducer and a MatchConsumer, and for
// endpoints never installed in a Scheduler. Router-local: replica sync
// carries prompt bytes (PendingPrefill), not tokens.
func (e *Endpoint) PendingTokens() int64 {
	if e.st == nil {
		return 0
	}
	return e.st.tokens.Load()
}

// Calibration is what the control plane has learned of one endpoint's
// speed from what the router observed (fleet.Calibrator), published with
// Scheduler.SetCalibration and read on the request path without locks.
// The zero value means nothing is known: a time-unit scorer then falls
// back to its configured prior.
type Calibration struct {
	// PrefillTokensPerSecond is how many uncached prompt tokens the
	// endpoint prefills per second when it is busy prefilling (> 0; 0
	// unknown).
	PrefillTokensPerSecond float64
	// DecodeStepSeconds is the time of one decode step at the endpoint's
	// recent batch size, i.e. the time between two output tokens of a
	// running request (≥ 0; 0 unknown).
	DecodeStepSeconds float64
	// KVCapacityTokens is how many tokens of KV cache the endpoint holds
	// (0 unknown).
	KVCapacityTokens float64
	// Samples is how many observations the estimate rests on; 0 when the
	// values are the prior.
	Samples int
}

// Calibration returns what the control plane last published for the
// endpoint (the zero Calibration when nothing was). Safe for concurrent
// use; allocation-free.
func (e *Endpoint) Calibration() Calibration {
	if e.st == nil {
		return Calibration{}
	}
	if c := e.st.calib.Load(); c != nil {
		return *c
	}
	return Calibration{}
}

// Picks returns how many decisions chose this endpoint (including retries
// moved to it) since this router first saw its address; 0 for endpoints
// never installed in a Scheduler.
func (e *Endpoint) Picks() uint64 {
	if e.st == nil {
		return 0
	}
	return e.st.picks.Load()
}

// HerdPicks returns how many guarded decisions found this endpoint to be
// the calm weights' choice while it was over the guard's bound, or over
// the crowd bound while it shared the request's prefix with other
// candidates (see Weights.Calm, Weights.Crowd): requests affinity would
// have piled on it. 0 for endpoints
// never installed in a Scheduler.
func (e *Endpoint) HerdPicks() uint64 {
	if e.st == nil {
		return 0
	}
	return e.st.herd.Load()
}

// CapacityOrOne returns Capacity, or 1 when it is not positive.
func (e *Endpoint) CapacityOrOne() float64 {
	if e.Capacity > 0 {
		return e.Capacity
	}
	return 1
}

// Serves reports whether the endpoint serves model ("" matches all).
func (e *Endpoint) Serves(model string) bool {
	if model == "" || len(e.Models) == 0 {
		return true
	}
	for _, m := range e.Models {
		if m == model {
			return true
		}
	}
	return false
}

// Outcome is how a scheduled request ended.
type Outcome struct {
	// Kind says whether the request succeeded, failed or was cancelled.
	Kind OutcomeKind
	// Status is the HTTP status the endpoint answered (0 if none).
	Status int
	// TTFT is the time to first byte of the response (0 if none arrived).
	TTFT time.Duration
	// Latency is the total time from pick to completion.
	Latency time.Duration
	// Usage is what the response reported of the request's tokens (zero:
	// nothing), for the calibration (Observation).
	Usage Usage
}

// OutcomeKind classifies an Outcome.
type OutcomeKind uint8

const (
	OutcomeSuccess OutcomeKind = iota
	OutcomeError
	OutcomeCanceled
)

// String returns "success", "error" or "canceled".
func (k OutcomeKind) String() string {
	switch k {
	case OutcomeError:
		return "error"
	case OutcomeCanceled:
		return "canceled"
	default:
		return "success"
	}
}
