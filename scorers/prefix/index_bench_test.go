package prefix

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

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
			cfg := DefaultConfig()
			cfg.Capacity = capacity
			h := scorertest.NewHarness(b, mustPrefix(b, cfg), scorertest.BenchEndpoints(nEps, 1))
			rng := rand.New(rand.NewPCG(3, 4))
			prompt := make([]byte, tokens*4)
			req := &scheduler.Request{Model: "m", Prompt: prompt}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := scorertest.ProcessCPU()
			for range b.N {
				// A new random first block makes the whole chain new.
				for j := range 8 {
					prompt[j] = byte(rng.Uint32())
				}
				h.PickDone(b, req)
			}
			b.StopTimer()
			scorertest.ReportCPU(b, cpu)
			reportBytesPerBlock(b, scorerOf(b, h))
		})
	}
	b.Run("match", func(b *testing.B) {
		p := mustPrefix(b, DefaultConfig())
		h := scorertest.NewHarness(b, p, scorertest.BenchEndpoints(nEps, 1))
		reqs := scorertest.BenchWorkload(tokens, 16, 8, 512, 1)
		for i := range reqs {
			h.PickDone(b, &reqs[i])
		}
		cs, eps := h.CycleState(b), h.S.Pool().Pointers()
		out := make([]float64, len(eps))
		b.ReportAllocs()
		b.ResetTimer()
		cpu := scorertest.ProcessCPU()
		for i := range b.N {
			p.Score(cs, &reqs[i%len(reqs)], eps, out)
		}
		scorertest.ReportCPU(b, cpu)
	})
	b.Run("memstats", func(b *testing.B) {
		// Fills a fresh index with b.N × 128 entries and compares the
		// heap growth with the index's own accounting.
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		p := mustPrefix(b, DefaultConfig())
		h := scorertest.NewHarness(b, p, scorertest.BenchEndpoints(nEps, 1))
		rng := rand.New(rand.NewPCG(5, 6))
		prompt := make([]byte, tokens*4)
		req := &scheduler.Request{Model: "m", Prompt: prompt}
		b.ResetTimer()
		for range b.N {
			for j := range 8 {
				prompt[j] = byte(rng.Uint32())
			}
			h.PickDone(b, req)
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

func reportBytesPerBlock(b *testing.B, p *Scorer) {
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
	for _, tok := range scorertest.BenchSizes.Tokens {
		reqs := scorertest.BenchWorkload(tok, 16, 8, 128, 1)
		p := mustPrefix(b, DefaultConfig())
		hashed := p.blocks(reqs[0].Prompt) * p.blockBytes
		b.Run(fmt.Sprintf("blocks/prompt=%dk", tok>>10), func(b *testing.B) {
			sc := p.scratch(scorertest.NewHarness(b, p, scorertest.BenchEndpoints(8, 1)).CycleState(b))
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
