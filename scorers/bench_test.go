package scorers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/trimtab/trimtab/scheduler"
)

// benchBase is the fixed request time of benchmark workloads.
var benchBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// benchEndpoints returns n fresh endpoints serving model "m" with varied
// load and LoRA state, deterministic for a seed.
func benchEndpoints(n int, seed uint64) []scheduler.Endpoint {
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
			ScrapedAt: benchBase,
		}
	}
	return eps
}

// benchWorkload returns nReq requests drawn from families × variants
// prompts of tokens tokens (4 bytes each): within a family the first half
// of the prompt is shared (a system prompt), the second half differs.
func benchWorkload(tokens, families, variants, nReq int, seed uint64) []scheduler.Request {
	rng := rand.New(rand.NewPCG(seed, 2))
	size := tokens * 4
	prompts := make([][]byte, 0, families*variants)
	for range families {
		sys := make([]byte, size/2)
		fill(rng, sys)
		for range variants {
			p := make([]byte, size)
			copy(p, sys)
			fill(rng, p[size/2:])
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
			Arrival:   benchBase.Add(time.Duration(i) * time.Millisecond),
		}
	}
	return reqs
}

func fill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// benchScheduler builds a scheduler with all six in-tree scorers at
// default-ish weights (prefix 3, queue 2, kvcache 2, inflight 1, session 1,
// lora 1), the model and health filters and the max-score picker.
func benchScheduler(tb testing.TB, eps []scheduler.Endpoint) (*scheduler.Scheduler, *Prefix) {
	return benchSchedulerWith(tb, eps, nil)
}

