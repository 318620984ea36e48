package scheduler

import "time"

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
