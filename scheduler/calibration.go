package scheduler

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
	// DecodeFixedSeconds and DecodeSecondsPerSeq are the endpoint's
	// decode step line, step ≈ fixed + per_seq · batch: what a step costs
	// whatever runs in it, and what each running request adds to it
	// (≥ 0; fixed 0 unknown).
	DecodeFixedSeconds, DecodeSecondsPerSeq float64
	// EngineDecodeFixedSeconds, EngineDecodeSecondsPerSeq and
	// EngineDecodeSecondsPerContextToken are the engine's own decode step,
	// step ≈ fixed + per_seq · batch + per_context_token · (context tokens
	// the batch attends to), without the prefill that shares its steps:
	// what a sequence costs apart from its context, where
	// DecodeSecondsPerSeq is a sequence with the context the endpoint's
	// sequences carry (≥ 0; fixed 0 unknown).
	EngineDecodeFixedSeconds, EngineDecodeSecondsPerSeq, EngineDecodeSecondsPerContextToken float64
	// EngineDecodeBatchSeconds is the engine's cost of one more decoding
	// sequence as the trade law's batch cost reads it (control.BatchCost):
	// EngineDecodeSecondsPerSeq where a window has identified the
	// context term; where none has, a per-sequence term fitted to the
	// batches holds the context its sequences carried, and the prior's
	// cost per context token at their median context comes out of it, so
	// a long context does not read as a costly sequence (≥ 0; docs/adaptive.md, "A decode-bound engine").
	EngineDecodeBatchSeconds float64
	// OutputTokens is the mean output of the endpoint's recent requests,
	// in tokens (0 unknown).
	OutputTokens float64
	// KVCapacityTokens is how many tokens of KV cache the endpoint holds
	// (0 unknown).
	KVCapacityTokens float64
	// Samples is how many observations the estimate rests on; 0 when the
	// values are the prior.
	Samples int
	// Probes is how many more requests the calibrator wants the endpoint
	// sent: its share of what its class lacks of the observations the
	// calibrator needs (min_samples). The scheduler may send that many
	// as probes (ProbeConfig) until the next publication replaces the
	// count; 0 wants none.
	Probes int
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
