package sim

import (
	"math"
	"time"

	"github.com/trimtab/trimtab/sim/engine"
)

// measure is a run's measurement state, apart from the world it measures
// (servers, routers, clock): the Result being filled, each phase's
// accumulators and each server's counters over the measurement window
// [warm, end). The runner feeds it what it reads from the world; measure
// reads nothing else.
type measure struct {
	res    Result
	phases []phaseAcc
	pods   []podWindow // per server
	loadN  int         // load samples taken in the window
}

// phaseAcc accumulates one phase while the run goes.
type phaseAcc struct {
	genStart int64 // generation tokens when the phase's window part began
	winStart time.Duration
	onset    []float64 // per pod Σ load over the onset samples
	alive    []bool    // per pod: up during the whole onset window
	onsetN   int
}

// podWindow is one server's counters over the measurement window: the
// engine's totals at warm-up (open), their growth over the window once it
// closed (close), and its load summed over the window's samples.
type podWindow struct {
	gen, hits, query, loads int64
	loadSum                 float64
}

// open records the server's counters at warm-up.
func (p *podWindow) open(st engine.Stats) {
	p.gen, p.hits, p.query = st.GenerationTokens, st.PrefixHits, st.PrefixQueries
	p.loads = st.AdapterLoads
}

// close turns the counters recorded at warm-up into their growth since.
func (p *podWindow) close(st engine.Stats) {
	p.loads = st.AdapterLoads - p.loads
	p.gen = st.GenerationTokens - p.gen
	p.hits = st.PrefixHits - p.hits
	p.query = st.PrefixQueries - p.query
}

// closeWindow sums the servers' window counters into the result: output
// tokens per second over the window's length win, the prefix hit ratio,
// and the adapter loads when lora (the engine serves adapters).
func (m *measure) closeWindow(win time.Duration, lora bool) {
	var gen, hits, query, loads int64
	for i := range m.pods {
		loads += m.pods[i].loads
		gen += m.pods[i].gen
		hits += m.pods[i].hits
		query += m.pods[i].query
	}
	if s := win.Seconds(); s > 0 {
		m.res.OutputTokensPerSec = float64(gen) / s
	}
	if query > 0 {
		m.res.PrefixHitRate = float64(hits) / float64(query)
	}
	if lora {
		m.res.AdapterLoads = &loads
	}
}

// finishWindow sorts the window's latencies and computes the goodput over
// its length win and the per-pod load statistics: each pod's mean load
// over the window's samples, and the busiest pod's share and its
// capacity-divided load against the pool's (servers' declared capacities
// caps; dead pods count in the share, not in the ratio).
func (m *measure) finishWindow(win time.Duration, caps []float64, dead []bool) {
	m.res.Sort()
	m.res.Goodput = math.NaN()
	if win > 0 {
		m.res.Goodput = m.res.Latencies.Goodput(win)
	}
	if m.loadN == 0 {
		return
	}
	m.res.LoadMin = math.Inf(1)
	var sum, capSum, top, topRatio float64
	for i := range m.pods {
		avg := m.pods[i].loadSum / float64(m.loadN)
		m.res.PodLoad = append(m.res.PodLoad, avg)
		m.res.LoadMax = max(m.res.LoadMax, avg)
		m.res.LoadMin = min(m.res.LoadMin, avg)
		sum += avg
		top = max(top, avg)
		if !dead[i] {
			capSum += caps[i]
			topRatio = max(topRatio, avg/caps[i])
		}
	}
	if sum > 0 {
		m.res.BusiestShare = top / sum
		m.res.BusiestRatio = topRatio / (sum / capSum)
	}
}

// finishPhases closes each phase's statistics: latencies sorted, goodput
// over the phase's part of the window [warm, end), and the busiest pod's
// onset load against the pool's (servers' declared capacities caps).
func (m *measure) finishPhases(caps []float64, warm, end time.Duration) {
	for i := range m.res.Phases {
		p := &m.res.Phases[i]
		p.Sort()
		p.Goodput = math.NaN()
		from, to := max(p.Start, warm), min(p.End, end)
		if to > from {
			p.Goodput = p.Latencies.Goodput(to - from)
		}
		a := &m.phases[i]
		var sum, capSum, top float64
		for j, v := range a.onset {
			if a.alive[j] {
				sum += v
				capSum += caps[j]
				top = max(top, v/caps[j])
			}
		}
		if sum > 0 && capSum > 0 {
			p.OnsetBusiestRatio = top / (sum / capSum)
		}
	}
}
