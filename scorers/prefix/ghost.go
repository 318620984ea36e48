package prefix

// ghosts remembers a shard's latest evictions, so that recording one of
// them again counts as a capacity miss (README, "Capacity misses"). Two
// generations of a Bloom filter with two probes a key: evictions go into
// the current one; once it has taken as many keys as the shard held
// entries when it started, it becomes the previous one and the old
// previous is cleared (or replaced, when the shard's size has moved) to
// be the current. Each filter keeps its own size, so a key stays
// remembered for a whole generation after the one it went into, whatever
// the shard's size does. Guarded by the shard's lock.
type ghosts struct {
	cur, prev []uint64 // bitsets
	n, limit  int      // keys in cur; keys a generation takes
}

// ghostBits is a new generation's size per key it takes: about 0.9 % false
// positives when it is full ((1 − e^(−2/20))², two probes), under 2 % for
// a key checked against both generations.
const ghostBits = 20

// add remembers key, an evicted entry's slot key mixed with its list's
// epoch (ghostKey); used is how many entries the shard holds, which sizes
// a new generation.
func (g *ghosts) add(key uint64, used int) {
	if g.n >= g.limit {
		g.turn(max(used, 64))
	}
	a, b := probes(key, len(g.cur))
	g.cur[a>>6] |= 1 << (a & 63)
	g.cur[b>>6] |= 1 << (b & 63)
	g.n++
}

// turn starts a new generation of limit keys. The old previous filter is
// reused when it has 15 to 40 bits a key for limit (at 15, 1.6 % false
// positives full).
func (g *ghosts) turn(limit int) {
	words := (limit*ghostBits + 63) / 64
	next := g.prev
	if len(next) < words*3/4 || len(next) > words*2 {
		next = make([]uint64, words)
	} else {
		clear(next)
	}
	g.cur, g.prev = next, g.cur
	g.n, g.limit = 0, limit
}

// has reports whether key was added within the last generation or two
// (or collides with keys that were).
func (g *ghosts) has(key uint64) bool { return inFilter(g.cur, key) || inFilter(g.prev, key) }

// inFilter reports whether both of key's bits are set in filter f (false
// for an empty one).
func inFilter(f []uint64, key uint64) bool {
	if len(f) == 0 {
		return false
	}
	a, b := probes(key, len(f))
	return f[a>>6]&(1<<(a&63)) != 0 && f[b>>6]&(1<<(b&63)) != 0
}

// probes are key's two bit positions in a filter of words words: two
// independent mixes of the whole key (hash bits and endpoint id), each
// reduced by multiply-shift as home does.
func probes(key uint64, words int) (uint64, uint64) {
	n := uint64(words) * 64
	h1 := key * 0x9e3779b97f4a7c15
	h2 := (h1 ^ h1>>29) * 0xbf58476d1ce4e5b9
	return (h1 >> 32) * n >> 32, (h2 >> 32) * n >> 32
}

// ghostKey is what the filter remembers for an entry: its slot key mixed
// with its endpoint's epoch in the shard, which purge advances, so an id
// handed to another endpoint (or to one that left and came back) starts
// with no ghosts.
func ghostKey(key uint64, epoch uint32) uint64 {
	return key ^ uint64(epoch)*0xd6e8feb86659fd93
}

// bytes is the filters' memory.
func (g *ghosts) bytes() int { return (cap(g.cur) + cap(g.prev)) * 8 }
