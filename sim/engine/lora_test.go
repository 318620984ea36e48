package engine

import (
	"reflect"
	"testing"
	"time"
)

func loraConfig() Config {
	c := testConfig()
	c.MaxLoRAs, c.MaxCPULoRAs = 2, 3
	c.LoRALoadCPU, c.LoRALoadDisk = 5*time.Millisecond, 50*time.Millisecond
	return c
}

// TestAdapterLRU runs one-step requests (3-token prompt, 1 output token:
// 10 + 3·1 = 13 ms a step) for adapters in turn, with 2 GPU slots and a
// CPU cache of 3.
func TestAdapterLRU(t *testing.T) {
	e := mustNew(t, loraConfig())
	tests := []struct {
		adapter  string
		step     time.Duration
		gpu, cpu []string
		loads    int64
		disk     int64
		evicted  int64
	}{
		// a, b: from disk, 13 + 50 = 63 ms each; both slots taken.
		{"a", 63 * time.Millisecond, []string{"a"}, nil, 1, 1, 0},
		{"b", 63 * time.Millisecond, []string{"a", "b"}, nil, 2, 2, 0},
		// a again: resident, 13 ms, no load.
		{"a", 13 * time.Millisecond, []string{"a", "b"}, nil, 2, 2, 0},
		// c: disk; evicts b (last used step 2 < a's step 3) to the CPU.
		{"c", 63 * time.Millisecond, []string{"a", "c"}, []string{"b"}, 3, 3, 1},
		// b: from the CPU cache, 13 + 5 = 18 ms; evicts a (step 3 < c's 4).
		{"b", 18 * time.Millisecond, []string{"c", "b"}, []string{"a"}, 4, 3, 2},
		// d: disk; evicts c to the CPU, which is full (3) and drops its
		// least recently used adapter not on the GPU, a.
		{"d", 63 * time.Millisecond, []string{"b", "d"}, []string{"c"}, 5, 4, 3},
		// the base model needs no slot: 13 ms.
		{"", 13 * time.Millisecond, []string{"b", "d"}, []string{"c"}, 5, 4, 3},
	}
	for i, tt := range tests {
		s := seq(uint64(i), uint64(1000*(i+1)), 3, 1, 4)
		s.LoRA = tt.adapter
		if err := e.Add(s); err != nil {
			t.Fatal(err)
		}
		steps, _ := drive(t, e)
		st, ad := e.Stats(), e.Adapters()
		if len(steps) != 1 || steps[0] != tt.step {
			t.Errorf("request %d (%q): steps %v, want [%v]", i, tt.adapter, steps, tt.step)
		}
		if !reflect.DeepEqual(sorted(ad.GPU), sorted(tt.gpu)) || !reflect.DeepEqual(sorted(ad.CPU), sorted(tt.cpu)) {
			t.Errorf("request %d (%q): GPU %v CPU %v, want %v %v", i, tt.adapter, ad.GPU, ad.CPU, tt.gpu, tt.cpu)
		}
		if st.AdapterLoads != tt.loads || st.AdapterDiskLoads != tt.disk || st.AdapterEvictions != tt.evicted {
			t.Errorf("request %d (%q): loads %d disk %d evictions %d, want %d %d %d", i, tt.adapter,
				st.AdapterLoads, st.AdapterDiskLoads, st.AdapterEvictions, tt.loads, tt.disk, tt.evicted)
		}
	}
}

// TestAdapterBatchLimit: with one slot a waiting request for another
// adapter is passed over, keeping its place, and runs once the slot's
// adapter has no running sequence.
func TestAdapterBatchLimit(t *testing.T) {
	c := loraConfig()
	c.MaxLoRAs = 1
	e := mustNew(t, c)
	a1, b, a2 := seq(1, 100, 3, 2, 4), seq(2, 200, 3, 2, 4), seq(3, 300, 3, 2, 4)
	a1.LoRA, b.LoRA, a2.LoRA = "a", "b", "a"
	for _, s := range []*Seq{a1, b, a2} {
		if err := e.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := e.StartStep()
	// a1 and a2 prefill together (6 tokens), loading a from disk:
	// 10 + 6 + 50 = 66 ms.
	if d != 66*time.Millisecond {
		t.Errorf("first step %v, want 66ms", d)
	}
	ad := e.Adapters()
	if !reflect.DeepEqual(ad.Running, []string{"a"}) || !reflect.DeepEqual(ad.Waiting, []string{"b"}) || ad.Slots != 1 {
		t.Errorf("adapters %+v, want running [a], waiting [b], 1 slot", ad)
	}
	e.FinishStep(d, func(Event) {})
	drive(t, e)
	if !(b.FirstTokenAt > a1.FirstTokenAt && b.FirstTokenAt > a2.FirstTokenAt) {
		t.Errorf("first tokens a1 %v a2 %v b %v: b should wait for a slot", a1.FirstTokenAt, a2.FirstTokenAt, b.FirstTokenAt)
	}
	if st := e.Stats(); st.AdapterLoads != 2 || st.AdapterEvictions != 1 {
		t.Errorf("loads %d evictions %d, want 2 and 1", st.AdapterLoads, st.AdapterEvictions)
	}
}

// TestAdaptersOff: without slots an adapter costs nothing and is not
// tracked.
func TestAdaptersOff(t *testing.T) {
	e := mustNew(t, testConfig())
	s := seq(1, 100, 3, 1, 4)
	s.LoRA = "a"
	if err := e.Add(s); err != nil {
		t.Fatal(err)
	}
	steps, _ := drive(t, e)
	if steps[0] != 13*time.Millisecond || e.Stats().AdapterLoads != 0 || e.Adapters().GPU != nil {
		t.Errorf("step %v, loads %d, GPU %v: want 13ms, 0, none", steps[0], e.Stats().AdapterLoads, e.Adapters().GPU)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
