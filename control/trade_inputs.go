package control

import (
	"math"
	"sort"

	"github.com/trimtab/trimtab/scheduler"
)

// The trade law's inputs, read from the pool at each evaluation: the
// declared and learned speed spreads, the batch cost, the KV slots and
// the uncached prompt (TradeConfig).

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
	return median(v), len(v)
}

// slotWindow is how many evaluations the pick readings' means span (a
// minute at the default trade.interval, 5 s; every pick since the reader
// started before that many); slotMinPicks is how many picks they must
// rest on; maxSlotEndpoints bounds the addresses the reader remembers.
const (
	slotWindow       = 12
	slotMinPicks     = 20
	maxSlotEndpoints = 1 << 16
)

// pickReader keeps what the pool's endpoints had been picked for at the
// last evaluation (Endpoint.Picks and PickedTokens, by address) and the
// increases of the last slotWindow evaluations, for the mean uncached
// prompt of a recent request. Only increases of an endpoint seen at the
// evaluation before count: one that joins, rejoins or is first seen sets
// its baseline, and one that leaves takes nothing away.
type pickReader struct {
	last          map[string][2]uint64
	picks, tokens [slotWindow]uint64
	next, n       int
}

// pickReading is what one read gives: the pool's KV slots and how many
// endpoints they rest on (0, 0: no reading), and its uncached prompt and
// how many picks that mean rests on (0, 0: no reading; a window of
// fully cached picks reads 0 over its picks).
type pickReading struct {
	Slots       float64
	SlotN       int
	Prompt      float64
	PromptPicks int
}

// read records the pool's picks since the last read and returns, once
// the window holds slotMinPicks picks or more:
//   - the pool's KV slots: the median, over the endpoints whose KV cache
//     size is scraped (cache_config_info), of that size ÷ the KV of a
//     recent request — the mean picked tokens per pick over the window
//     plus the pool's learned mean output (the median over the endpoints
//     of Calibration.OutputTokens, at most the endpoint's KV size; 0
//     while unknown) — and how many endpoints that is (none while no size
//     is scraped);
//   - the uncached prompt: the mean picked tokens per pick, the prompt
//     tokens a recent request brought that the pod it was sent to did not
//     hold.
func (r *pickReader) read(pool []*scheduler.Endpoint) pickReading {
	var dp, dt uint64
	seen := make(map[string][2]uint64, len(pool))
	for _, e := range pool {
		if len(seen) >= maxSlotEndpoints {
			break
		}
		cur := [2]uint64{e.Picks(), e.PickedTokens()}
		seen[e.Address] = cur
		if was, ok := r.last[e.Address]; ok && cur[0] >= was[0] && cur[1] >= was[1] {
			dp += cur[0] - was[0]
			dt += cur[1] - was[1]
		}
	}
	r.last = seen
	r.picks[r.next], r.tokens[r.next] = dp, dt
	r.next = (r.next + 1) % slotWindow
	r.n = min(r.n+1, slotWindow)
	var picks, tokens uint64
	for k := range r.n {
		picks += r.picks[k]
		tokens += r.tokens[k]
	}
	var out pickReading
	if picks < slotMinPicks {
		return out
	}
	per := float64(tokens) / float64(picks)
	out.Prompt, out.PromptPicks = per, int(min(picks, math.MaxInt32))
	var outs []float64
	for _, e := range pool {
		if o := e.Calibration().OutputTokens; o > 0 && !math.IsInf(o, 0) {
			outs = append(outs, o)
		}
	}
	var learned float64
	if len(outs) > 0 {
		learned = median(outs)
	}
	var v []float64
	for _, e := range pool {
		kv := float64(e.CacheBlocks) * float64(e.CacheBlockSize)
		if !(kv > 0) {
			continue
		}
		if need := per + min(learned, kv); need > 0 {
			v = append(v, kv/need)
		}
	}
	if len(v) > 0 {
		out.Slots, out.SlotN = median(v), len(v)
	}
	return out
}

// median returns the median of v (sorted in place); v is not empty.
func median(v []float64) float64 {
	sort.Float64s(v)
	m := len(v) / 2
	if len(v)%2 == 0 {
		return (v[m-1] + v[m]) / 2
	}
	return v[m]
}
