package scorers

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

func mustQueue(t *testing.T) *Queue {
	q, err := NewQueue("queue", DefaultQueueConfig(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func mustKV(t *testing.T) *KVCache {
	k, err := NewKVCache("kvcache", DefaultKVCacheConfig(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// ep is a shorthand endpoint for table tests.
type ep struct {
	waiting, kv, capacity float64
	state                 scheduler.State
}

func toEndpoints(in []ep) []scheduler.Endpoint {
	out := scorertest.Eps(addrs(len(in))...)
	for i, e := range in {
		out[i].Waiting, out[i].KVUtil, out[i].Capacity, out[i].State = e.waiting, e.kv, e.capacity, e.state
	}
	return out
}

func addrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = string(rune('a'+i)) + ":1"
	}
	return out
}

var (
	stale     = scheduler.StateStale
	unhealthy = scheduler.StateUnhealthy
)

func TestQueue(t *testing.T) {
	tests := []struct {
		name string
		eps  []ep
		want []float64
	}{
		// max 10, min 0, span 10: (10−0)/10 = 1, (10−5)/10 = 0.5, (10−10)/10 = 0.
		{"spread", []ep{{waiting: 0}, {waiting: 5}, {waiting: 10}}, []float64{1, 0.5, 0}},
		// min 2, max 6, span 4: (6−2)/4 = 1, (6−3)/4 = 0.75, (6−6)/4 = 0.
		{"offset", []ep{{waiting: 2}, {waiting: 3}, {waiting: 6}}, []float64{1, 0.75, 0}},
		// all equal → 1 for everyone.
		{"all equal", []ep{{waiting: 4}, {waiting: 4}}, []float64{1, 1}},
		{"all idle", []ep{{}, {}, {}}, []float64{1, 1, 1}},
		{"single", []ep{{waiting: 7}}, []float64{1}},
		// capacity 2 halves the load: 8/2 = 4 vs 4/1 = 4 → equal → 1, 1.
		{"capacity", []ep{{waiting: 8, capacity: 2}, {waiting: 4}}, []float64{1, 1}},
		// stale endpoint scores 0 (treated as most loaded); fresh 1 and 3:
		// (3−1)/2 = 1, (3−3)/2 = 0.
		{"stale is worst", []ep{{waiting: 1}, {waiting: 0, state: stale}, {waiting: 3}}, []float64{1, 0, 0}},
		// one fresh endpoint alone → 1; the unhealthy one 0.
		{"unhealthy", []ep{{waiting: 9}, {waiting: 0, state: unhealthy}}, []float64{1, 0}},
		// no fresh candidate → neutral 1 everywhere.
		{"none fresh", []ep{{waiting: 1, state: stale}, {waiting: 5, state: unhealthy}}, []float64{1, 1}},
		// NaN is unusable → 0; the other alone → 1.
		{"nan", []ep{{waiting: math.NaN()}, {waiting: 2}}, []float64{0, 1}},
		// negative counts are invalid → 0.
		{"negative", []ep{{waiting: -1}, {waiting: 2}, {waiting: 4}}, []float64{0, 1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := scorertest.NewHarness(t, mustQueue(t), toEndpoints(tt.eps))
			got, _ := h.Pick(t, &scheduler.Request{})
			scorertest.CheckScores(t, got, tt.want)
		})
	}
}

func TestKVCache(t *testing.T) {
	tests := []struct {
		name string
		eps  []ep
		want []float64
	}{
		// 1 − 0 = 1, 1 − 0.25 = 0.75, 1 − 1 = 0.
		{"linear", []ep{{kv: 0}, {kv: 0.25}, {kv: 1}}, []float64{1, 0.75, 0}},
		// clamped: 1 − clamp(1.5) = 0, 1 − clamp(−0.5) = 1.
		{"clamped", []ep{{kv: 1.5}, {kv: -0.5}}, []float64{0, 1}},
		// absolute, not min-max: 1 − 0.6 = 0.4, 1 − 0.8 = 0.2 (approximately).
		{"absolute", []ep{{kv: 0.6}, {kv: 0.8}}, []float64{0.4, 0.2}},
		// stale → 0 while another is fresh: 1 − 0.5 = 0.5.
		{"stale", []ep{{kv: 0.5}, {kv: 0, state: stale}}, []float64{0.5, 0}},
		// NaN → 0.
		{"nan", []ep{{kv: math.NaN()}, {kv: 0.1}}, []float64{0, 0.9}},
		// none fresh → neutral 1.
		{"none fresh", []ep{{kv: 0.9, state: stale}, {kv: 0.1, state: unhealthy}}, []float64{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := scorertest.NewHarness(t, mustKV(t), toEndpoints(tt.eps))
			got, _ := h.Pick(t, &scheduler.Request{})
			scorertest.CheckScores(t, got, tt.want)
		})
	}
}

func TestInFlight(t *testing.T) {
	tests := []struct {
		name     string
		inflight []int // decisions left open per endpoint
		capacity []float64
		want     []float64
	}{
		// max 2, min 0: (2−2)/2 = 0, (2−1)/2 = 0.5, (2−0)/2 = 1.
		{"spread", []int{2, 1, 0}, nil, []float64{0, 0.5, 1}},
		// all idle → 1.
		{"idle", []int{0, 0, 0}, nil, []float64{1, 1, 1}},
		// all equal busy → 1.
		{"equal", []int{3, 3}, nil, []float64{1, 1}},
		// capacity: 4/2 = 2 vs 1/1 = 1 vs 0: (2−2)/2 = 0, (2−1)/2 = 0.5, 1.
		{"capacity", []int{4, 1, 0}, []float64{2, 1, 1}, []float64{0, 0.5, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := NewInFlight("inflight", DefaultInFlightConfig(), Deps{})
			if err != nil {
				t.Fatal(err)
			}
			es := scorertest.Eps(addrs(len(tt.inflight))...)
			for i := range es {
				if tt.capacity != nil {
					es[i].Capacity = tt.capacity[i]
				}
			}
			h := scorertest.NewHarness(t, in, es)
			var open []*scheduler.Decision
			for i, n := range tt.inflight {
				for range n {
					// The subset hint forces the pick onto endpoint i.
					d, err := h.S.Pick(t.Context(), &scheduler.Request{Subset: []string{es[i].Address}})
					if err != nil {
						t.Fatal(err)
					}
					open = append(open, d)
				}
			}
			got, _ := h.Pick(t, &scheduler.Request{})
			scorertest.CheckScores(t, got, tt.want)
			for _, d := range open {
				d.Done(scheduler.Outcome{})
			}
		})
	}
}

func TestPendingPrefill(t *testing.T) {
	// Prompts (bytes) left waiting for their first byte per endpoint.
	tests := []struct {
		name     string
		prompts  [][]int
		firstB   []bool // first byte seen for endpoint i's requests
		capacity []float64
		want     []float64
	}{
		// pending 3000, 1000, 0: (3000−3000)/3000 = 0, (3000−1000)/3000 = 0.667, 1.
		{"spread", [][]int{{1000, 2000}, {1000}, nil}, nil, nil, []float64{0, 2.0 / 3, 1}},
		// endpoint 0's requests got their first byte: pending 0, 1000, 0 →
		// 1, (1000−1000)/1000 = 0, 1.
		{"first byte released", [][]int{{1000, 2000}, {1000}, nil}, []bool{true, false, false}, nil, []float64{1, 0, 1}},
		// nothing pending anywhere → 1.
		{"idle", [][]int{nil, nil}, nil, nil, []float64{1, 1}},
		// capacity 2 halves 4000 to 2000, against 1000 and 0:
		// (2000−2000)/2000 = 0, (2000−1000)/2000 = 0.5, 1.
		{"capacity", [][]int{{4000}, {1000}, nil}, nil, []float64{2, 1, 1}, []float64{0, 0.5, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pp, err := NewPendingPrefill("pending-prefill", DefaultPendingPrefillConfig(), Deps{})
			if err != nil {
				t.Fatal(err)
			}
			es := scorertest.Eps(addrs(len(tt.prompts))...)
			for i := range es {
				if tt.capacity != nil {
					es[i].Capacity = tt.capacity[i]
				}
			}
			h := scorertest.NewHarness(t, pp, es)
			var open []*scheduler.Decision
			for i, ps := range tt.prompts {
				for _, n := range ps {
					d, err := h.S.Pick(t.Context(), &scheduler.Request{Prompt: make([]byte, n), Subset: []string{es[i].Address}})
					if err != nil {
						t.Fatal(err)
					}
					if tt.firstB != nil && tt.firstB[i] {
						d.FirstByte()
					}
					open = append(open, d)
				}
			}
			got, _ := h.Pick(t, &scheduler.Request{})
			scorertest.CheckScores(t, got, tt.want)
			for _, d := range open {
				d.Done(scheduler.Outcome{})
			}
			for _, e := range h.S.Pool().Pointers() {
				if e.PendingPrefill() != 0 {
					t.Errorf("%s: %d bytes pending after Done", e.Address, e.PendingPrefill())
				}
			}
		})
	}
}

func TestLoRA(t *testing.T) {
	// legacy: lora_requests_info only (running adapters, max_lora).
	legacy := func(max int, active ...string) scheduler.LoRAState {
		return scheduler.LoRAState{Active: active, Max: max}
	}
	// res: residency reported, max slots, used slots, GPU adapters.
	res := func(max, used int, gpu ...string) scheduler.LoRAState {
		return scheduler.LoRAState{Residency: true, Max: max, Used: used, GPU: gpu}
	}
	cpu := res(4, 4, "a", "b", "c", "d")
	cpu.CPU = []string{"x"}
	pinned := res(2, 2, "a", "b")
	pinned.Pinned = []string{"a", "b"}
	busy := res(2, 2, "a", "b")
	busy.Active, busy.Waiting = []string{"a"}, []string{"b"}
	halfBusy := res(2, 2, "a", "b")
	halfBusy.Active = []string{"a"}
	tests := []struct {
		name  string
		lora  string
		state []scheduler.LoRAState
		want  []float64
	}{
		// on the GPU → 1.0; in the CPU cache → 0.7; free slot (3 < 4) →
		// 0.6; slots full of idle unpinned adapters → 0.3.
		{"tiers", "x", []scheduler.LoRAState{res(4, 1, "x"), cpu, res(4, 3, "a", "b", "c"), res(2, 2, "a", "b")},
			[]float64{1, 0.7, 0.6, 0.3}},
		// full (2 == 2) and every GPU adapter pinned, or busy (a running,
		// b waiting) → 0 saturated; one idle (b) → 0.3.
		{"saturated", "x", []scheduler.LoRAState{pinned, busy, halfBusy}, []float64{0, 0, 0.3}},
		// nothing loaded and the slot count unknown: a free slot (0.6);
		// unknown count with adapters loaded and idle: evictable (0.3).
		{"unknown max", "x", []scheduler.LoRAState{res(0, 0), res(0, 1, "a")}, []float64{0.6, 0.3}},
		// legacy: running → 1.0; fewer busy than slots (1 < 2) → 0.3,
		// all busy (2 == 2) → 0; max unknown (0) → 0.
		{"legacy", "x", []scheduler.LoRAState{legacy(2, "x"), legacy(2, "y"), legacy(2, "y", "z"), legacy(0)},
			[]float64{1, 0.3, 0, 0}},
		// base-model request: neutral 1 for all.
		{"base model", "", []scheduler.LoRAState{legacy(1, "y"), res(1, 1, "y")}, []float64{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewLoRA("lora", DefaultLoRAConfig(), Deps{})
			if err != nil {
				t.Fatal(err)
			}
			es := scorertest.Eps(addrs(len(tt.state))...)
			for i := range es {
				es[i].LoRA = tt.state[i]
			}
			h := scorertest.NewHarness(t, l, es)
			got, _ := h.Pick(t, &scheduler.Request{LoRA: tt.lora})
			scorertest.CheckScores(t, got, tt.want)
		})
	}
}

// TestLoRAAllocs: scoring allocates nothing, on residency and legacy
// endpoints alike.
func TestLoRAAllocs(t *testing.T) {
	l, err := NewLoRA("lora", DefaultLoRAConfig(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	es := scorertest.Eps(addrs(4)...)
	es[0].LoRA = scheduler.LoRAState{Residency: true, Max: 2, Used: 2, GPU: []string{"a", "b"}, Pinned: []string{"a"}, Active: []string{"b"}}
	es[1].LoRA = scheduler.LoRAState{Residency: true, Max: 4, Used: 1, GPU: []string{"a"}, CPU: []string{"x"}}
	es[2].LoRA = scheduler.LoRAState{Active: []string{"a"}, Max: 2}
	ptrs := make([]*scheduler.Endpoint, len(es))
	for i := range es {
		ptrs[i] = &es[i]
	}
	out := make([]float64, len(es))
	req := &scheduler.Request{LoRA: "y"}
	if n := testing.AllocsPerRun(200, func() { l.Score(nil, req, ptrs, out) }); n != 0 {
		t.Errorf("Score: %v allocations, want 0", n)
	}
}

func TestNeutralCounters(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	q, err := NewQueue("queue", DefaultQueueConfig(), Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	h := scorertest.NewHarness(t, q, toEndpoints([]ep{{waiting: 1}, {state: stale}, {waiting: math.NaN()}}))
	h.Pick(t, &scheduler.Request{})                               // stale 1, invalid 1
	h.Pick(t, &scheduler.Request{Subset: []string{"b:1"}})        // stale 1, no_fresh 1
	h.Pick(t, &scheduler.Request{Subset: []string{"a:1", "b:1"}}) // stale 1
	want := `
# HELP trimtab_scorer_neutral_scores_total Scores a scorer replaced by its neutral value because data was missing or stale, by reason.
# TYPE trimtab_scorer_neutral_scores_total counter
trimtab_scorer_neutral_scores_total{reason="invalid",scorer="queue"} 1
trimtab_scorer_neutral_scores_total{reason="no_fresh",scorer="queue"} 1
trimtab_scorer_neutral_scores_total{reason="stale",scorer="queue"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), neutralMetricName); err != nil {
		t.Error(err)
	}
}
