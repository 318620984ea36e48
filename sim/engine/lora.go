package engine

import "slices"

// The adapter model: vLLM's LRU adapter caches. The CPU cache holds up to
// MaxCPULoRAs adapters, those in GPU slots included; the GPU holds up to
// MaxLoRAs. A batch may hold sequences of at most MaxLoRAs distinct
// adapters (vLLM's scheduler skips a waiting request whose adapter would
// exceed that, and admits the ones behind it); the step loads the batch's
// adapters that are not on the GPU before it runs, evicting the least
// recently used adapter no running sequence uses.

type adapter struct {
	name string
	used int64 // the step that last needed it
	gpu  bool
}

// AdapterState is what an engine reports about its adapters.
type AdapterState struct {
	// GPU adapters are in GPU slots; CPU adapters are in the CPU cache and
	// not on the GPU.
	GPU, CPU []string
	// Running and Waiting are the distinct adapters of running and
	// waiting sequences.
	Running, Waiting []string
	// Slots is MaxLoRAs.
	Slots int
}

// Adapters returns the engine's adapter state in fresh slices (nil when
// empty), in no particular order.
func (e *Engine) Adapters() AdapterState {
	st := AdapterState{Slots: e.cfg.MaxLoRAs}
	for _, a := range e.adapters {
		if a.gpu {
			st.GPU = append(st.GPU, a.name)
		} else {
			st.CPU = append(st.CPU, a.name)
		}
	}
	for _, s := range e.running {
		if s.LoRA != "" && !slices.Contains(st.Running, s.LoRA) {
			st.Running = append(st.Running, s.LoRA)
		}
	}
	for i := range e.waiting.len() {
		s := e.waiting.at(i)
		if s.LoRA != "" && !slices.Contains(st.Waiting, s.LoRA) {
			st.Waiting = append(st.Waiting, s.LoRA)
		}
	}
	return st
}

// loraOn reports whether the adapter model is on.
func (e *Engine) loraOn() bool { return e.cfg.MaxLoRAs > 0 }

// batchLoRAs sets e.loras to the distinct adapters of the running
// sequences.
func (e *Engine) batchLoRAs() {
	e.loras = e.loras[:0]
	for _, s := range e.running {
		e.addBatchLoRA(s.LoRA)
	}
}

func (e *Engine) addBatchLoRA(name string) {
	if name != "" && !slices.Contains(e.loras, name) {
		e.loras = append(e.loras, name)
	}
}

// loraFits reports whether s may join the batch: its adapter is already in
// it, or a slot is left.
func (e *Engine) loraFits(s *Seq) bool {
	return s.LoRA == "" || len(e.loras) < e.cfg.MaxLoRAs || slices.Contains(e.loras, s.LoRA)
}

// loadLoRAs makes every adapter of the batch resident on the GPU and
// returns the time the loads take.
func (e *Engine) loadLoRAs() (d int64) {
	e.loraClock++
	for _, name := range e.loras {
		i := e.adapterIndex(name)
		switch {
		case i >= 0 && e.adapters[i].gpu:
		case i >= 0:
			e.freeGPUSlot()
			e.adapters[i].gpu = true
			e.st.AdapterLoads++
			d += int64(e.cfg.LoRALoadCPU)
		default:
			e.freeGPUSlot()
			e.freeCPUEntry()
			e.adapters = append(e.adapters, adapter{name: name, gpu: true})
			i = len(e.adapters) - 1
			e.st.AdapterLoads++
			e.st.AdapterDiskLoads++
			d += int64(e.cfg.LoRALoadDisk)
		}
		e.adapters[i].used = e.loraClock
	}
	return d
}

func (e *Engine) adapterIndex(name string) int {
	for i := range e.adapters {
		if e.adapters[i].name == name {
			return i
		}
	}
	return -1
}

// freeGPUSlot moves the least recently used GPU adapter outside the batch
// to the CPU cache when every slot is taken.
func (e *Engine) freeGPUSlot() {
	n, victim := 0, -1
	for i := range e.adapters {
		a := &e.adapters[i]
		if !a.gpu {
			continue
		}
		n++
		if !slices.Contains(e.loras, a.name) && (victim < 0 || a.used < e.adapters[victim].used) {
			victim = i
		}
	}
	if n >= e.cfg.MaxLoRAs && victim >= 0 {
		e.adapters[victim].gpu = false
		e.st.AdapterEvictions++
	}
}

// freeCPUEntry drops the least recently used adapter not on the GPU when
// the CPU cache is full.
func (e *Engine) freeCPUEntry() {
	limit := e.cfg.MaxCPULoRAs
	if limit == 0 {
		limit = e.cfg.MaxLoRAs
	}
	if len(e.adapters) < limit {
		return
	}
	victim := -1
	for i := range e.adapters {
		if !e.adapters[i].gpu && (victim < 0 || e.adapters[i].used < e.adapters[victim].used) {
			victim = i
		}
	}
	if victim >= 0 {
		e.adapters = slices.Delete(e.adapters, victim, victim+1)
	}
}
