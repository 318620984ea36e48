package prefix

import (
	"math/rand/v2"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

// TestGhosts: an evicted key is remembered for at least a generation (as
// many keys as the shard held) and forgotten after two; keys never added
// are rarely reported (the Bloom filter's false positives); the memory
// stays put while the shard's size does, and follows it when it grows.
func TestGhosts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	key := func() uint64 { return rng.Uint64()&hashMask | 1 }
	var g ghosts
	if g.has(key()) {
		t.Fatal("an empty filter remembers a key")
	}
	const used = 1000
	first := make([]uint64, used)
	for i := range first {
		first[i] = key()
		g.add(first[i], used)
	}
	mem := g.bytes()
	for _, k := range first {
		if !g.has(k) {
			t.Fatalf("key %x forgotten within its generation", k)
		}
	}
	second := make([]uint64, used)
	for i := range second {
		second[i] = key()
		g.add(second[i], used)
	}
	for _, k := range first {
		if !g.has(k) {
			t.Fatalf("key %x forgotten one generation later", k)
		}
	}
	for range used + 1 { // a third generation starts: the first is gone
		g.add(key(), used)
	}
	if n := count(&g, first); n > used/20 {
		t.Errorf("%d of %d keys two generations old still remembered, want under 5 %%", n, used)
	}
	never := make([]uint64, 10000)
	for i := range never {
		never[i] = key()
	}
	if n := count(&g, never); n > len(never)/20 {
		t.Errorf("%d of %d keys never added reported, want under 5 %%", n, len(never))
	}
	if g.bytes() != mem {
		t.Errorf("memory %d bytes after three generations of the same size, want %d", g.bytes(), mem)
	}
	for range 3 * used * 8 {
		g.add(key(), used*8)
	}
	if g.bytes() <= mem {
		t.Errorf("memory %d bytes for a shard eight times the size, want more than %d", g.bytes(), mem)
	}
}

func count(g *ghosts, keys []uint64) (n int) {
	for _, k := range keys {
		if g.has(k) {
			n++
		}
	}
	return n
}

// TestPrefixCapacityMisses: recording again on its endpoint a block the
// index evicted counts a capacity miss; a new block, the same block on
// another endpoint, and a block that never comes back do not.
func TestPrefixCapacityMisses(t *testing.T) {
	cfg := smallPrefix()
	cfg.Shards, cfg.Capacity = 1, 6
	p := mustPrefix(t, cfg)
	h := scorertest.NewHarness(t, p, scorertest.Eps("a:1", "b:1"))
	route(t, h, scheduler.Request{Prompt: prompt("ABCD")}, "a:1")
	route(t, h, scheduler.Request{Prompt: prompt("XY")}, "a:1")
	route(t, h, scheduler.Request{Prompt: prompt("PQ")}, "a:1") // C, D evicted
	if st := p.Stats(); st.Evictions != 2 || st.CapacityMisses != 0 {
		t.Fatalf("stats %+v, want 2 evictions, no capacity miss", st)
	}
	route(t, h, scheduler.Request{Prompt: prompt("ABCD")}, "b:1") // on b: not a miss
	if st := p.Stats(); st.CapacityMisses != 0 {
		t.Fatalf("C and D on another endpoint counted %d capacity misses", st.CapacityMisses)
	}
	route(t, h, scheduler.Request{Prompt: prompt("ABCD")}, "a:1") // C, D back on a
	st := p.Stats()
	if st.CapacityMisses != 2 {
		t.Fatalf("C and D recorded again on a: %d capacity misses, want 2", st.CapacityMisses)
	}
	// Prompts that never come back: evictions, no misses.
	for i := range 20 {
		route(t, h, scheduler.Request{Prompt: prompt(string(rune('a'+i)) + string(rune('A'+i)) + "!")}, "a:1")
	}
	if got := p.Stats(); got.CapacityMisses != 2 || got.Evictions <= st.Evictions {
		t.Errorf("after unique prompts: %d capacity misses (want 2), %d evictions (want more than %d)", got.CapacityMisses, got.Evictions, st.Evictions)
	}
}
