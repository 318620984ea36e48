package prefix

import (
	"math/rand/v2"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

// TestGhosts: an evicted key is remembered for a generation after its own
// (a generation takes as many keys as the shard held entries) and
// forgotten after that, also when the shard's size moves in between; keys
// never added are rarely reported, for one endpoint's keys as for many
// endpoints'; the memory stays put while the shard's size does.
func TestGhosts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	// key is a slot key: 48 hash bits and one of ids endpoint ids.
	key := func(ids uint64) uint64 { return rng.Uint64()&hashMask | 1 + rng.Uint64N(ids) }
	keys := func(n int, ids uint64) []uint64 {
		k := make([]uint64, n)
		for i := range k {
			k[i] = key(ids)
		}
		return k
	}
	var g ghosts
	if g.has(key(1)) {
		t.Fatal("an empty filter remembers a key")
	}
	const used = 1000
	add := func(ks []uint64, used int) {
		for _, k := range ks {
			g.add(k, used)
		}
	}
	first := keys(used, 64)
	add(first, used)
	if n := count(&g, first); n != used {
		t.Fatalf("%d of %d keys remembered within their generation", n, used)
	}
	add(keys(used, 64), used)
	mem := g.bytes()
	if n := count(&g, first); n != used {
		t.Fatalf("%d of %d keys remembered one generation later", n, used)
	}
	add(keys(used+1, 64), used) // a third generation starts: the first is gone
	// 1,000 keys against two full filters at 20 bits a key: about 2 % (20)
	// false positives expected; 50 is far outside.
	if n := count(&g, first); n > 50 {
		t.Errorf("%d of %d keys two generations old still remembered, want about 20", n, used)
	}
	if g.bytes() != mem {
		t.Errorf("memory %d bytes after three generations of the same size, want %d", g.bytes(), mem)
	}
	// False positives, for keys of 64 endpoints and of one endpoint alone
	// (whose keys differ in their hash bits only): about 2 % expected.
	for _, ids := range []uint64{64, 1} {
		var h ghosts
		for range 3 * 200000 {
			h.add(key(ids), 200000)
		}
		if n := count(&h, keys(20000, ids)); n > 600 {
			t.Errorf("%d ids: %d of 20000 keys never added reported, want about 400", ids, n)
		}
	}
	// The shard grows fivefold: the next generation is larger, and the
	// keys of the one before are still remembered.
	var f ghosts
	last := keys(used, 64)
	for _, k := range last { // one whole generation
		f.add(k, used)
	}
	small := f.bytes()
	f.add(key(64), 5*used) // the next, five times the size
	if n := count(&f, last); n != used {
		t.Errorf("%d of %d keys remembered after the shard grew", n, used)
	}
	if f.bytes() < 5*small {
		t.Errorf("memory %d bytes for a generation five times the size of one of %d bytes", f.bytes(), small)
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
	// Prompts that never come back: evictions, and misses only as the
	// filter's false positives (under 2 % of the new entries).
	for i := range 20 {
		route(t, h, scheduler.Request{Prompt: prompt(string(rune('a'+i)) + string(rune('A'+i)) + "!")}, "a:1")
	}
	got := p.Stats()
	if ev := got.Evictions - st.Evictions; ev < 60 || got.CapacityMisses-st.CapacityMisses > ev/10 {
		t.Errorf("after 60 new blocks: %d evictions (want 60 or more), %d capacity misses (want under a tenth)", ev, got.CapacityMisses-st.CapacityMisses)
	}
	// An endpoint that leaves and comes back starts with no ghosts: C and
	// D, evicted from a before, are new to it.
	route(t, h, scheduler.Request{Prompt: prompt("WXYZ")}, "a:1")
	route(t, h, scheduler.Request{Prompt: prompt("RSTU")}, "a:1") // ABCD evicted
	h.S.SetEndpoints(scorertest.Eps("b:1"))
	h.S.SetEndpoints(scorertest.Eps("a:1", "b:1"))
	before := p.Stats().CapacityMisses
	route(t, h, scheduler.Request{Prompt: prompt("ABCD")}, "a:1")
	if m := p.Stats().CapacityMisses - before; m > 1 {
		t.Errorf("a, back in the pool, counted %d capacity misses for blocks evicted before it left", m)
	}
}