// benchSchedulerWith is benchScheduler with the prefix scorer passed
// through wrap (nil: used as is).
func benchSchedulerWith(tb testing.TB, eps []scheduler.Endpoint, wrap func(*Prefix) scheduler.Scorer) (*scheduler.Scheduler, *Prefix) {
	tb.Helper()
	reg := InTree()
	weights := []struct {
		typ string
		w   float64
	}{{TypePrefix, 3}, {TypeQueue, 2}, {TypeKVCache, 2}, {TypeInFlight, 1}, {TypeSession, 1}, {TypeLoRA, 1}}
	var entries []scheduler.ScorerEntry
	var prefix *Prefix
	for _, w := range weights {
		sc, err := reg[w.typ](w.typ, nil, Deps{})
		if err != nil {
			tb.Fatal(err)
		}
		var scorer scheduler.Scorer = sc
		if p, ok := sc.(*Prefix); ok {
			prefix = p
			if wrap != nil {
				scorer = wrap(p)
			}
		}
		entries = append(entries, scheduler.ScorerEntry{Name: w.typ, Type: w.typ, Scorer: scorer, Weight: w.w})
	}
	s, err := scheduler.New(scheduler.DefaultConfig(), entries,
		[]scheduler.Filter{scheduler.ModelFilter{}, scheduler.HealthyFilter{}}, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	s.SetEndpoints(eps)
	return s, prefix
}

func pickDone(tb testing.TB, s *scheduler.Scheduler, req *scheduler.Request) {
	d, err := s.Pick(context.Background(), req)
	if err != nil {
		tb.Fatal(err)
	}
	d.Done(scheduler.Outcome{})
}

// warm runs every request through the scheduler twice, so the prefix index,
// the session table and every pooled buffer are at steady state.
func warm(tb testing.TB, s *scheduler.Scheduler, reqs []scheduler.Request) {
	for range 2 {
		for i := range reqs {
			pickDone(tb, s, &reqs[i])
		}
	}
}

var benchSizes = struct {
	endpoints, tokens []int
}{[]int{8, 64, 256}, []int{1 << 10, 8 << 10, 32 << 10}}

func BenchmarkPick(b *testing.B) { benchPick(b, nil) }

// benchPick runs BenchmarkPick's cells with the prefix scorer passed
// through wrap (nil: as is).
func benchPick(b *testing.B, wrap func(*Prefix) scheduler.Scorer) {
	for _, n := range benchSizes.endpoints {
		for _, tok := range benchSizes.tokens {
			b.Run(fmt.Sprintf("endpoints=%d/prompt=%dk", n, tok>>10), func(b *testing.B) {
				s, p := benchSchedulerWith(b, benchEndpoints(n, 1), wrap)
				reqs := benchWorkload(tok, 16, 8, 1024, 1)
				warm(b, s, reqs)
				b.ReportAllocs()
				b.ResetTimer()
				cpu := processCPU()
				for i := range b.N {
					pickDone(b, s, &reqs[i%len(reqs)])
				}
				reportCPU(b, cpu)
				b.StopTimer()
				reportFloorRatio(b, s, p, reqs)
			})
		}
	}
}

// hashOnly is the prefix scorer without its index: it hashes the request's
// blocks as Prefix.Score does, then scores every candidate 0 and records
// nothing. BenchmarkPickWithoutIndex uses it to measure what a pick costs
// before the index does any work.
type hashOnly struct{ p *Prefix }

func (hashOnly) Category() scheduler.Category { return scheduler.CategoryAffinity }

func (h hashOnly) Score(cs *scheduler.CycleState, req *scheduler.Request, _ []*scheduler.Endpoint, out []float64) {
	if n := h.p.blocks(req.Prompt); n > 0 {
		h.p.hashBlocks(h.p.scratch(cs), req, n)
	}
	clear(out)
}

// BenchmarkPickWithoutIndex is BenchmarkPick with the prefix index taken
// out: the prompt's blocks are still hashed, every other scorer, filter and
// the picker run as there, but no block is looked up or recorded. Its
// x-xxhash64 is the part of BenchmarkPick's that no index layout, probe
// order or prefetching can remove (docs/performance.md, "Where a pick's
// time goes").
func BenchmarkPickWithoutIndex(b *testing.B) {
	benchPick(b, func(p *Prefix) scheduler.Scorer { return hashOnly{p} })
}

// BenchmarkPickGuarded is BenchmarkPick in adaptive mode: the weights
// carry the load guard (factor 2, slack 6) and the calm weights whose
// choice the herd signal counts, so each pick also computes the calm
// totals and the bound. Compare with BenchmarkPick in the same run.
func BenchmarkPickGuarded(b *testing.B) {
	for _, n := range benchSizes.endpoints {
		tok := 8 << 10
		b.Run(fmt.Sprintf("endpoints=%d/prompt=%dk", n, tok>>10), func(b *testing.B) {
			s, _ := benchScheduler(b, benchEndpoints(n, 1))
			w := s.Weights()
			g := &scheduler.Weights{Version: w.Version + 1, Values: w.Values, Mode: "calm", Guard: scheduler.Guard{Factor: 2, Slack: 6}, Calm: w.Values}
			if err := s.Publish(g); err != nil {
				b.Fatal(err)
			}
			reqs := benchWorkload(tok, 16, 8, 1024, 1)
			warm(b, s, reqs)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				pickDone(b, s, &reqs[i%len(reqs)])
			}
		})
	}
}

func BenchmarkPickParallel(b *testing.B) { benchPickParallel(b, nil) }

// BenchmarkPickParallelWithoutIndex is BenchmarkPickParallel with the
// prefix index taken out, as in BenchmarkPickWithoutIndex: its x-serial is
// what the scheduler, the other scorers and the machine allow two cores,
// measured beside the full pick's.
func BenchmarkPickParallelWithoutIndex(b *testing.B) {
	benchPickParallel(b, func(p *Prefix) scheduler.Scorer { return hashOnly{p} })
}

func benchPickParallel(b *testing.B, wrap func(*Prefix) scheduler.Scorer) {
	for _, n := range benchSizes.endpoints {
		for _, tok := range benchSizes.tokens {
			b.Run(fmt.Sprintf("endpoints=%d/prompt=%dk", n, tok>>10), func(b *testing.B) {
				s, _ := benchSchedulerWith(b, benchEndpoints(n, 1), wrap)
				reqs := benchWorkload(tok, 16, 8, 1024, 1)
				warm(b, s, reqs)
				var next atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				cpu := processCPU()
				b.RunParallel(func(pb *testing.PB) {
					i := next.Add(1 << 20)
					for pb.Next() {
						i++
						pickDone(b, s, &reqs[i%uint64(len(reqs))])
					}
				})
				reportCPU(b, cpu)
				b.StopTimer()
				reportParallelRatio(b, s, reqs)
			})
		}
	}
}

