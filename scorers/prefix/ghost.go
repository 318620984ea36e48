package prefix

// ghosts remembers, per shard, the entries the index evicted for capacity
// lately, so that recording one of them again counts as a capacity miss:
// a (block, endpoint) entry a cache twice the size would still have held.
// Against the evictions, the misses tell a cache too small for its traffic
// (the prefixes it evicts come back) from a stale one (they do not: the
// traffic that filled it has gone), which the fill alone cannot
// (docs/adaptive.md, "A router that has run for hours").
//
// It is two generations of a Bloom filter with two probes per key: an
// eviction sets its key's bits in the current generation; once that
// generation has taken as many keys as the shard held entries when it
// started, it becomes the previous one and a cleared filter the current.
// So a key is remembered for at least one shard's worth of evictions
// (and at most two), at 20 bits a key per generation (16 to 32 as the
// shard's size moves): about 1 % false positives per full generation, 5
// bytes an index entry in all once the shard evicts. Guarded by the
// shard's lock.
type ghosts struct {
	cur, prev []uint64 // bitsets of equal length
	n, limit  int      // keys in cur; keys a generation takes
}

// ghostBitsPerKey is each generation's size per key it takes.
const ghostBitsPerKey = 16

// add remembers key, an evicted entry's slot key; used is how many entries
// the shard holds, which sizes a new generation.
func (g *ghosts) add(key uint64, used int) {
	if g.n >= g.limit {
		g.turn(max(used, 64))
	}
	a, b := g.probes(key)
	g.cur[a>>6] |= 1 << (a & 63)
	g.cur[b>>6] |= 1 << (b & 63)
	g.n++
}

// turn starts a new generation of limit keys: the current one becomes the
// previous. The filters are resized (both cleared) when limit outgrows
// them or needs under half of them, with a quarter to spare, so a shard
// whose entries hover around a size keeps its memory of evictions.
func (g *ghosts) turn(limit int) {
	need, have := limit*ghostBitsPerKey, len(g.cur)*64
	if need > have || need*2 < have {
		words := (need + need/4 + 63) / 64
		g.cur, g.prev = make([]uint64, words), make([]uint64, words)
	} else {
		g.cur, g.prev = g.prev, g.cur
		clear(g.cur)
	}
	g.n, g.limit = 0, limit
}

// has reports whether key was added within the last generation or two
// (or collides with keys that were).
func (g *ghosts) has(key uint64) bool {
	if len(g.cur) == 0 {
		return false
	}
	a, b := g.probes(key)
	in := func(f []uint64) bool { return f[a>>6]&(1<<(a&63)) != 0 && f[b>>6]&(1<<(b&63)) != 0 }
	return in(g.cur) || in(g.prev)
}

// probes are key's two bit positions, from the two halves of the product
// (the key's hash bits are already a hash, but of the block only: the
// multiply mixes the endpoint id in), each reduced to the filter's size by
// multiply-shift as home does.
func (g *ghosts) probes(key uint64) (uint64, uint64) {
	h := key * 0x9e3779b97f4a7c15
	n := uint64(len(g.cur)) * 64
	return (h >> 32) * n >> 32, (h & 0xffffffff) * n >> 32
}

// bytes is the filters' memory.
func (g *ghosts) bytes() int { return (cap(g.cur) + cap(g.prev)) * 8 }
