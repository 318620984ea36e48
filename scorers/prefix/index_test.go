package prefix

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

// TestPrefixLazyPromotionKeepsNewest checks lazy promotion, recording as
// the scorer does (nothing when fresh, else record), against an exact LRU
// model at a capacity where it is on: an endpoint never holds more than
// its capacity, and it always holds the newest capacity − window − run
// distinct blocks recorded on it (run: the longest run recorded at once),
// whatever promotion skipped.
func TestPrefixLazyPromotionKeepsNewest(t *testing.T) {
	const capacity, maxRun = 128, 24
	window := int(promotionWindow(capacity, 0)) // the widest it gets
	kept := capacity - window - maxRun
	if window == 0 {
		t.Fatal("lazy promotion is off at this capacity")
	}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 11))
		var sh shard
		sh.ensureIDs(4)
		universe := make([]uint64, 500)
		for i := range universe {
			universe[i] = rng.Uint64() & hashMask
		}
		model := map[uint32][]uint64{} // id → distinct hashes, newest first
		skipped := 0
		for step := range 2000 {
			id := uint32(1 + rng.IntN(3))
			if rng.IntN(40) == 0 { // often, so lists spend time with room
				sh.purge(id)
				delete(model, id)
				continue
			}
			// Runs drawn from a hot subset most of the time, so entries
			// are re-recorded while still fresh.
			pool := universe
			if rng.IntN(4) > 0 {
				pool = universe[:60]
			}
			var hs []uint64
			for range 1 + rng.IntN(maxRun) {
				if h := pool[rng.IntN(len(pool))]; !slices.Contains(hs, h) {
					hs = append(hs, h)
				}
			}
			blocks := make([]uint16, len(hs))
			seen := make([]seenAt, len(hs))
			for i := range hs {
				blocks[i] = uint16(i)
				seen[i] = seenAt{pos: nilIdx}
			}
			if sh.freshLocked(id, capacity, blocks, hs, seen) {
				skipped++
			} else {
				sh.record(id, capacity, blocks, hs, seen)
			}
			l := model[id]
			for i := len(hs) - 1; i >= 0; i-- {
				if j := slices.Index(l, hs[i]); j >= 0 {
					l = slices.Delete(l, j, j+1)
				}
				l = append([]uint64{hs[i]}, l...)
			}
			model[id] = l
			if err := shardConsistent(&sh); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			held := map[uint64]bool{}
			for pos := sh.lists[id].Head; pos != nilIdx; pos = sh.slots[pos].Next {
				held[keyHash(sh.slots[pos].Key)] = true
			}
			if len(held) > capacity {
				t.Fatalf("seed %d step %d: id %d holds %d, capacity %d", seed, step, id, len(held), capacity)
			}
			for k, h := range l[:min(len(l), kept)] {
				if !held[h] {
					t.Fatalf("seed %d step %d: id %d lost its %d-th newest block %x (guaranteed: newest %d)", seed, step, id, k, h, kept)
				}
			}
		}
		if skipped == 0 {
			t.Fatalf("seed %d: no record was skipped; the test does not exercise lazy promotion", seed)
		}
	}
}

// TestPrefixFreshRecordWritesNothing checks that recording a prompt again
// while its blocks are fresh leaves every shard's sequence number alone
// (no write lock, nothing for optimistic readers to retry), and that a
// prompt with a new block does write.
func TestPrefixFreshRecordWritesNothing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Capacity = 1 << 12 // 256 per shard: lazy promotion on
	p := mustPrefix(t, cfg)
	h := scorertest.NewHarness(t, p, scorertest.BenchEndpoints(4, 1))
	rng := rand.New(rand.NewPCG(1, 2))
	pr := make([]byte, 64*256)
	scorertest.Fill(rng, pr)
	addr := h.S.Pool().Endpoints[2].Address
	seqs := func() []uint32 {
		var s []uint32
		for i := range p.shards {
			s = append(s, p.shards[i].seq.Load())
		}
		return s
	}
	route(t, h, scheduler.Request{Model: "m", Prompt: pr}, addr)
	first := seqs()
	route(t, h, scheduler.Request{Model: "m", Prompt: pr}, addr)
	if got := seqs(); !slices.Equal(got, first) {
		t.Fatalf("re-recording a fresh prompt changed shard sequences %v → %v", first, got)
	}
	longer := append(slices.Clone(pr), make([]byte, 256)...)
	scorertest.Fill(rng, longer[len(pr):])
	route(t, h, scheduler.Request{Model: "m", Prompt: longer}, addr)
	if got := seqs(); slices.Equal(got, first) {
		t.Fatal("recording a new block changed no shard sequence")
	}
	checkIndex(t, p)
}

