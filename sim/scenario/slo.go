package scenario

import (
	"errors"
	"time"
)

// SLO is the service level a completed request must meet to count toward
// goodput: its time to first token at most TTFT, and its mean time per
// output token after the first at most TPOT, i.e.
//
//	ttft ≤ TTFT  and  e2e − ttft ≤ TPOT·(output tokens − 1).
//
// The defaults are MLPerf Inference's server-scenario bounds for
// Llama-3.1-8B (mlcommons/inference loadgen/mlperf.conf:
// llama3_1-8b.Server.ttft_latency = 2000 ms, tpot_latency = 100 ms), the
// model of the default engine calibration.
type SLO struct {
	// TTFT bounds the time to first token, > 0.
	TTFT time.Duration `yaml:"ttft"`
	// TPOT bounds the mean time per output token after the first, > 0.
	TPOT time.Duration `yaml:"tpot"`
}

// DefaultSLO returns TTFT ≤ 2 s and TPOT ≤ 100 ms.
func DefaultSLO() SLO { return SLO{TTFT: 2 * time.Second, TPOT: 100 * time.Millisecond} }

// Validate checks the SLO; errors name the field.
func (s SLO) Validate() error {
	var errs []error
	if s.TTFT <= 0 {
		errs = append(errs, errors.New("slo.ttft: must be > 0"))
	}
	if s.TPOT <= 0 {
		errs = append(errs, errors.New("slo.tpot: must be > 0"))
	}
	return errors.Join(errs...)
}

// Met reports whether a completed request with these latencies and
// outputTokens output tokens met the SLO.
func (s SLO) Met(ttft, e2e time.Duration, outputTokens int) bool {
	return ttft <= s.TTFT && e2e-ttft <= time.Duration(max(outputTokens-1, 0))*s.TPOT
}
