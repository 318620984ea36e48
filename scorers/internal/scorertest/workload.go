package scorertest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// BenchBase is the fixed request time of benchmark workloads.
var BenchBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// BenchEndpoints returns n fresh endpoints serving model "m" with varied
// load and LoRA state, deterministic for a seed.
func BenchEndpoints(n int, seed uint64) []scheduler.Endpoint {
	rng := rand.New(rand.NewPCG(seed, 1))
	eps := make([]scheduler.Endpoint, n)
	for i := range eps {
		eps[i] = scheduler.Endpoint{
			Address:   fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250+1),
			Models:    []string{"m"},
			Waiting:   float64(rng.IntN(10)),
			Running:   float64(rng.IntN(20)),
			KVUtil:    rng.Float64(),
			LoRA:      scheduler.LoRAState{Active: []string{fmt.Sprintf("a%d", i%4)}, Max: 1 + i%2},
			ScrapedAt: BenchBase,
		}
	}
	return eps
}

// BenchWorkload returns nReq requests drawn from families × variants
// prompts of tokens tokens (4 bytes each): within a family the first half
// of the prompt is shared (a system prompt), the second half differs.
func BenchWorkload(tokens, families, variants, nReq int, seed uint64) []scheduler.Request {
	rng := rand.New(rand.NewPCG(seed, 2))
	size := tokens * 4
	prompts := make([][]byte, 0, families*variants)
	for range families {
		sys := make([]byte, size/2)
		Fill(rng, sys)
		for range variants {
			p := make([]byte, size)
			copy(p, sys)
			Fill(rng, p[size/2:])
			prompts = append(prompts, p)
		}
	}
	loras := []string{"", "a1", "a2"}
	reqs := make([]scheduler.Request, nReq)
	for i := range reqs {
		reqs[i] = scheduler.Request{
			ID:        fmt.Sprintf("r-%d", i),
			Model:     "m",
			LoRA:      loras[i%len(loras)],
			Prompt:    prompts[rng.IntN(len(prompts))],
			SessionID: fmt.Sprintf("s-%d", i%512),
			Arrival:   BenchBase.Add(time.Duration(i) * time.Millisecond),
		}
	}
	return reqs
}

// Fill sets b to random bytes from rng.
func Fill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// PickDone runs one decision on s and finishes it.
func PickDone(tb testing.TB, s *scheduler.Scheduler, req *scheduler.Request) {
	d, err := s.Pick(context.Background(), req)
	if err != nil {
		tb.Fatal(err)
	}
	d.Done(scheduler.Outcome{})
}

// Warm runs every request through the scheduler twice, so the prefix index,
// the session table and every pooled buffer are at steady state.
func Warm(tb testing.TB, s *scheduler.Scheduler, reqs []scheduler.Request) {
	for range 2 {
		for i := range reqs {
			PickDone(tb, s, &reqs[i])
		}
	}
}

// BenchPicks warms s with reqs, then times b.N picks over them in turn,
// each released at its first byte and finished: the loop of the
// composition benchmarks (BenchmarkPickTokenLoad, BenchmarkPickTimeCost).
func BenchPicks(b *testing.B, s *scheduler.Scheduler, reqs []scheduler.Request) {
	Warm(b, s, reqs)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		d, err := s.Pick(context.Background(), &reqs[i%len(reqs)])
		if err != nil {
			b.Fatal(err)
		}
		d.FirstByte()
		d.Done(scheduler.Outcome{})
	}
}

// BenchSizes are the benchmarks' pool sizes and prompt lengths in tokens.
var BenchSizes = struct {
	Endpoints, Tokens []int
}{[]int{8, 64, 256}, []int{1 << 10, 8 << 10, 32 << 10}}

// ReportCPU reports the process CPU time per op since cpu (from
// ProcessCPU): on a shared machine ns/op includes time spent waiting for a
// core, cpu-ns/op does not (it does include GC work).
func ReportCPU(b *testing.B, cpu int64) {
	if cpu > 0 && b.N > 0 {
		b.ReportMetric(float64(ProcessCPU()-cpu)/float64(b.N), "cpu-ns/op")
	}
}

// CheckScores fails t unless got and want have the same length and agree
// within 1e-9 at every index.
func CheckScores(t *testing.T, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d scores %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) >= 1e-9 {
			t.Errorf("score[%d] = %v, want %v (all: %v)", i, got[i], want[i], got)
		}
	}
}
