package report

import (
	"math"
	"slices"
	"time"

	"github.com/trimtab/trimtab/sim/scenario"
)

// Latencies records a window's requests for statistics that count
// failures: every request, completed or not, is one value of TTFT and one
// of E2E, so a policy that lets requests fail or time out cannot read
// fast. A request that did not complete (a miss: it failed, or the client
// gave up at its timeout) counts at the client timeout, the latency the
// client saw before giving up; its TTFT is its first token's when one
// arrived before the timeout. A failure that came back at once (no
// endpoint, a dead pod) counts at the timeout too: from the client's side
// no answer came, and a policy gains nothing by failing fast.
//
// The zero value is empty and ready; it is not safe for concurrent use.
// The simulator and bench both fill one per window.
type Latencies struct {
	// TTFT and E2E are in milliseconds, one value per request, misses
	// included; sorted once Sort has run.
	TTFT, E2E []float64
	// Misses counts the requests that did not complete.
	Misses int
	// Good counts the completed requests that met the SLO.
	Good int
}

// Complete records a request that completed with these latencies and
// outputTokens output tokens, judged against slo.
func (l *Latencies) Complete(ttft, e2e time.Duration, outputTokens int, slo scenario.SLO) {
	l.TTFT = append(l.TTFT, msec(ttft))
	l.E2E = append(l.E2E, msec(e2e))
	if slo.Met(ttft, e2e, outputTokens) {
		l.Good++
	}
}

// Miss records a request that did not complete. ttft is its time to first
// token when one arrived before the timeout (≤ 0: none); its E2E, and its
// TTFT without a first token, count at timeout.
func (l *Latencies) Miss(ttft, timeout time.Duration) {
	if ttft <= 0 || ttft > timeout {
		ttft = timeout
	}
	l.TTFT = append(l.TTFT, msec(ttft))
	l.E2E = append(l.E2E, msec(timeout))
	l.Misses++
}

// Sort sorts TTFT and E2E for Percentile.
func (l *Latencies) Sort() {
	slices.Sort(l.TTFT)
	slices.Sort(l.E2E)
}

// Requests returns how many requests were recorded.
func (l *Latencies) Requests() int { return len(l.E2E) }

// Goodput returns the requests that met the SLO per second of window
// (NaN when window ≤ 0).
func (l *Latencies) Goodput(window time.Duration) float64 {
	if window <= 0 {
		return math.NaN()
	}
	return float64(l.Good) / window.Seconds()
}

func msec(d time.Duration) float64 { return float64(d) / 1e6 }

// Percentile returns the p-th percentile (0…100) of sorted values by
// nearest rank; NaN for no values.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}
