package sim

import (
	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/scheduler"
)

// What a run sees and records: scrapes into the scheduler's pool, control
// ticks, samples for the timeline, window marks and the final result.

func (r *runner) scrape() {
	at := Epoch.Add(r.now)
	for i, e := range r.servers {
		idx := r.poolIndex(i)
		if idx < 0 {
			continue
		}
		ep := &r.eps[idx]
		if r.dead[i] {
			if r.missed[i]++; r.missed[i] >= unhealthyAfter {
				ep.State = scheduler.StateUnhealthy
			}
			continue
		}
		st := e.Stats()
		ep.Waiting, ep.Running, ep.KVUtil = float64(st.Waiting), float64(st.Running), st.KVUtil
		if e.Config().MaxLoRAs > 0 {
			ad := e.Adapters()
			ep.LoRA = scheduler.LoRAState{Active: ad.Running, Waiting: ad.Waiting, Max: ad.Slots,
				Residency: true, GPU: ad.GPU, CPU: ad.CPU, Used: len(ad.GPU)}
		}
		ep.ScrapedAt = at
	}
	r.setEndpoints()
}

// poolIndex returns server i's index in r.eps, or −1 once it was dropped.
func (r *runner) poolIndex(i int) int {
	if i < len(r.eps) && r.addrIdx[r.eps[i].Address] == i {
		return i // no endpoint dropped before it
	}
	for j := range r.eps {
		if r.addrIdx[r.eps[j].Address] == i {
			return j
		}
	}
	return -1
}

// control ticks every replica's loop; weight changes, mode entries and
// freezes are counted over all replicas.
func (r *runner) control() {
	for _, rt := range r.routers {
		r.controlOne(rt)
	}
}

func (r *runner) controlOne(rt *router) {
	t := rt.ctl.Tick(Epoch.Add(r.now), rt.sched.Pool().Pointers())
	rt.signal = t.Signal.Value
	if t.Changed() && t.Err == nil {
		r.res.WeightChanges++
	}
	if t.Mode != rt.mode {
		if rt.mode == configurator.ModeCalm && (t.Mode == configurator.ModeRebalance || t.Mode == configurator.ModeFrozen) {
			if ph := &r.res.Phases[r.phase]; r.now >= r.warm {
				ph.RebalanceEntries++
			} else {
				ph.WarmupRebalanceEntries++
			}
		}
		if t.Mode == configurator.ModeFrozen {
			r.res.Freezes++
		}
		rt.mode = t.Mode
	}
}

func (r *runner) sample() {
	inWindow := r.now >= r.warm && r.now < r.end
	tl := r.res.Timeline
	for i, e := range r.servers {
		var load float64
		if !r.dead[i] {
			st := e.Stats()
			load = float64(st.Waiting + st.Running)
		}
		if inWindow {
			r.pods[i].loadSum += load
		}
		if tl != nil && r.now <= r.end {
			tl.PodLoad[i] = append(tl.PodLoad[i], load)
		}
	}
	if inWindow {
		r.loadN++
	}
	if tl != nil && r.now <= r.end {
		tl.T = append(tl.T, r.now.Seconds())
		w := r.sched.Weights()
		for s := range tl.Weights {
			tl.Weights[s] = append(tl.Weights[s], w.Values[s])
		}
		tl.Signal = append(tl.Signal, r.routers[0].signal)
		mode := w.Mode
		if mode == "" {
			mode = configurator.ModeStatic
		}
		tl.Mode = append(tl.Mode, mode)
	}
}

func (r *runner) mark(end bool) {
	for i, e := range r.servers {
		if end {
			r.pods[i].close(e.Stats())
		} else {
			r.pods[i].open(e.Stats())
		}
	}
	if !end {
		// The current phase's share of the window starts now.
		r.phases[r.phase].genStart, r.phases[r.phase].winStart = r.genTotal(), r.now
		return
	}
	r.phaseTokens(r.phase)
	r.closeWindow(r.end-r.warm, r.sc.EngineConfig().MaxLoRAs > 0)
	r.res.HerdPicks = 0
	for _, rt := range r.routers {
		for _, e := range rt.sched.Pool().Pointers() {
			r.res.HerdPicks += int64(e.HerdPicks())
		}
	}
}

func (r *runner) finish() {
	r.finishWindow(r.end-r.warm, r.caps, r.dead)
	for _, e := range r.servers {
		r.res.Preemptions += e.Stats().Preemptions
	}
	r.finishPhases(r.caps, r.warm, r.end)
}
