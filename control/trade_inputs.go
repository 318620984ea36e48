package control

import (
	"math"
	"sort"

	"github.com/trimtab/trimtab/scheduler"
)

// The trade law's inputs, read from the pool at each evaluation: the
// declared and learned speed spreads and the batch cost (TradeConfig).

// CapacitySpread returns the largest declared capacity in pool over the
// smallest (Endpoint.CapacityOrOne); 1 for fewer than two endpoints.
func CapacitySpread(pool []*scheduler.Endpoint) float64 {
	if len(pool) < 2 {
		return 1
	}
	lo, hi := math.Inf(1), 0.0
	for _, e := range pool {
		c := e.CapacityOrOne()
		lo, hi = min(lo, c), max(hi, c)
	}
	return hi / lo
}

// PrefillSpread returns the spread of the pool's learned prefill
// throughput, fastest ÷ slowest, over the endpoints whose calibration
// rests on at least minSamples observations, and how many those are. With
// fewer than two it returns (1, n). It reads each endpoint's Calibration
// once and allocates nothing.
func PrefillSpread(pool []*scheduler.Endpoint, minSamples int) (spread float64, n int) {
	lo, hi := math.Inf(1), 0.0
	for _, e := range pool {
		c := e.Calibration()
		if c.Samples < minSamples || !(c.PrefillTokensPerSecond > 0) || math.IsInf(c.PrefillTokensPerSecond, 0) {
			continue
		}
		n++
		lo, hi = min(lo, c.PrefillTokensPerSecond), max(hi, c.PrefillTokensPerSecond)
	}
	if n < 2 {
		return 1, n
	}
	return hi / lo, n
}

// BatchCost returns the pool's batch cost: the median, over the endpoints
// whose calibration rests on at least minSamples observations
// (Calibration.Samples, its prefill fit's: each request gives a prefill
// and a decode sample, and the decode line is blended with the prior by
// its own count) and has an engine decode step line, of the engine's
// seconds per decoding sequence apart from its context
// (EngineDecodeBatchSeconds: the engine line's, less the prior's context
// cost while no window has identified the context term) ÷ its fixed
// seconds; and how many endpoints that is (0, 0 for none). Apart from the
// context: a sequence's context costs in any pool whose prompts are long,
// and only an engine whose sequences cost in themselves gains from
// spreading the batch.
func BatchCost(pool []*scheduler.Endpoint, minSamples int) (cost float64, n int) {
	cals := make([]scheduler.Calibration, 0, len(pool))
	for _, e := range pool {
		cals = append(cals, e.Calibration())
	}
	return BatchCostOf(cals, minSamples)
}

// BatchCostOf is BatchCost over published calibrations.
func BatchCostOf(cals []scheduler.Calibration, minSamples int) (cost float64, n int) {
	var v []float64
	for _, c := range cals {
		f, s := c.EngineDecodeFixedSeconds, c.EngineDecodeBatchSeconds
		if c.Samples < minSamples || !(f > 0) || !(s >= 0) || math.IsInf(f+s, 0) {
			continue
		}
		v = append(v, s/f)
	}
	if len(v) == 0 {
		return 0, 0
	}
	sort.Float64s(v)
	m := len(v) / 2
	if len(v)%2 == 0 {
		return (v[m-1] + v[m]) / 2, len(v)
	}
	return v[m], len(v)
}

// slotWindow is how many evaluations of pick totals the KV-slot reading
// keeps (the mean spans the last minute at the default interval, all the
// picks since the router started before that); slotMinPicks is how many
// picks its mean must rest on.
const (
	slotWindow   = 12
	slotMinPicks = 20
)

// slotReader keeps the pool's pick totals (Endpoint.Picks and
// PickedTokens) at the last slotWindow evaluations, for the mean KV a
// recent request added.
type slotReader struct {
	picks, tokens [slotWindow]uint64
	next, n       int
}

// read records the pool's totals and returns the pool's KV slots: the
// median, over the endpoints whose KV cache size is known (scraped
// cache_config_info, else the calibration's), of that size ÷ the KV of a
// recent request — the mean picked tokens per pick since the window's
// oldest totals (since the start while it is not full) plus the
// endpoint's learned mean output (Calibration.OutputTokens, 0 while
// unknown) — and how many endpoints that is; (0, 0) while fewer than
// slotMinPicks picks count or no size is known. Totals that fell (an
// endpoint left the pool) start the window again.
func (r *slotReader) read(pool []*scheduler.Endpoint) (slots float64, n int) {
	var picks, tokens uint64
	for _, e := range pool {
		picks += e.Picks()
		tokens += e.PickedTokens()
	}
	if r.n > 0 {
		last := (r.next - 1 + slotWindow) % slotWindow
		if picks < r.picks[last] || tokens < r.tokens[last] {
			r.n = 0
		}
	}
	var p0, t0 uint64
	if r.n == slotWindow {
		p0, t0 = r.picks[r.next], r.tokens[r.next]
	}
	r.picks[r.next], r.tokens[r.next] = picks, tokens
	r.next = (r.next + 1) % slotWindow
	r.n = min(r.n+1, slotWindow)
	if picks-p0 < slotMinPicks {
		return 0, 0
	}
	per := float64(tokens-t0) / float64(picks-p0)
	var v []float64
	for _, e := range pool {
		kv := float64(e.CacheBlocks) * float64(e.CacheBlockSize)
		c := e.Calibration()
		if !(kv > 0) {
			kv = c.KVCapacityTokens
		}
		need := per + max(c.OutputTokens, 0)
		if !(kv > 0) || !(need > 0) || math.IsInf(kv+need, 0) {
			continue
		}
		v = append(v, kv/need)
	}
	if len(v) == 0 {
		return 0, 0
	}
	sort.Float64s(v)
	m := len(v) / 2
	if len(v)%2 == 0 {
		return (v[m-1] + v[m]) / 2, len(v)
	}
	return v[m], len(v)
}
