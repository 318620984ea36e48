package prefix

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

// smallPrefix is a prefix config with 16-byte blocks (4 tokens × 4 bytes)
// so tests can spell prompts block by block: prompt("ABC") is three blocks.
func smallPrefix() Config {
	cfg := DefaultConfig()
	cfg.BlockSize = 4
	cfg.MaxBlocks = 8
	return cfg
}

// prompt returns one 16-byte block per letter of blocks.
func prompt(blocks string) []byte {
	var b strings.Builder
	for _, c := range blocks {
		b.WriteString(strings.Repeat(string(c), 16))
	}
	return []byte(b.String())
}

// route sends a request to the endpoint at addr (the subset hint forces
// it), so the index records the prompt there.
func route(t *testing.T, h *scorertest.Harness, req scheduler.Request, addr string) {
	t.Helper()
	req.Subset = []string{addr}
	if _, chosen := h.Pick(t, &req); chosen != addr {
		t.Fatalf("routed to %s, want %s", chosen, addr)
	}
}

func mustPrefix(tb testing.TB, cfg Config) *Scorer {
	tb.Helper()
	p, err := New("prefix", cfg, Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// scorerOf returns the prefix scorer h drives.
func scorerOf(tb testing.TB, h *scorertest.Harness) *Scorer {
	tb.Helper()
	p, ok := h.Sc.(*Scorer)
	if !ok {
		tb.Fatal("not a prefix scorer")
	}
	return p
}

func TestPrefixScore(t *testing.T) {
	type routed struct {
		prompt, model, salt, to string
	}
	tests := []struct {
		name    string
		cfg     func(*Config)
		history []routed
		query   scheduler.Request
		want    []float64 // for a, b, c
	}{
		{
			name:    "exact match",
			history: []routed{{prompt: "ABCD", to: "a:1"}},
			query:   scheduler.Request{Prompt: prompt("ABCD")},
			want:    []float64{1, 0, 0}, // a: 4 of 4 blocks
		},
		{
			name:    "shared prefix",
			history: []routed{{prompt: "ABCD", to: "a:1"}},
			query:   scheduler.Request{Prompt: prompt("ABXY")},
			want:    []float64{0.5, 0, 0}, // a: A, B match, X misses → 2/4
		},
		{
			name:    "request longer than history",
			history: []routed{{prompt: "AB", to: "b:1"}},
			query:   scheduler.Request{Prompt: prompt("ABCDE")},
			want:    []float64{0, 0.4, 0}, // b: 2 of 5 blocks
		},
		{
			name:    "two endpoints",
			history: []routed{{prompt: "AB", to: "a:1"}, {prompt: "ABCD", to: "b:1"}},
			query:   scheduler.Request{Prompt: prompt("ABCE")},
			want:    []float64{0.5, 0.75, 0}, // a: 2/4, b: A B C → 3/4
		},
		{
			name:    "chained: first block differs",
			history: []routed{{prompt: "ABCD", to: "a:1"}},
			query:   scheduler.Request{Prompt: prompt("XBCD")},
			want:    []float64{0, 0, 0}, // B C D hash differently after X
		},
		{
			name:    "trailing partial block ignored",
			history: []routed{{prompt: "ABCD", to: "a:1"}},
			query:   scheduler.Request{Prompt: append(prompt("ABCD"), "fifteen bytes.."...)},
			want:    []float64{1, 0, 0}, // 4 full blocks + 15 bytes: 4/4
		},
		{
			name:    "no full block is neutral 0",
			history: []routed{{prompt: "ABCD", to: "a:1"}},
			query:   scheduler.Request{Prompt: []byte("fifteen bytes..")},
			want:    []float64{0, 0, 0},
		},
		{
			name:    "different model never shares",
			history: []routed{{prompt: "ABCD", model: "m1", to: "a:1"}},
			query:   scheduler.Request{Model: "m2", Prompt: prompt("ABCD")},
			want:    []float64{0, 0, 0},
		},
		{
			name:    "different cache salt never shares",
			history: []routed{{prompt: "ABCD", salt: "tenant-1", to: "a:1"}},
			query:   scheduler.Request{CacheSalt: "tenant-2", Prompt: prompt("ABCD")},
			want:    []float64{0, 0, 0},
		},
		{
			name:    "same cache salt shares",
			history: []routed{{prompt: "ABCD", salt: "tenant-1", to: "c:1"}},
			query:   scheduler.Request{CacheSalt: "tenant-1", Prompt: prompt("ABCD")},
			want:    []float64{0, 0, 1},
		},
		{
			name:    "max blocks caps the request",
			cfg:     func(c *Config) { c.MaxBlocks = 3 },
			history: []routed{{prompt: "ABC", to: "a:1"}},
			query:   scheduler.Request{Prompt: prompt("ABCDEF")},
			want:    []float64{1, 0, 0}, // only A B C are counted: 3/3
		},
		{
			name:    "bigger blocks",
			cfg:     func(c *Config) { c.BlockSize = 8 }, // 32-byte blocks: AB is one block
			history: []routed{{prompt: "ABCD", to: "a:1"}},
			query:   scheduler.Request{Prompt: prompt("ABCX")},
			want:    []float64{0.5, 0, 0}, // blocks AB, CX: AB matches → 1/2
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := smallPrefix()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			h := scorertest.NewHarness(t, mustPrefix(t, cfg), scorertest.Eps("a:1", "b:1", "c:1"))
			for _, r := range tt.history {
				route(t, h, scheduler.Request{Model: r.model, CacheSalt: r.salt, Prompt: prompt(r.prompt)}, r.to)
			}
			got, _ := h.Pick(t, &tt.query)
			scorertest.CheckScores(t, got, tt.want)
		})
	}
}

// TestPrefixStopsAtFirstMiss removes one block from the middle of a cached
// prompt: the blocks after the hole no longer count.
func TestPrefixStopsAtFirstMiss(t *testing.T) {
	p := mustPrefix(t, smallPrefix())
	h := scorertest.NewHarness(t, p, scorertest.Eps("a:1", "b:1"))
	route(t, h, scheduler.Request{Prompt: prompt("ABCD")}, "a:1")
	// Find block B's hash through a scoring pass, then delete its entry.
	cs := h.CycleState(t)
	out := make([]float64, 2)
	req := &scheduler.Request{Prompt: prompt("ABCD")}
	p.Score(cs, req, h.S.Pool().Pointers(), out)
	hb := (*cs.Slot()).(*cycleScratch).hashes[1]
	sh := &p.shards[hb&p.shardMask]
	removed := false
	for pos := range sh.slots {
		if e := &sh.slots[pos]; keyID(e.Key) != 0 && keyHash(e.Key) == hb&hashMask {
			sh.remove(uint32(pos))
			removed = true
			break
		}
	}
	if !removed {
		t.Fatal("block B not in the index")
	}
	got, _ := h.Pick(t, req)
	scorertest.CheckScores(t, got, []float64{0.25, 0}) // A found, B missing: 1/4 though C and D are cached
}

func TestPrefixEvictsTailFirst(t *testing.T) {
	cfg := smallPrefix()
	cfg.Shards, cfg.Capacity = 1, 6
	p := mustPrefix(t, cfg)
	h := scorertest.NewHarness(t, p, scorertest.Eps("a:1", "b:1"))
	route(t, h, scheduler.Request{Prompt: prompt("ABCD")}, "a:1") // LRU, newest first: A B C D
	route(t, h, scheduler.Request{Prompt: prompt("XY")}, "a:1")   // X Y A B C D (6: full)
	route(t, h, scheduler.Request{Prompt: prompt("PQ")}, "a:1")   // P Q X Y A B; C, D evicted
	if st := p.Stats(); st.Blocks != 6 || st.Evictions != 2 {
		t.Errorf("stats %+v, want 6 blocks, 2 evictions", st)
	}
	got, _ := h.Pick(t, &scheduler.Request{Prompt: prompt("ABCD")})
	scorertest.CheckScores(t, got, []float64{0.5, 0}) // A B kept, C D gone: 2/4
}

func TestPrefixLRUBoundsMemory(t *testing.T) {
	cfg := smallPrefix()
	cfg.Capacity = 64 // 16 shards × 4 blocks per endpoint
	p := mustPrefix(t, cfg)
	h := scorertest.NewHarness(t, p, scorertest.Eps("a:1", "b:1"))
	rng := rand.New(rand.NewPCG(1, 2))
	var last []byte
	var maxBytes int
	for i := range 2000 {
		pr := make([]byte, 8*16)
		scorertest.Fill(rng, pr)
		route(t, h, scheduler.Request{Prompt: pr}, "a:1")
		last = pr
		st := p.Stats()
		if st.Blocks > 64 {
			t.Fatalf("after %d prompts: %d blocks cached, capacity 64", i+1, st.Blocks)
		}
		// By 500 prompts (250 blocks a shard) every shard has turned its
		// eviction filter's generation twice (64 evictions each), so both
		// filters are allocated.
		if i == 500 {
			maxBytes = st.Bytes
		}
		if i > 500 && st.Bytes > maxBytes {
			t.Fatalf("after %d prompts index grew to %d bytes (was %d at 500): memory not bounded", i+1, st.Bytes, maxBytes)
		}
	}
	st := p.Stats()
	// 2000 × 8 = 16000 inserts into 64 places.
	if st.Evictions != 16000-uint64(st.Blocks) {
		t.Errorf("evictions %d, want %d", st.Evictions, 16000-st.Blocks)
	}
	// The latest prompt has its first blocks: block 0 was touched last in
	// every shard, so at least it survives.
	got, _ := h.Pick(t, &scheduler.Request{Prompt: last})
	if got[0] == 0 {
		t.Errorf("latest prompt lost entirely: %v", got)
	}
	checkIndex(t, p)
}

func TestPrefixCapacityFromServerCache(t *testing.T) {
	p := mustPrefix(t, DefaultConfig())
	es := scorertest.Eps("a:1", "b:1")
	// 100 blocks × 16 tokens / 64 tokens per index block = 25 blocks.
	es[0].CacheBlocks, es[0].CacheBlockSize = 100, 16
	scorertest.NewHarness(t, p, es)
	if st := p.Stats(); st.Capacity != 25+32768 || st.Endpoints != 2 {
		t.Errorf("stats %+v, want capacity 25 + 32768 (default) over 2 endpoints", st)
	}
}

func TestPrefixPurgesEndpointsThatLeave(t *testing.T) {
	p := mustPrefix(t, smallPrefix())
	h := scorertest.NewHarness(t, p, scorertest.Eps("a:1", "b:1"))
	route(t, h, scheduler.Request{Prompt: prompt("ABCD")}, "a:1")
	route(t, h, scheduler.Request{Prompt: prompt("ABC")}, "b:1")
	if st := p.Stats(); st.Blocks != 7 {
		t.Fatalf("blocks %d, want 4 + 3", st.Blocks)
	}
	h.S.SetEndpoints(scorertest.Eps("b:1"))
	if st := p.Stats(); st.Blocks != 3 || st.Endpoints != 1 {
		t.Fatalf("after a left: %+v, want b's 3 blocks", st)
	}
	// A new endpoint may get a's recycled id: it must start empty, and a
	// returning a must too.
	h.S.SetEndpoints(scorertest.Eps("b:1", "d:1"))
	h.S.SetEndpoints(scorertest.Eps("a:1", "b:1", "d:1"))
	got, _ := h.Pick(t, &scheduler.Request{Prompt: prompt("ABCD")})
	scorertest.CheckScores(t, got, []float64{0, 0.75, 0}) // a: forgotten; b: 3/4; d: new
	// Refreshing the pool with the same addresses keeps everything.
	h.S.SetEndpoints(scorertest.Eps("a:1", "b:1", "d:1"))
	got, _ = h.Pick(t, &scheduler.Request{Prompt: prompt("ABCD")})
	// The previous pick sent ABCD to b (best score), so b now has all 4.
	scorertest.CheckScores(t, got, []float64{0, 1, 0})
	checkIndex(t, p)
}

func TestPrefixMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p, err := New("prefix", smallPrefix(), Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	h := scorertest.NewHarness(t, p, scorertest.Eps("a:1", "b:1"))
	route(t, h, scheduler.Request{Prompt: prompt("ABCD")}, "a:1")
	st := p.Stats()
	// Bytes is asserted against the index's own accounting; the benchmark
	// checks that accounting against runtime.MemStats.
	want := fmt.Sprintf(`
# HELP trimtab_prefix_index_blocks Cached (block, endpoint) entries in the prefix scorer's index.
# TYPE trimtab_prefix_index_blocks gauge
trimtab_prefix_index_blocks{scorer="prefix"} 4
# HELP trimtab_prefix_index_bytes Memory held by the prefix scorer's index, in bytes.
# TYPE trimtab_prefix_index_bytes gauge
trimtab_prefix_index_bytes{scorer="prefix"} %d
# HELP trimtab_prefix_index_capacity_blocks Most entries the prefix index may hold: the sum of its endpoints' capacities.
# TYPE trimtab_prefix_index_capacity_blocks gauge
trimtab_prefix_index_capacity_blocks{scorer="prefix"} 65536
# HELP trimtab_prefix_index_evictions_total Prefix index entries evicted because an endpoint reached its capacity.
# TYPE trimtab_prefix_index_evictions_total counter
trimtab_prefix_index_evictions_total{scorer="prefix"} 0
# HELP trimtab_prefix_index_capacity_misses_total %s
# TYPE trimtab_prefix_index_capacity_misses_total counter
trimtab_prefix_index_capacity_misses_total{scorer="prefix"} 0
`, st.Bytes, capacityMissesHelp)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"trimtab_prefix_index_blocks", "trimtab_prefix_index_bytes",
		"trimtab_prefix_index_capacity_blocks", "trimtab_prefix_index_evictions_total",
		"trimtab_prefix_index_capacity_misses_total"); err != nil {
		t.Error(err)
	}
	// Hit ratio: the first request found nothing (0 of 4 blocks); ABCX on
	// a:1, where the index holds ABCD, finds the leading ABC: 3 of 4.
	route(t, h, scheduler.Request{Prompt: prompt("ABCX")}, "a:1")
	hits := `
# HELP trimtab_prefix_hit_blocks_total Leading prompt blocks the chosen endpoint already held by the index: hit_blocks / request_blocks is the router-side prefix hit ratio.
# TYPE trimtab_prefix_hit_blocks_total counter
trimtab_prefix_hit_blocks_total{scorer="prefix"} 3
# HELP trimtab_prefix_request_blocks_total Indexed prompt blocks of the requests the prefix scorer saw picked (retries count again).
# TYPE trimtab_prefix_request_blocks_total counter
trimtab_prefix_request_blocks_total{scorer="prefix"} 8
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(hits),
		"trimtab_prefix_hit_blocks_total", "trimtab_prefix_request_blocks_total"); err != nil {
		t.Error(err)
	}
	// 64 slots of 16 bytes in each of the (at most 4) shards holding a block.
	if st.Bytes < 64*bytesPerSlot || st.Bytes > 1<<16 {
		t.Errorf("bytes %d out of the plausible range", st.Bytes)
	}
}

// TestPrefixShardMatchesModel runs random inserts and purges on one shard
// with a tiny table (so probe runs wrap around and backward shifts cross
// the end) and compares it after every step with a plain reference LRU.
func TestPrefixShardMatchesModel(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var sh shard
		sh.ensureIDs(6)
		const capacity = 12
		model := map[uint32][]uint64{} // id → hashes, newest first
		// A small universe of hashes, so entries repeat across endpoints
		// and runs collide in the small table.
		universe := make([]uint64, 40)
		for i := range universe {
			universe[i] = rng.Uint64() & hashMask // what a slot keeps
		}
		hash := func() uint64 { return universe[rng.IntN(len(universe))] }
		for step := range 1500 {
			id := uint32(1 + rng.IntN(5))
			if rng.IntN(50) == 0 {
				sh.purge(id)
				delete(model, id)
			} else {
				// A run of 1…6 distinct hashes recorded at once.
				var hs []uint64
				for range 1 + rng.IntN(6) {
					if h := hash(); !slices.Contains(hs, h) {
						hs = append(hs, h)
					}
				}
				// Blocks in order, with seen entries that are right,
				// stale or garbage.
				blocks := make([]uint16, len(hs))
				seen := make([]seenAt, len(hs))
				for i, h := range hs {
					blocks[i] = uint16(i)
					switch rng.IntN(3) {
					case 0:
						seen[i] = seenAt{pos: nilIdx}
					case 1:
						seen[i] = seenAt{pos: uint32(rng.IntN(200)), id: id}
					default:
						if len(sh.slots) > 0 {
							if p, ok := sh.probe(h | uint64(id)); ok {
								seen[i] = seenAt{pos: p, id: id}
							}
						}
					}
				}
				sh.record(id, capacity, blocks, hs, seen)
				// Reference: insert one at a time, last first.
				l := model[id]
				for i := len(hs) - 1; i >= 0; i-- {
					h := hs[i]
					if j := slices.Index(l, h); j >= 0 {
						l = slices.Delete(l, j, j+1)
					}
					l = append([]uint64{h}, l...)
					if len(l) > capacity {
						l = l[:capacity]
					}
				}
				model[id] = l
			}
			if err := shardMatches(&sh, model); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
	}
}

// shardMatches checks a shard's structure and that each endpoint's LRU
// list equals the model's, newest first.
func shardMatches(sh *shard, model map[uint32][]uint64) error {
	if err := shardConsistent(sh); err != nil {
		return err
	}
	for id := range sh.lists {
		var got []uint64
		for pos := sh.lists[id].Head; pos != nilIdx; pos = sh.slots[pos].Next {
			got = append(got, keyHash(sh.slots[pos].Key))
		}
		if want := model[uint32(id)]; !slices.Equal(got, want) {
			return fmt.Errorf("id %d: LRU %x, want %x", id, got, want)
		}
	}
	return nil
}

// shardConsistent checks the invariants of a shard: every entry is
// reachable from its home slot without crossing an empty slot, links are
// symmetric, counts agree.
func shardConsistent(sh *shard) error {
	size := len(sh.slots)
	used := 0
	for pos := range sh.slots {
		if keyID(sh.slots[pos].Key) == 0 {
			continue
		}
		used++
		hm := home(keyHash(sh.slots[pos].Key), size)
		for q := hm; q != pos; q = (q + 1) % size {
			if keyID(sh.slots[q].Key) == 0 {
				return fmt.Errorf("slot %d (home %d) unreachable: empty slot %d", pos, hm, q)
			}
		}
	}
	if used != sh.used {
		return fmt.Errorf("used %d, counted %d", sh.used, used)
	}
	if size > 0 && used*growDen > size*growNum {
		return fmt.Errorf("load %d/%d over the limit", used, size)
	}
	total := 0
	for id, l := range sh.lists {
		n := uint32(0)
		prev := nilIdx
		for pos := l.Head; pos != nilIdx; pos = sh.slots[pos].Next {
			if e := &sh.slots[pos]; keyID(e.Key) != uint32(id) {
				return fmt.Errorf("list %d holds slot %d of id %d", id, pos, keyID(e.Key))
			}
			if e := &sh.slots[pos]; e.Prev != prev {
				return fmt.Errorf("list %d: slot %d prev %d, want %d", id, pos, e.Prev, prev)
			}
			prev = pos
			if n++; int(n) > size {
				return fmt.Errorf("list %d has a cycle", id)
			}
		}
		if l.Tail != prev || l.N != n {
			return fmt.Errorf("list %d: tail %d n %d, walked tail %d n %d", id, l.Tail, l.N, prev, n)
		}
		total += int(n)
	}
	if total != used {
		return fmt.Errorf("lists hold %d entries, table %d", total, used)
	}
	return nil
}

// checkIndex checks every shard of p and that no endpoint exceeds its
// capacity.
func checkIndex(t *testing.T, p *Scorer) {
	t.Helper()
	tab := p.tab.Load()
	for s := range p.shards {
		sh := &p.shards[s]
		sh.mu.RLock()
		err := shardConsistent(sh)
		for id, l := range sh.lists {
			if id < len(tab.perShard) && tab.perShard[id] > 0 && l.N > tab.perShard[id] {
				err = fmt.Errorf("id %d holds %d entries, per-shard capacity %d", id, l.N, tab.perShard[id])
			}
			if held := atomic.LoadUint32(&l.held); held != l.N {
				err = fmt.Errorf("id %d holds %d entries, publishes %d (held)", id, l.N, held)
			}
		}
		sh.mu.RUnlock()
		if err != nil {
			t.Fatalf("shard %d: %v", s, err)
		}
	}
}

// TestPrefixBytesPerBlock fills an index to capacity and checks the
// memory target: at most 48 bytes per cached (block, endpoint) entry,
// everything included.
func TestPrefixBytesPerBlock(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Capacity = 4096
	p := mustPrefix(t, cfg)
	h := scorertest.NewHarness(t, p, scorertest.BenchEndpoints(8, 1))
	rng := rand.New(rand.NewPCG(9, 9))
	pr := make([]byte, 128*256) // 128 blocks
	addrs := h.S.Pool().Endpoints
	for i := range 8 * 4096 / 128 * 2 { // twice the capacity: full and evicting
		scorertest.Fill(rng, pr[:8])
		route(t, h, scheduler.Request{Prompt: pr}, addrs[i%len(addrs)].Address)
	}
	st := p.Stats()
	if st.Evictions == 0 {
		t.Fatalf("index never filled: %+v", st)
	}
	// Per-shard capacity 4096/16 = 256 per endpoint; hashes spread unevenly
	// over shards, so not every shard is full, but most are.
	if st.Blocks < st.Capacity*3/4 || st.Blocks > st.Capacity {
		t.Fatalf("blocks %d, want most of capacity %d", st.Blocks, st.Capacity)
	}
	if per := float64(st.Bytes) / float64(st.Blocks); per > 48 {
		t.Errorf("%.1f bytes per cached block (%+v), target ≤ 48", per, st)
	} else {
		t.Logf("%.1f bytes per cached block (%+v)", per, st)
	}
	checkIndex(t, p)
}

// TestPrefixDefaultCoversLongPrompts checks that the default config hashes
// and matches a 32k-token prompt whole: 32768 tokens × 4 bytes / 256-byte
// blocks = 512 blocks, under max_blocks 2048. A prompt that differs from a
// cached one only in its last block matches 511 of 512 blocks; one that
// differs only in its first block matches none.
func TestPrefixDefaultCoversLongPrompts(t *testing.T) {
	p := mustPrefix(t, DefaultConfig())
	h := scorertest.NewHarness(t, p, scorertest.Eps("a:1", "b:1"))
	rng := rand.New(rand.NewPCG(7, 8))
	long := make([]byte, 32<<10*4)
	scorertest.Fill(rng, long)
	if n := p.blocks(long); n != 512 {
		t.Fatalf("a 32k-token prompt has %d indexed blocks, want 512", n)
	}
	route(t, h, scheduler.Request{Prompt: long}, "a:1")
	tail := slices.Clone(long)
	tail[len(tail)-1]++
	got, _ := h.Pick(t, &scheduler.Request{Prompt: tail})
	scorertest.CheckScores(t, got, []float64{511.0 / 512, 0}) // all but the last block
	head := slices.Clone(long)
	head[0]++
	got, _ = h.Pick(t, &scheduler.Request{Prompt: head})
	scorertest.CheckScores(t, got, []float64{0, 0}) // block 0 differs: every hash differs
}

// pickWhileFirstComputes picks ABCD on a:1, then ABCD again among every
// endpoint while the first is still computing it (kept open, so it
// records nothing at a first byte), and returns both decisions and the
// second's prefix scores.
func pickWhileFirstComputes(t *testing.T, h *scorertest.Harness) (first, second *scheduler.Decision, scores []float64) {
	t.Helper()
	first, err := h.S.Pick(context.Background(), &scheduler.Request{Prompt: prompt("ABCD"), Subset: []string{"a:1"}})
	if err != nil {
		t.Fatal(err)
	}
	second, err = h.S.Pick(context.Background(), &scheduler.Request{Prompt: prompt("ABCD")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range second.Candidates() {
		scores = append(scores, second.Score(0, i))
	}
	return first, second, scores
}

// TestPrefixCacheFill: the fill the join_cache_fill gate reads is each
// endpoint's held blocks over its capacity, averaged over the candidates:
// it grows with records, stays at 1 once eviction holds an endpoint at
// its capacity, and drops to 0 for an endpoint purged from the pool. Fill
// (the fill law's input) reads the same over the pool, and nothing for
// a pool the index does not know; Evictions counts what capacity evicted.
func TestPrefixCacheFill(t *testing.T) {
	cfg := smallPrefix()
	cfg.Capacity, cfg.Shards = 8, 1
	p := mustPrefix(t, cfg)
	eps := scorertest.Eps("a:1", "b:1")
	h := scorertest.NewHarness(t, p, eps)
	fill := func() float64 {
		t.Helper()
		tab := p.tab.Load()
		f := p.filled(&cycleScratch{}, tab, []uint32{tab.id(&eps[0]), tab.id(&eps[1])}) // found by address
		if pf, ok := p.Fill(h.S.Pool().Pointers()); !ok || pf != f {
			t.Errorf("Fill over the pool = %v, %v; want %v, true", pf, ok, f)
		}
		return f
	}
	if f := fill(); f != 0 {
		t.Fatalf("empty index: fill %v, want 0", f)
	}
	route(t, h, scheduler.Request{Prompt: prompt("ABCD")}, "a:1")
	if f := fill(); f != 0.25 {
		t.Errorf("4 of 8 blocks on a, none on b: fill %v, want 0.25", f)
	}
	route(t, h, scheduler.Request{Prompt: prompt("EFGHIJKL")}, "a:1")
	route(t, h, scheduler.Request{Prompt: prompt("MNOP")}, "b:1")
	if f := fill(); f != 0.75 {
		t.Errorf("a at its capacity (12 blocks recorded), b half: fill %v, want 0.75", f)
	}
	if ev, c := p.Evictions(); ev != 4 || c != 16 {
		t.Errorf("Evictions() = %d of %d, want 4 (12 recorded on a, which holds 8) of 16", ev, c)
	}
	h.S.SetEndpoints(scorertest.Eps("b:1"))
	h.S.SetEndpoints(eps)
	if f := fill(); f != 0.25 {
		t.Errorf("a purged and back: fill %v, want 0.25 (b's half over two)", f)
	}
	if f, ok := p.Fill([]*scheduler.Endpoint{{Address: "z:1"}}); ok || f != 0 {
		t.Errorf("Fill over a pool the index does not know = %v, %v; want 0, false", f, ok)
	}
}

// TestPrefixLearnsAtFirstByte: with learn: first_byte (the default) a
// request's blocks count as held by its endpoint only once the endpoint's
// first response byte arrived (or the request ended without one); with
// learn: pick they count from the pick. A request on a retry fallback is
// learned on the endpoint that answered.
func TestPrefixLearnsAtFirstByte(t *testing.T) {
	ctx := context.Background()
	for _, learn := range []string{LearnFirstByte, LearnPick} {
		t.Run(learn, func(t *testing.T) {
			cfg := smallPrefix()
			cfg.Learn = learn
			h := scorertest.NewHarness(t, mustPrefix(t, cfg), scorertest.Eps("a:1", "b:1", "c:1"))
			d, d2, scores := pickWhileFirstComputes(t, h)
			wantPending := []float64{0, 0, 0}
			if learn == LearnPick {
				wantPending = []float64{1, 0, 0}
			}
			if !slices.Equal(scores, wantPending) {
				t.Errorf("before the first byte: scores %v, want %v", scores, wantPending)
			}
			d.FirstByte()
			if scores, _ := h.Pick(t, &scheduler.Request{Prompt: prompt("ABCD"), Subset: []string{"a:1"}}); scores[0] != 1 {
				t.Errorf("after the first byte: a scores %v, want 1", scores[0])
			}
			d2.Done(scheduler.Outcome{})
			d.Done(scheduler.Outcome{})
		})
	}
	// learn: join_new records at the pick only a prompt no candidate
	// held even the first block of: a second ABCD joins a:1 before the
	// first byte, while ABEF, whose first blocks a:1 holds, goes to a:1
	// and is recorded in full only at its first byte.
	t.Run(LearnJoinNew, func(t *testing.T) {
		cfg := smallPrefix()
		cfg.Learn = LearnJoinNew
		h := scorertest.NewHarness(t, mustPrefix(t, cfg), scorertest.Eps("a:1", "b:1", "c:1"))
		pick := func(r scheduler.Request) (*scheduler.Decision, []float64) {
			t.Helper()
			d, err := h.S.Pick(ctx, &r)
			if err != nil {
				t.Fatal(err)
			}
			var scores []float64
			for i := range d.Candidates() {
				scores = append(scores, d.Score(0, i))
			}
			return d, scores
		}
		d1, _ := pick(scheduler.Request{Prompt: prompt("ABCD"), Subset: []string{"a:1"}})
		d2, scores := pick(scheduler.Request{Prompt: prompt("ABCD")})
		if !slices.Equal(scores, []float64{1, 0, 0}) {
			t.Errorf("a new prompt's second request: scores %v, want [1 0 0] (joins a:1)", scores)
		}
		d3, _ := pick(scheduler.Request{Prompt: prompt("ABEF")})
		d4, scores := pick(scheduler.Request{Prompt: prompt("ABEF")})
		if d3.Endpoint.Address != "a:1" || !slices.Equal(scores, []float64{0.5, 0, 0}) {
			t.Errorf("a held prefix: first on %s, then scores %v; want a:1, then [0.5 0 0] (ABEF learned at its first byte)", d3.Endpoint.Address, scores)
		}
		d3.FirstByte()
		if _, scores := pick(scheduler.Request{Prompt: prompt("ABEF")}); scores[0] != 1 {
			t.Errorf("after ABEF's first byte: a scores %v, want 1", scores[0])
		}
		for _, d := range []*scheduler.Decision{d1, d2, d3, d4} {
			d.Done(scheduler.Outcome{})
		}
	})
	// join_kv_util 0.6 gates the pick-time record on the candidates'
	// mean KV use (fresh metrics only): at 0.5 a new prompt's second
	// request does not see the first's pod; at 0.7 it joins it; with
	// every candidate's metrics stale it does not (no reading, no join).
	t.Run(LearnJoinNew+" join_kv_util", func(t *testing.T) {
		for _, tt := range []struct {
			name  string
			kv    float64
			state scheduler.State
			want  []float64
		}{
			{"caches with room", 0.5, scheduler.StateFresh, []float64{0, 0, 0}},
			{"caches full", 0.7, scheduler.StateFresh, []float64{1, 0, 0}},
			{"metrics stale", 0.9, scheduler.StateStale, []float64{0, 0, 0}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				cfg := smallPrefix()
				cfg.Learn, cfg.JoinKVUtil = LearnJoinNew, 0.6
				eps := scorertest.Eps("a:1", "b:1", "c:1")
				for i := range eps {
					eps[i].KVUtil, eps[i].State = tt.kv, tt.state
				}
				h := scorertest.NewHarness(t, mustPrefix(t, cfg), eps)
				d1, d2, scores := pickWhileFirstComputes(t, h)
				if !slices.Equal(scores, tt.want) {
					t.Errorf("KV use %v (%v): the second request's scores %v, want %v", tt.kv, tt.state, scores, tt.want)
				}
				d1.FirstByte()
				if scores, _ := h.Pick(t, &scheduler.Request{Prompt: prompt("ABCD"), Subset: []string{"a:1"}}); scores[0] != 1 {
					t.Errorf("after the first byte: a scores %v, want 1", scores[0])
				}
				d1.Done(scheduler.Outcome{})
				d2.Done(scheduler.Outcome{})
			})
		}
	})
	// join_cache_fill 0.5 gates the pick-time record on the share of the
	// candidates' caches the index holds (8 blocks each here), whatever
	// their scraped KV use: with a quarter held a new prompt's second
	// request does not see the first's pod, with half held it joins it.
	// join_cache_room: the 8-block caches hold 2 prompts of the 4-block
	// request; at 2 the full caches' fill opens the join, at 3 it cannot.
	t.Run(LearnJoinNew+" join_cache_fill", func(t *testing.T) {
		for _, tt := range []struct {
			name, held string
			room       float64
			want       []float64
		}{
			{"caches with room", "EF", 0, []float64{0, 0, 0}},
			{"caches full", "EFGH", 0, []float64{1, 0, 0}},
			{"caches full, holding 2 prompts, room 2", "EFGH", 2, []float64{1, 0, 0}},
			{"caches full, holding 2 prompts, room 3", "EFGH", 3, []float64{0, 0, 0}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				cfg := smallPrefix()
				cfg.Learn, cfg.JoinCacheFill, cfg.Capacity, cfg.Shards = LearnJoinNew, 0.5, 8, 1
				cfg.JoinCacheRoom = tt.room
				h := scorertest.NewHarness(t, mustPrefix(t, cfg), scorertest.Eps("a:1", "b:1", "c:1"))
				for _, addr := range []string{"a:1", "b:1", "c:1"} {
					route(t, h, scheduler.Request{Prompt: prompt(tt.held)}, addr)
				}
				d1, d2, scores := pickWhileFirstComputes(t, h)
				if !slices.Equal(scores, tt.want) {
					t.Errorf("%d of 8 blocks held on each: the second request's scores %v, want %v", len(tt.held), scores, tt.want)
				}
				d1.Done(scheduler.Outcome{})
				d2.Done(scheduler.Outcome{})
			})
		}
	})
	t.Run("failed before the first byte", func(t *testing.T) {
		h := scorertest.NewHarness(t, mustPrefix(t, smallPrefix()), scorertest.Eps("a:1"))
		d, err := h.S.Pick(ctx, &scheduler.Request{Prompt: prompt("ABCD")})
		if err != nil {
			t.Fatal(err)
		}
		d.Done(scheduler.Outcome{Kind: scheduler.OutcomeError})
		if scores, _ := h.Pick(t, &scheduler.Request{Prompt: prompt("ABCD")}); scores[0] != 0 {
			t.Errorf("after a failure with no answer: a scores %v, want 0", scores[0])
		}
		// A success whose first byte the proxy never reported counts.
		if scores, _ := h.Pick(t, &scheduler.Request{Prompt: prompt("ABCD")}); scores[0] != 1 {
			t.Errorf("after a success: a scores %v, want 1", scores[0])
		}
	})
	t.Run("fallback", func(t *testing.T) {
		h := scorertest.NewHarness(t, mustPrefix(t, smallPrefix()), scorertest.Eps("a:1", "b:1"))
		d, err := h.S.Pick(ctx, &scheduler.Request{Prompt: prompt("WXYZ")})
		if err != nil {
			t.Fatal(err)
		}
		failed := d.Endpoint.Address
		if !d.Advance() {
			t.Fatal("no fallback")
		}
		served := d.Endpoint.Address
		d.FirstByte()
		d.Done(scheduler.Outcome{})
		scores, _ := h.Pick(t, &scheduler.Request{Prompt: prompt("WXYZ"), Subset: []string{failed, served}})
		got := map[string]float64{}
		for i, e := range []string{"a:1", "b:1"} {
			got[e] = scores[i]
		}
		if got[served] != 1 || got[failed] != 0 {
			t.Errorf("scores %v: want 1 on %s (answered), 0 on %s (failed)", got, served, failed)
		}
	})
}

// TestChainHashes checks the block-hash chain's prefix semantics on the
// block sizes that take each of chainHashes' paths (halves of the short
// path, one short call, one striped call): changing one byte of block k
// changes every hash from k on and none before it; swapping a block's
// halves, or changing the seed, changes the hashes; the same input gives
// the same chain.
func TestChainHashes(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	for _, bb := range []int{16, 100, 256, 480, 481, 1024} {
		t.Run(fmt.Sprint(bb), func(t *testing.T) {
			const n = 12
			pr := make([]byte, n*bb)
			scorertest.Fill(rng, pr)
			base := make([]uint64, n)
			chainHashes(base, pr, bb, 7)
			again := make([]uint64, n)
			chainHashes(again, pr, bb, 7)
			if !slices.Equal(base, again) {
				t.Fatal("same prompt, different chains")
			}
			got := make([]uint64, n)
			for _, k := range []int{0, 5, n - 1} {
				for _, at := range []int{0, bb / 2, bb - 1} {
					mod := slices.Clone(pr)
					mod[k*bb+at] ^= 0x20
					chainHashes(got, mod, bb, 7)
					for i := range n {
						if same := got[i] == base[i]; same != (i < k) {
							t.Fatalf("byte %d of block %d changed: hash %d equal=%v, want %v", at, k, i, same, i < k)
						}
					}
				}
			}
			swapped := slices.Clone(pr)
			half := bb / 2
			b := swapped[3*bb : 4*bb]
			copy(b, append(slices.Clone(pr[3*bb+half:4*bb]), pr[3*bb:3*bb+half]...))
			if !slices.Equal(b, pr[3*bb:4*bb]) {
				chainHashes(got, swapped, bb, 7)
				if got[3] == base[3] {
					t.Fatal("swapping block 3's halves kept its hash")
				}
			}
			chainHashes(got, pr, bb, 8)
			for i := range n {
				if got[i] == base[i] {
					t.Fatalf("another seed, same hash at block %d", i)
				}
			}
		})
	}
}
