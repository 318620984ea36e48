package scorers

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
)

// minMaxInPlace turns the loads in out (lower is better; NaN marks an
// unusable entry) into scores in place: (max − v)/(max − min) over the
// usable entries, 1 for all of them when they are equal, 0 for unusable
// ones. It reports false, leaving out untouched, when no entry is usable.
func minMaxInPlace(out []float64) bool {
	lo, hi := math.Inf(1), math.Inf(-1)
	usable := 0
	for _, v := range out {
		if v == v { // not NaN
			// Plain comparisons: the min and max builtins also order
			// NaNs and signed zeros, which costs here.
			if v < lo {
				lo = v
			}
			if v > hi {
				hi = v
			}
			usable++
		}
	}
	if usable == 0 {
		return false
	}
	span := hi - lo
	switch {
	case span <= 0:
		for i, v := range out {
			out[i] = boolScore(v == v)
		}
	case usable == len(out):
		// Multiplying by the inverse may round span×(1/span) just above 1.
		inv := 1 / span
		for i, v := range out {
			out[i] = min((hi-v)*inv, 1)
		}
	default:
		inv := 1 / span
		for i, v := range out {
			if v == v {
				out[i] = min((hi-v)*inv, 1)
			} else {
				out[i] = 0
			}
		}
	}
	return true
}

// boolScore is 1 for true, 0 for false.
func boolScore(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// fresh reports whether an endpoint's scraped load figures can be trusted.
func fresh(e *scheduler.Endpoint) bool { return e.State == scheduler.StateFresh }

// usableLoad reports whether v is a load value a scorer can use.
func usableLoad(v float64) bool { return v >= 0 && !math.IsInf(v, 1) } // false for NaN too

// scrapedLoadCounters are the neutral-score counters of a scorer that reads
// scraped load figures.
type scrapedLoadCounters struct {
	stale, noFresh, invalid prometheus.Counter
}

func newScrapedLoadCounters(n *neutralCounters) scrapedLoadCounters {
	return scrapedLoadCounters{
		stale:   n.counter(reasonStale),
		noFresh: n.counter(reasonNoFresh),
		invalid: n.counter(reasonInvalid),
	}
}

// markScraped writes v into out[i] when the endpoint is fresh and v usable,
// NaN (unusable) otherwise, counting why. It returns whether v was usable.
func (c scrapedLoadCounters) markScraped(e *scheduler.Endpoint, v float64, out []float64, i int) bool {
	switch {
	case !fresh(e):
		c.stale.Inc()
	case !usableLoad(v):
		c.invalid.Inc()
	default:
		out[i] = v
		return true
	}
	out[i] = math.NaN()
	return false
}

// allOnes writes the neutral 1 into every score.
func allOnes(out []float64) {
	for i := range out {
		out[i] = 1
	}
}
