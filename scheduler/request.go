package scheduler

import "time"

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
