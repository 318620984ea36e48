package scheduler

import "time"

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