// BenchmarkPrefixIndex measures the prefix index: insert is a Pick with
// only the prefix scorer that hashes a never-seen 8k-token prompt (128
// blocks), scores it against 64 endpoints and records it on the chosen one,
// evicting at capacity once the index is full; match is Score alone for
// prompts from a warm workload against 64 candidates. insert reports the
// index's own bytes per cached (block, endpoint) entry (B/block); memstats
// fills a fresh index and checks that accounting against runtime.MemStats
// (heap-B/block).
func BenchmarkPrefixIndex(b *testing.B) {
	const nEps, tokens = 64, 8 << 10
	for _, capacity := range []int{1 << 12, 1 << 15} {
		b.Run(fmt.Sprintf("insert/capacity=%d", capacity), func(b *testing.B) {
			cfg := DefaultPrefixConfig()
			cfg.Capacity = capacity
			h := newHarness(b, mustPrefix(b, cfg), benchEndpoints(nEps, 1))
			rng := rand.New(rand.NewPCG(3, 4))
			prompt := make([]byte, tokens*4)
			req := &scheduler.Request{Model: "m", Prompt: prompt}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for range b.N {
				// A new random first block makes the whole chain new.
				for j := range 8 {
					prompt[j] = byte(rng.Uint32())
				}
				h.pickDone(b, req)
			}
			b.StopTimer()
			reportCPU(b, cpu)
			reportBytesPerBlock(b, h.prefix(b))
		})
	}
	b.Run("match", func(b *testing.B) {
		p := mustPrefix(b, DefaultPrefixConfig())
		h := newHarness(b, p, benchEndpoints(nEps, 1))
		reqs := benchWorkload(tokens, 16, 8, 512, 1)
		for i := range reqs {
			h.pickDone(b, &reqs[i])
		}
		cs, eps := h.cycleState(b), h.s.Pool().Pointers()
		out := make([]float64, len(eps))
		b.ReportAllocs()
		b.ResetTimer()
		cpu := processCPU()
		for i := range b.N {
			p.Score(cs, &reqs[i%len(reqs)], eps, out)
		}
		reportCPU(b, cpu)
	})
	b.Run("memstats", func(b *testing.B) {
		// Fills a fresh index with b.N × 128 entries and compares the
		// heap growth with the index's own accounting.
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		p := mustPrefix(b, DefaultPrefixConfig())
		h := newHarness(b, p, benchEndpoints(nEps, 1))
		rng := rand.New(rand.NewPCG(5, 6))
		prompt := make([]byte, tokens*4)
		req := &scheduler.Request{Model: "m", Prompt: prompt}
		b.ResetTimer()
		for range b.N {
			for j := range 8 {
				prompt[j] = byte(rng.Uint32())
			}
			h.pickDone(b, req)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		st := p.Stats()
		if st.Blocks > 0 {
			b.ReportMetric(float64(st.Bytes)/float64(st.Blocks), "B/block")
			heap := float64(after.HeapAlloc) - float64(before.HeapAlloc) - float64(len(prompt))
			b.ReportMetric(heap/float64(st.Blocks), "heap-B/block")
		}
		runtime.KeepAlive(h)
	})
}

// reportFloorRatio reports x-xxhash64: the CPU time of a Pick + Done over
// that of one xxhash64 call over the bytes the prefix scorer hashes of the
// same-sized prompts (the floor of reading the prompt once, as in
// BenchmarkPrefixHash/xxhash64). Picks and hashes alternate in chunks of 32
// on one locked OS thread, timed with the thread's CPU clock (wall time
// where there is none), so load from other processes falls on both alike;
// the hashed prompts are half the workload away from the picked ones, so
// they are as cold. Compare with the ratio of the two benchmarks' ns/op.
func reportFloorRatio(b *testing.B, s *scheduler.Scheduler, p *Prefix, reqs []scheduler.Request) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	clock := threadCPU
	if clock() == 0 {
		clock = func() int64 { return time.Now().UnixNano() }
	}
	const chunk, rounds = 32, 64
	var pick, hash int64
	var sink uint64
	for r := range rounds {
		i := r * chunk
		t0 := clock()
		for j := range chunk {
			pickDone(b, s, &reqs[(i+j)%len(reqs)])
		}
		t1 := clock()
		for j := range chunk {
			pr := reqs[(i+j+len(reqs)/2)%len(reqs)].Prompt
			sink += xxhash.Sum64(pr[:p.blocks(pr)*p.blockBytes])
		}
		t2 := clock()
		pick, hash = pick+t1-t0, hash+t2-t1
	}
	runtime.KeepAlive(sink)
	if hash > 0 {
		b.ReportMetric(float64(pick)/float64(hash), "x-xxhash64")
	}
}

