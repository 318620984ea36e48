package scheduler

import "sync/atomic"

// endpointState is the router-local state of an endpoint, kept by address
// across pools.
type endpointState struct {
	inflight atomic.Int64
	picks    atomic.Uint64
	herd     atomic.Uint64 // guarded picks whose calm choice was this endpoint, over the bound
	pending  atomic.Int64  // prompt bytes of requests awaiting their first byte
	tokens   atomic.Int64  // uncached prompt tokens of requests awaiting their first byte
	picked   atomic.Uint64 // KV tokens of the requests picked (PickedTokens)

	// What the control plane learned of the endpoint's speed
	// (SetCalibration); nil until something was learned.
	calib  atomic.Pointer[Calibration]
	wants  bool         // in the pool with calib.Probes > 0: counted in Scheduler.wanting; under Scheduler.mu
	inPool bool         // in the installed pool; under Scheduler.mu
	probes atomic.Int64 // probes left of calib.Probes
	probe  atomic.Int64 // the last probe's time, Unix ns; 0 never

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

// Picks returns how many decisions chose this endpoint (including retries
// moved to it) since this router first saw its address; 0 for endpoints
// never installed in a Scheduler.
func (e *Endpoint) Picks() uint64 {
	if e.st == nil {
		return 0
	}
	return e.st.picks.Load()
}

// PickedTokens returns the prompt tokens of the requests picked for this
// endpoint (counted like Picks, requests moved to it included) since this
// router first saw its address: each its tokens the endpoint did not hold
// by the profile's MatchProducer at the pick, or without one its prompt
// bytes ÷ BytesPerToken — the KV cache a request adds to what the
// endpoint holds. The trade law reads the pool's mean per pick (its KV
// slots, adaptive.trade.slots_on, and its uncached prompt, prompt_on). 0
// for endpoints never installed in a Scheduler.
func (e *Endpoint) PickedTokens() uint64 {
	if e.st == nil {
		return 0
	}
	return e.st.picked.Load()
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
