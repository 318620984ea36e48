package flow

import (
	"math"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// Detector says whether an endpoint has room for another request. It is
// a value, immutable and safe for concurrent use.
type Detector struct{ cfg SaturationConfig }

// NewDetector returns a detector for cfg (valid as part of a Config).
func NewDetector(cfg SaturationConfig) Detector { return Detector{cfg: cfg} }

// CapacityTokens returns e's token capacity: its learned KV capacity when
// the calibrator published one, else capacity_tokens times
// Endpoint.Capacity; 0 when neither is known.
func (d Detector) CapacityTokens(e *scheduler.Endpoint) float64 {
	if c := e.Calibration().KVCapacityTokens; c > 0 {
		return c
	}
	return d.cfg.CapacityTokens * e.CapacityOrOne()
}

// Saturated reports whether e is full at now for a band that may fill
// threshold (Config.Thresholds) of its KV capacity, given tokens, the
// tokens of the requests this router sent it that have not finished (the
// router's own ledger); the band's prefill budget (Wait) is the other
// bound. The router's opinion: tokens at or above threshold ×
// CapacityTokens, or LocalInFlight at or above max_in_flight × Capacity.
// The scraped second opinion, only when the metrics are fresh (state
// fresh, taken at most max_age before now): waiting at or above
// queue_depth, or KV utilisation at or above kv_util. Neither opinion
// available means not saturated: flow control fails open.
func (d Detector) Saturated(e *scheduler.Endpoint, tokens int64, threshold float64, now time.Time) bool {
	if c := d.CapacityTokens(e); c > 0 && float64(tokens) >= threshold*c {
		return true
	}
	if m := d.cfg.MaxInFlight; m > 0 && float64(e.LocalInFlight()) >= float64(m)*e.CapacityOrOne() {
		return true
	}
	if !d.Fresh(e, now) {
		return false
	}
	if q := d.cfg.QueueDepth; q > 0 && e.Waiting >= q {
		return true
	}
	if k := d.cfg.KVUtil; k > 0 && e.KVUtil >= k {
		return true
	}
	return false
}

// Wait returns e's pending prefill wait in seconds: the prompt tokens
// queued on it that it has not computed, over its prefill rate. The
// tokens are this router's uncached ones (Endpoint.PendingTokens: the
// prefix index's answer at each pick) plus other replicas' pending prompt
// bytes ÷ bytes_per_token; with bytesOnly (a profile without a prefix
// index) all pending prompt bytes ÷ bytes_per_token. The rate is the
// learned one (Calibration.PrefillTokensPerSecond), else
// prefill_tokens_per_second × Endpoint.Capacity; with neither the wait is
// 0: flow control fails open.
func (d Detector) Wait(e *scheduler.Endpoint, bytesOnly bool) float64 {
	rate := e.Calibration().PrefillTokensPerSecond
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = d.cfg.PrefillTokensPerSecond * e.CapacityOrOne()
	}
	if !(rate > 0) {
		return 0
	}
	var tokens float64
	if bytesOnly {
		tokens = float64(max(e.PendingPrefill(), 0)) / d.cfg.BytesPerToken
	} else {
		peer := max(e.PendingPrefill()-e.LocalPendingPrefill(), 0)
		tokens = float64(max(e.PendingTokens(), 0)) + float64(peer)/d.cfg.BytesPerToken
	}
	return tokens / rate
}

// Fresh reports whether e's scraped metrics may be trusted at now.
func (d Detector) Fresh(e *scheduler.Endpoint, now time.Time) bool {
	return e.State == scheduler.StateFresh && !e.ScrapedAt.IsZero() && now.Sub(e.ScrapedAt) <= d.cfg.MaxAge
}

// Tokens returns what a request is charged on its endpoint's KV ledger:
// the prompt tokens the endpoint must compute (uncached, when the prefix
// index answered: known; else its prompt bytes ÷ bytes_per_token) plus
// output (the request's own output bound when known, > 0; else
// output_tokens). Prompt tokens the endpoint holds in its prefix cache
// are shared with the requests that put them there and are not charged
// again.
func (d Detector) Tokens(promptBytes int, uncached int64, known bool, output int) int64 {
	if output <= 0 {
		output = d.cfg.OutputTokens
	}
	if known {
		return max(uncached, 0) + int64(output)
	}
	return int64(float64(promptBytes)/d.cfg.BytesPerToken+0.5) + int64(output)
}

// Eligible reports whether e is a candidate for req at now by the rules
// flow control applies before the scheduler's own filters: it serves the
// model, is in the request's subset, is not unhealthy and not ejected.
func Eligible(e *scheduler.Endpoint, req *scheduler.Request, now time.Time) bool {
	if !e.Serves(req.Model) || e.State == scheduler.StateUnhealthy || e.Ejected(now) {
		return false
	}
	if len(req.Subset) == 0 {
		return true
	}
	for _, a := range req.Subset {
		if a == e.Address {
			return true
		}
	}
	return false
}
