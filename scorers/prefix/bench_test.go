package prefix_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// benchScheduler builds a scheduler with all six in-tree scorers at
// default-ish weights (prefix 3, queue 2, kvcache 2, inflight 1, session 1,
// lora 1), the model and health filters and the max-score picker.
func benchScheduler(tb testing.TB, eps []scheduler.Endpoint) (*scheduler.Scheduler, *prefix.Scorer) {
	return benchSchedulerWith(tb, eps, nil)
}

// benchSchedulerWith is benchScheduler with the prefix scorer passed
// through wrap (nil: used as is).
func benchSchedulerWith(tb testing.TB, eps []scheduler.Endpoint, wrap func(*prefix.Scorer) scheduler.Scorer) (*scheduler.Scheduler, *prefix.Scorer) {
	tb.Helper()
	reg := scorers.InTree()
	weights := []struct {
		typ string
		w   float64
	}{{scorers.TypePrefix, 3}, {scorers.TypeQueue, 2}, {scorers.TypeKVCache, 2}, {scorers.TypeInFlight, 1}, {scorers.TypeSession, 1}, {scorers.TypeLoRA, 1}}
	var entries []scheduler.ScorerEntry
	var synced *prefix.Scorer
	for _, w := range weights {
		sc, err := reg[w.typ](w.typ, nil, scorers.Deps{})
		if err != nil {
			tb.Fatal(err)
		}
		var scorer scheduler.Scorer = sc
		if p, ok := sc.(*prefix.Scorer); ok {
			synced = p
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
	return s, synced
}

func BenchmarkPick(b *testing.B) { benchPick(b, nil) }

// benchPick runs BenchmarkPick's cells with the prefix scorer passed
// through wrap (nil: as is).
func benchPick(b *testing.B, wrap func(*prefix.Scorer) scheduler.Scorer) {
	for _, n := range scorertest.BenchSizes.Endpoints {
		for _, tok := range scorertest.BenchSizes.Tokens {
			b.Run(fmt.Sprintf("endpoints=%d/prompt=%dk", n, tok>>10), func(b *testing.B) {
				s, p := benchSchedulerWith(b, scorertest.BenchEndpoints(n, 1), wrap)
				reqs := scorertest.BenchWorkload(tok, 16, 8, 1024, 1)
				scorertest.Warm(b, s, reqs)
				b.ReportAllocs()
				b.ResetTimer()
				cpu := scorertest.ProcessCPU()
				for i := range b.N {
					scorertest.PickDone(b, s, &reqs[i%len(reqs)])
				}
				scorertest.ReportCPU(b, cpu)
				b.StopTimer()
				reportFloorRatio(b, s, p, reqs)
			})
		}
	}
}

// BenchmarkPickWithoutIndex is BenchmarkPick with the prefix index taken
// out: the prompt's blocks are still hashed, every other scorer, filter and
// the picker run as there, but no block is looked up or recorded. Its
// x-xxhash64 is the part of BenchmarkPick's that no index layout, probe
// order or prefetching can remove (docs/performance.md, "Where a pick's
// time goes").
func BenchmarkPickWithoutIndex(b *testing.B) {
	benchPick(b, func(p *prefix.Scorer) scheduler.Scorer { return prefix.HashOnly(p) })
}

// BenchmarkPickGuarded is BenchmarkPick in adaptive mode: the weights
// carry the load guard (factor 2, slack 6) and the calm weights whose
// choice the herd signal counts, so each pick also computes the calm
// totals and the bound. Compare with BenchmarkPick in the same run.
func BenchmarkPickGuarded(b *testing.B) {
	for _, n := range scorertest.BenchSizes.Endpoints {
		tok := 8 << 10
		b.Run(fmt.Sprintf("endpoints=%d/prompt=%dk", n, tok>>10), func(b *testing.B) {
			s, _ := benchScheduler(b, scorertest.BenchEndpoints(n, 1))
			w := s.Weights()
			g := &scheduler.Weights{Version: w.Version + 1, Values: w.Values, Mode: "calm", Guard: scheduler.Guard{Factor: 2, Slack: 6}, Calm: w.Values}
			if err := s.Publish(g); err != nil {
				b.Fatal(err)
			}
			reqs := scorertest.BenchWorkload(tok, 16, 8, 1024, 1)
			scorertest.Warm(b, s, reqs)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				scorertest.PickDone(b, s, &reqs[i%len(reqs)])
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
	benchPickParallel(b, func(p *prefix.Scorer) scheduler.Scorer { return prefix.HashOnly(p) })
}

func benchPickParallel(b *testing.B, wrap func(*prefix.Scorer) scheduler.Scorer) {
	for _, n := range scorertest.BenchSizes.Endpoints {
		for _, tok := range scorertest.BenchSizes.Tokens {
			b.Run(fmt.Sprintf("endpoints=%d/prompt=%dk", n, tok>>10), func(b *testing.B) {
				s, _ := benchSchedulerWith(b, scorertest.BenchEndpoints(n, 1), wrap)
				reqs := scorertest.BenchWorkload(tok, 16, 8, 1024, 1)
				scorertest.Warm(b, s, reqs)
				var next atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				cpu := scorertest.ProcessCPU()
				b.RunParallel(func(pb *testing.PB) {
					i := next.Add(1 << 20)
					for pb.Next() {
						i++
						scorertest.PickDone(b, s, &reqs[i%uint64(len(reqs))])
					}
				})
				scorertest.ReportCPU(b, cpu)
				b.StopTimer()
				reportParallelRatio(b, s, reqs)
			})
		}
	}
}

// reportFloorRatio reports x-xxhash64: the CPU time of a Pick + Done over
// that of one xxhash64 call over the bytes the prefix scorer hashes of the
// same-sized prompts (the floor of reading the prompt once, as in
// BenchmarkPrefixHash/xxhash64). Picks and hashes alternate in chunks of 32
// on one locked OS thread, timed with the thread's CPU clock (wall time
// where there is none), so load from other processes falls on both alike;
// the hashed prompts are half the workload away from the picked ones, so
// they are as cold. Compare with the ratio of the two benchmarks' ns/op.
func reportFloorRatio(b *testing.B, s *scheduler.Scheduler, p *prefix.Scorer, reqs []scheduler.Request) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	clock := scorertest.ThreadCPU
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
			scorertest.PickDone(b, s, &reqs[(i+j)%len(reqs)])
		}
		t1 := clock()
		for j := range chunk {
			pr := reqs[(i+j+len(reqs)/2)%len(reqs)].Prompt
			sink += xxhash.Sum64(pr[:prefix.HashedBytes(p, pr)])
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
			scorertest.PickDone(b, s, &reqs[(base+j)%len(reqs)])
		}
		t1 := time.Now()
		var wg sync.WaitGroup
		for g := range procs {
			wg.Go(func() {
				for j := range chunk {
					scorertest.PickDone(b, s, &reqs[(base+(g+1)*chunk+j)%len(reqs)])
				}
			})
		}
		wg.Wait()
		serial, parallel = serial+t1.Sub(t0), parallel+time.Since(t1)
	}
	b.ReportMetric(float64(parallel)/float64(procs)/float64(serial), "x-serial")
}