// reportParallelRatio reports x-serial: the wall time per pick with
// GOMAXPROCS goroutines picking at once over that of one goroutine alone,
// measured in alternating chunks (so a machine whose speed drifts over the
// run, as a shared VM's does, affects both alike). 1/GOMAXPROCS is perfect
// scaling; 1 means the extra cores add nothing. Compare with the ratio of
// PickParallel's ns/op to Pick's at -cpu 1, measured minutes apart.
func reportParallelRatio(b *testing.B, s *scheduler.Scheduler, reqs []scheduler.Request) {
	procs := runtime.GOMAXPROCS(0)
	if procs < 2 {
		return
	}
	const chunk, rounds = 256, 16
	var serial, parallel time.Duration
	for r := range rounds {
		base := r * chunk * procs
		t0 := time.Now()
		for j := range chunk {
			pickDone(b, s, &reqs[(base+j)%len(reqs)])
		}
		t1 := time.Now()
		var wg sync.WaitGroup
		for g := range procs {
			wg.Go(func() {
				for j := range chunk {
					pickDone(b, s, &reqs[(base+(g+1)*chunk+j)%len(reqs)])
				}
			})
		}
		wg.Wait()
		serial, parallel = serial+t1.Sub(t0), parallel+time.Since(t1)
	}
	b.ReportMetric(float64(parallel)/float64(procs)/float64(serial), "x-serial")
}

// reportCPU reports the process CPU time per op since cpu (from
// processCPU): on a shared machine ns/op includes time spent waiting for a
// core, cpu-ns/op does not (it does include GC work).
func reportCPU(b *testing.B, cpu int64) {
	if cpu > 0 && b.N > 0 {
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	}
}

func reportBytesPerBlock(b *testing.B, p *Prefix) {
	st := p.Stats()
	if st.Blocks > 0 {
		b.ReportMetric(float64(st.Bytes)/float64(st.Blocks), "B/block")
		b.ReportMetric(float64(st.Blocks), "blocks")
	}
}

// BenchmarkPrefixHash measures the part of a Pick no index or scheduler
// work can remove: cutting a prompt into blocks and computing their chained
// hashes (plus grouping them by shard), over the same cold-ish workload
// as BenchmarkPick (128 distinct prompts of the given size, in turn). At 8k
// tokens this is 128 blocks of 256 bytes; at 32k, 512 blocks (the default
// max_blocks, 2048, covers the whole prompt), and bytes/s counts them. The
// xxhash64 row hashes the same bytes in one xxhash64 call, without block
// boundaries: the floor of reading the prompt once, which BenchmarkPick is
// compared with (scorers/README.md).
func BenchmarkPrefixHash(b *testing.B) {
	for _, tok := range benchSizes.tokens {
		reqs := benchWorkload(tok, 16, 8, 128, 1)
		p := mustPrefix(b, DefaultPrefixConfig())
		hashed := p.blocks(reqs[0].Prompt) * p.blockBytes
		b.Run(fmt.Sprintf("blocks/prompt=%dk", tok>>10), func(b *testing.B) {
			sc := p.scratch(newHarness(b, p, benchEndpoints(8, 1)).cycleState(b))
			b.SetBytes(int64(hashed))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req := &reqs[i%len(reqs)]
				i++
				p.hashBlocks(sc, req, p.blocks(req.Prompt))
			}
		})
		b.Run(fmt.Sprintf("xxhash64/prompt=%dk", tok>>10), func(b *testing.B) {
			b.SetBytes(int64(hashed))
			var sink uint64
			i := 0
			for b.Loop() {
				sink += xxhash.Sum64(reqs[i%len(reqs)].Prompt[:hashed])
				i++
			}
			runtime.KeepAlive(sink)
		})
	}
}
