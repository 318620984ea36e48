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