// TestPrefixOptimisticReadsSeeWholeStates races lock-free lookups against
// a writer that empties an endpoint's entries and records them again, one
// lock hold each (the purge's backward shifts and table shrinks move
// entries while readers probe). Every score a reader computes must be one
// the index held: all of the prompt or none of it, never a torn mix.
func TestPrefixOptimisticReadsSeeWholeStates(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BlockSize, cfg.Shards = 4, 1 // 16-byte blocks, one shard for all
	p := mustPrefix(t, cfg)
	h := scorertest.NewHarness(t, p, scorertest.Eps("a:1", "b:1"))
	rng := rand.New(rand.NewPCG(3, 4))
	pr := make([]byte, 64*16)
	scorertest.Fill(rng, pr)
	req := scheduler.Request{Model: "m", Prompt: pr}
	route(t, h, req, "b:1") // b holds it throughout
	route(t, h, req, "a:1")

	sc := p.scratch(h.CycleState(t))
	p.hashBlocks(sc, &req, p.blocks(pr))
	hashes := slices.Clone(sc.hashes)
	blocks := make([]uint16, len(hashes))
	for i := range blocks {
		blocks[i] = uint16(i)
	}
	tab := p.tab.Load()
	idA := tab.byAddr["a:1"]
	sh := &p.shards[0]

	var stop atomic.Bool
	var wg sync.WaitGroup
	var torn atomic.Value
	const readers = 1
	reads := make([]int, readers)
	cands := h.S.Pool().Pointers()
	for r := range readers {
		cs := h.CycleState(t)
		wg.Go(func() {
			out := make([]float64, len(cands))
			for !stop.Load() {
				p.Score(cs, &req, cands, out)
				reads[r]++
				if out[0] != 0 && out[0] != 1 || out[1] != 1 {
					torn.Store(fmt.Sprintf("scores a=%v b=%v", out[0], out[1]))
					return
				}
			}
		})
	}
	for range 10000 {
		sh.lock()
		sh.purge(idA)
		sh.unlock()
		sh.lock()
		sh.record(idA, tab.perShard[idA], blocks, hashes, nil)
		sh.unlock()
	}
	stop.Store(true)
	wg.Wait()
	if v := torn.Load(); v != nil {
		t.Fatalf("a reader saw a state the index never held: %v", v)
	}
	if reads[0] == 0 {
		t.Fatalf("readers did not run: %v", reads)
	}
	checkIndex(t, p)
}

// TestPrefixShardSplicesRuns records prompts whose blocks already lie in
// one piece further down the list (moved by one splice) or in pieces,
// and checks the list against inserting one at a time, last first.
func TestPrefixShardSplicesRuns(t *testing.T) {
	var sh shard
	sh.ensureIDs(2)
	h := func(i int) uint64 { return uint64(i) << 20 } // distinct, in hashMask
	model := map[uint32][]uint64{}
	run := func(ids ...int) {
		hs := make([]uint64, len(ids))
		blocks := make([]uint16, len(ids))
		for i, v := range ids {
			hs[i], blocks[i] = h(v), uint16(i)
		}
		sh.record(1, 12, blocks, hs, nil)
		l := model[1]
		for i := len(hs) - 1; i >= 0; i-- {
			if j := slices.Index(l, hs[i]); j >= 0 {
				l = slices.Delete(l, j, j+1)
			}
			l = append([]uint64{hs[i]}, l...)
		}
		model[1] = l[:min(len(l), 12)]
		if err := shardMatches(&sh, model); err != nil {
			t.Fatalf("after %v: %v", ids, err)
		}
	}
	run(1, 2, 3, 4)
	run(5, 6)
	run(2, 3, 4)       // one piece, two below the head
	run(1, 5, 6)       // 1 at the tail, then 5 6 in one piece
	run(3, 4, 7, 2, 1) // pieces, a new block, out of order
	run(9, 8, 7, 6, 5, 4, 3, 2, 1, 10, 11, 12, 13)
	run(2, 3, 4, 5)
}
