package prefix

import (
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/zeebo/xxh3"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/neutral"
)

// Scorer is an affinity scorer that prefers endpoints likely to hold the
// request's prompt prefix in their KV cache. It keeps an approximate
// prefix-cache index built from its own routing history: what it sent
// where, not what the servers report.
//
// Blocks: the prompt is cut into blocks of BlockSize tokens × BytesPerToken
// bytes (default 64 × 4 = 256 bytes); a trailing partial block is not
// indexed, and at most MaxBlocks blocks are. Block i's hash chains the
// block's own XXH3 digest onto its predecessor's,
//
//	h_i = link(h_{i−1}, d_i),  h_{−1} = seed,
//
// where link is a bijection in h_{i−1} (see chainHashes), so a block's
// hash stands for the whole prefix up to it: two prompts whose first
// blocks differ never share a later block's hash unless by a 2^-64
// accident. The seed is derived from the model name and, when set, the
// request's cache salt, so different models and tenants never share
// blocks.
//
// Formula: score_e = (leading blocks of the request found on e, stopping
// at the first miss) / (blocks in the request). 1 means the index believes
// e holds the whole (indexed) prompt, 0 that it holds not even its first
// block.
// Neutral rule: a request with no full block (prompt shorter than one
// block) scores 0 on every candidate, which does not change the ranking.
// Endpoints unknown to the index (not in the last pool) score 0.
//
// Learning: a request's blocks are recorded on its endpoint when the
// endpoint's first response byte arrives (FirstByte; Learn "first_byte",
// the default), i.e. once the server has computed them and could reuse
// them, or at the pick (Picked; Learn "pick").
//
// Index: every shard (chosen by the block hash) is an open-addressing
// multimap hash → endpoints holding it, whose slots are also the nodes of
// one LRU list per endpoint. Recording makes the request's blocks the
// endpoint's most recently used, in block order (block 0
// first, so an endpoint loses a prompt's tail before its head, like vLLM's
// block eviction); PoolChanged
// purges endpoints that left. An endpoint remembers at most its capacity
// in blocks: CacheBlocks × CacheBlockSize / BlockSize when the server
// reports its KV cache, Capacity otherwise.
//
// Approximation: capacity is enforced per shard (capacity / Shards per
// endpoint per shard, at least 1), with LRU order inside a shard whose
// promotion is lazy while the endpoint's list there has room and holds 64
// or more: a block recorded again while still among its newest stays
// where it is (shard).
// Hashes spread blocks evenly over shards, so an endpoint's shards fill at
// the same rate and the global order is close to LRU; an endpoint never
// holds more than its capacity. The index also never learns about server
// evictions caused by other routers or by memory pressure, and a hash
// collision (2^-64) could report a block that is not there.
//
// Memory: each cached (block, endpoint) entry costs one 16-byte slot and
// a 4-byte stamp; the tables stay between 2/5 and 3/5 full (short probe
// runs), so about 33–50 bytes an entry, plus 16 bytes per endpoint per
// shard, and the capacity misses' memory of evictions once a shard evicts
// (ghosts; README). Slots keep
// 48 bits of each block hash and a 16-bit endpoint id, so at most 65535
// endpoints are indexed at a time. Stats and the metrics
// trimtab_prefix_index_blocks / trimtab_prefix_index_bytes report it.
//
// Concurrency: Score reads each involved shard once without a lock (a
// sequence lock: it retries, and in the end takes the read lock, only when
// a writer changed the shard meanwhile); recording checks without a lock
// whether anything would change and takes a shard's write lock only if so,
// trying shards another core holds again later rather than waiting. So
// picks write no shared index state unless they change the index, and
// never contend on one global lock. The joins in progress
// (join_spread_fill) are sharded by prefix too: a pick that finds one
// takes that shard's mutex for a scan of 64 entries, and one atomic load
// per pick is all they cost while none is tracked.
type Scorer struct {
	cfg        Config
	blockBytes int
	shardMask  uint64
	shards     []shard

	tab    atomic.Pointer[idTable]
	poolMu sync.Mutex // serialises PoolChanged
	freed  []uint32   // ids released by the previous PoolChanged

	pickLog atomic.Pointer[PickLog] // replica sync: local picks (nil: off)
	peerMu  sync.Mutex              // serialises RecordPeer / Restore
	peer    peerScratch

	unknown prometheus.Counter
	// reqBlocks and hitBlocks count, per decision, the request's indexed
	// blocks and the leading ones the chosen endpoint already held: the
	// router's view of the prefix-cache hit ratio.
	reqBlocks, hitBlocks prometheus.Counter
	log                  *slog.Logger

	// pending holds the new prefixes recorded at the pick that have not
	// answered (join_spread_fill).
	pending pendingJoins
}

// idTable is the published mapping from endpoints to the index's
// small numeric ids (1…), immutable once published.
type idTable struct {
	byPtr  map[*scheduler.Endpoint]uint32
	byAddr map[string]uint32
	// perShard is each id's capacity per shard, in blocks.
	perShard []uint32
	// capacity is each id's total capacity (for Stats), in blocks.
	capacity []uint32
	maxID    uint32
}

// id returns e's id, 0 when e is not in the index's pool. Pointers of the
// current pool hit the first map; endpoints of the previous pool (a Pick
// that started before SetEndpoints swapped pools) fall back to the address.
func (t *idTable) id(e *scheduler.Endpoint) uint32 {
	if id, ok := t.byPtr[e]; ok {
		return id
	}
	return t.byAddr[e.Address]
}

// Deps are the scorer's collaborators, the fields of scorers.Deps (which
// converts to it). Nil fields get harmless defaults: no metrics
// registered, logs discarded.
type Deps struct {
	// Registerer receives the scorer's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Logger is for construction-time and pool-change messages only; the
	// scorer never logs on the request path.
	Logger *slog.Logger
}

// New builds a prefix scorer named name and registers its metrics.
func New(name string, cfg Config, deps Deps) (*Scorer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scorer %q: %w", name, err)
	}
	p := &Scorer{
		cfg:        cfg,
		blockBytes: cfg.BlockSize * cfg.BytesPerToken,
		shardMask:  uint64(cfg.Shards - 1),
		shards:     make([]shard, cfg.Shards),
		log:        deps.Logger,
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("scorer", name)
	p.tab.Store(&idTable{byPtr: map[*scheduler.Endpoint]uint32{}, byAddr: map[string]uint32{}, perShard: []uint32{0}, capacity: []uint32{0}})
	n, err := neutral.New(name, deps.Registerer, neutral.UnknownEndpoint)
	if err != nil {
		return nil, err
	}
	p.unknown = n.Counter(neutral.UnknownEndpoint)
	p.reqBlocks = prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "trimtab_prefix_request_blocks_total",
		Help:        "Indexed prompt blocks of the requests the prefix scorer saw picked (retries count again).",
		ConstLabels: prometheus.Labels{"scorer": name},
	})
	p.hitBlocks = prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "trimtab_prefix_hit_blocks_total",
		Help:        "Leading prompt blocks the chosen endpoint already held by the index: hit_blocks / request_blocks is the router-side prefix hit ratio.",
		ConstLabels: prometheus.Labels{"scorer": name},
	})
	if deps.Registerer != nil {
		registered := []prometheus.Collector{n.Vec}
		for _, c := range []prometheus.Collector{newCollector(p, name), p.reqBlocks, p.hitBlocks} {
			if err := deps.Registerer.Register(c); err != nil {
				for _, r := range registered {
					deps.Registerer.Unregister(r)
				}
				return nil, fmt.Errorf("scorer %q: register metrics: %w", name, err)
			}
			registered = append(registered, c)
		}
	}
	return p, nil
}

// Config returns the scorer's configuration.
func (p *Scorer) Config() Config { return p.cfg }

// Category implements scheduler.Scorer: affinity.
func (*Scorer) Category() scheduler.Category { return scheduler.CategoryAffinity }

// cycleScratch is the per-decision scratch kept in the CycleState slot:
// the request's block hashes, computed once in Score and reused by Picked.
type cycleScratch struct {
	owner   *Scorer            // scorer the buffers are sized for
	req     *scheduler.Request // request the hashes belong to
	n       int                // blocks hashed (0: nothing to record)
	hashes  []uint64
	byShard []uint16              // block indexes grouped by shard, ascending within one
	start   []int32               // byShard[start[s]:start[s+1]] are shard s's blocks
	held    []uint64              // per candidate, a bitmap of blocks it holds
	matched []int32               // per candidate, leading blocks held (Score's numerator)
	ids     []uint32              // per candidate, its id
	idsTab  *idTable              // table ids was resolved with
	idsFor  []*scheduler.Endpoint // candidates ids was resolved for
	candOf  []int32               // by id, candidate index + 1 (0: not a candidate)
	// seen[b] is where Score last saw block b held by a candidate, so
	// Picked can touch that entry without probing when it is the chosen
	// endpoint's and still in place.
	seen []seenAt
	// later lists the shards record left for its second pass.
	later []int32
	// touch keeps touchHomes' result, so its loads are not dead code.
	touch uint64
	// matchOut is Match's throw-away score buffer.
	matchOut []float64
	// fill is filled's per-candidate count of held blocks.
	fill []uint64
}

type seenAt struct{ pos, id uint32 }

func (p *Scorer) scratch(cs *scheduler.CycleState) *cycleScratch {
	slot := cs.Slot()
	if sc, ok := (*slot).(*cycleScratch); ok && sc.owner == p {
		return sc
	}
	sc := &cycleScratch{
		owner:   p,
		hashes:  make([]uint64, 0, p.cfg.MaxBlocks),
		byShard: make([]uint16, p.cfg.MaxBlocks),
		seen:    make([]seenAt, p.cfg.MaxBlocks),
		start:   make([]int32, p.cfg.Shards+1),
		later:   make([]int32, 0, p.cfg.Shards),
	}
	*slot = sc
	return sc
}

// blocks returns how many full blocks of prompt the scorer indexes.
func (p *Scorer) blocks(prompt []byte) int { return min(len(prompt)/p.blockBytes, p.cfg.MaxBlocks) }

// seed derives the hash chain's seed from the model and the cache salt.
func seed(model, salt string) uint64 {
	s := xxhash.Sum64String(model)
	if salt != "" {
		s = mix64(s ^ mix64(xxhash.Sum64String(salt)+0x9e3779b97f4a7c15))
	}
	return s
}

// mix64 is the SplitMix64 finaliser.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// hashBlocks fills sc.hashes with the prefix hashes of the first n blocks
// of req.Prompt and groups the block indexes by shard.
func (p *Scorer) hashBlocks(sc *cycleScratch, req *scheduler.Request, n int) {
	sc.hashes = sc.hashes[:n]
	chainHashes(sc.hashes, req.Prompt, p.blockBytes, seed(req.Model, req.CacheSalt))
	byShard(sc.hashes, p.shardMask, sc.start, sc.byShard)
}

// xxh3MidMax is the longest input XXH3 hashes on its short path; longer
// inputs take its striped path, whose set-up and merge cost ≈ 20 ns a call
// and pay off only from about 1 KiB.
const xxh3MidMax = 240

// chainHashes sets out[i] to the hash of the prompt's blocks 0…i (blocks of
// bb bytes): out[i] = link(out[i−1], d_i) from h, where d_i is block i's own
// XXH3 digest. A block of at most 2 × xxh3MidMax bytes (the default 256 is)
// is digested as two halves, each on XXH3's short path, combined
// asymmetrically so swapping them changes the digest. The digests do not
// depend on one another, so the core overlaps them; only link, a multiply
// and a shift, runs in sequence. One pass over a 32 KB prompt costs about
// 1.1 × one xxhash64 call over the same bytes (BenchmarkPrefixHash); a
// streaming xxhash64 read out after every block costs 1.7 ×.
func chainHashes(out []uint64, prompt []byte, bb int, h uint64) {
	half := 0
	if bb <= 2*xxh3MidMax {
		half = bb / 2
	}
	for i := range out {
		b := prompt[i*bb : (i+1)*bb]
		var d uint64
		if half > 0 {
			d = xxh3.Hash(b[:half]) + bits.RotateLeft64(xxh3.Hash(b[half:]), 31)
		} else {
			d = xxh3.Hash(b)
		}
		h = link(h, d)
		out[i] = h
	}
}

// link chains digest d onto prefix hash h. For a fixed d it is a bijection
// of h (xor, a multiply by an odd constant, an xorshift), so prompts that
// differ before a block still differ at it; the multiply carries every bit
// of h ^ d into the high half the index's home slot and stored key use,
// and the xorshift folds them into the low bits that pick the shard.
func link(h, d uint64) uint64 {
	h = (h ^ d) * 0x9e3779b97f4a7c15
	return h ^ h>>32
}

// byShard groups the indexes of hashes by shard (h & mask), a counting
// sort: afterwards the indexes of shard s are idx[start[s]:start[s+1]].
// start has one more entry than there are shards; idx at least
// len(hashes).
func byShard(hashes []uint64, mask uint64, start []int32, idx []uint16) {
	clear(start)
	for _, h := range hashes {
		start[(h&mask)+1]++
	}
	for s := 1; s < len(start); s++ {
		start[s] += start[s-1]
	}
	// start[s] is now where shard s begins; fill, then shift back.
	for i, h := range hashes {
		s := h & mask
		idx[start[s]] = uint16(i)
		start[s]++
	}
	for s := len(start) - 1; s > 0; s-- {
		start[s] = start[s-1]
	}
	start[0] = 0
}

// Score implements scheduler.Scorer.
func (p *Scorer) Score(cs *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	sc := p.scratch(cs)
	sc.req, sc.n = req, 0
	n := p.blocks(req.Prompt)
	if n == 0 {
		clear(out)
		return
	}
	p.hashBlocks(sc, req, n)
	sc.n = n

	tab := p.tab.Load()
	words := (n + 63) / 64
	sc.held = grow(sc.held, len(eps)*words)
	clear(sc.held)
	sc.matched = grow(sc.matched, len(eps))
	if need := int(tab.maxID) + 1; len(sc.candOf) < need {
		sc.candOf = make([]int32, need)
	}
	candOf := sc.candOf
	p.resolveIDs(sc, tab, eps)
	for i, id := range sc.ids {
		if id == 0 {
			p.unknown.Inc()
			continue
		}
		candOf[id] = int32(i + 1)
	}

	// Block 0's shard goes first: when no candidate holds block 0 (a new
	// prompt family) every score is 0 and the other shards are skipped.
	// The other shards follow in turn from there, so concurrent picks of
	// different prompts start in different shards rather than in step.
	first := int(sc.hashes[0] & p.shardMask)
	if p.lookupShard(sc, first, words) {
		for i := 1; i < len(p.shards); i++ {
			p.lookupShard(sc, (first+i)&int(p.shardMask), words)
		}
	}

	inv := 1 / float64(n)
	for i := range eps {
		run := 0
		for _, w := range sc.held[i*words : (i+1)*words] {
			t := bits.TrailingZeros64(^w)
			run += t
			if t < 64 {
				break
			}
		}
		sc.matched[i] = int32(min(run, n))
		out[i] = float64(sc.matched[i]) * inv
	}
	for _, id := range sc.ids[:len(eps)] {
		candOf[id] = 0 // candOf[0] is never read as a candidate
	}
}

// Match implements scheduler.MatchProducer with the same lookup as
// Score: the request's prompt is len(prompt) ÷ bytes_per_token tokens, its
// indexed part the full blocks Score matches (at most max_blocks) ×
// block_size, and each candidate holds its leading matched blocks ×
// block_size tokens.
func (p *Scorer) Match(cs *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint) {
	sc := p.scratch(cs)
	sc.matchOut = grow(sc.matchOut, len(eps))
	p.Score(cs, req, eps, sc.matchOut)
	bs := int64(p.cfg.BlockSize)
	cs.SetMatch(int64(len(req.Prompt)/p.cfg.BytesPerToken), int64(sc.n)*bs)
	if sc.n == 0 {
		return
	}
	for i, e := range eps {
		cs.SetCached(e, int64(sc.matched[i])*bs)
	}
	p.markJoining(cs, sc, eps)
}

// resolveIDs fills sc.ids with the candidates' ids. Candidates are usually
// the same pool pointers in the same order from one decision to the next,
// so the previous answer is reused after a pointer comparison instead of a
// map lookup per candidate.
func (p *Scorer) resolveIDs(sc *cycleScratch, tab *idTable, eps []*scheduler.Endpoint) {
	if sc.idsTab == tab && slices.Equal(sc.idsFor, eps) {
		return
	}
	sc.ids = grow(sc.ids, len(eps))
	for i, e := range eps {
		sc.ids[i] = tab.id(e)
	}
	sc.idsTab = tab
	sc.idsFor = append(sc.idsFor[:0], eps...)
}

// hashed returns the scratch in which Score hashed req's blocks, nil when
// there is none (another scorer's slot, another request, no full block).
func (p *Scorer) hashed(cs *scheduler.CycleState, req *scheduler.Request) *cycleScratch {
	sc, ok := (*cs.Slot()).(*cycleScratch)
	if !ok || sc.owner != p || sc.req != req || sc.n == 0 {
		return nil
	}
	return sc
}

// Picked implements scheduler.PickObserver: it counts the request's blocks
// and the chosen endpoint's hits and, with learn: pick, records the blocks
// on it, reusing the hashes Score computed.
func (p *Scorer) Picked(cs *scheduler.CycleState, req *scheduler.Request, chosen *scheduler.Endpoint) {
	sc := p.hashed(cs, req)
	if sc == nil {
		return
	}
	tab := p.tab.Load()
	id := tab.id(chosen)
	if id == 0 {
		p.unknown.Inc()
		return
	}
	p.reqBlocks.Add(float64(sc.n))
	if sc.idsTab == tab {
		for i, cid := range sc.ids[:len(sc.matched)] {
			if cid == id {
				p.hitBlocks.Add(float64(sc.matched[i]))
				break
			}
		}
	}
	switch {
	case p.cfg.Learn == LearnPick:
		p.record(sc, tab, id, chosen)
	case p.cfg.Learn == LearnJoinNew && sc.idsTab == tab && !slices.ContainsFunc(sc.matched, func(m int32) bool { return m > 0 }) && p.cachesFull(sc, tab):
		p.record(sc, tab, id, chosen)
		if p.cfg.JoinSpreadFill > 0 {
			p.pending.add(sc.hashes[0], id, req.Arrival)
		}
	}
}

// FirstByte implements scheduler.FirstByteObserver: with learn:
// first_byte, it records the request's blocks on the endpoint that
// answered, now that the endpoint has computed them.
func (p *Scorer) FirstByte(cs *scheduler.CycleState, req *scheduler.Request, ep *scheduler.Endpoint) {
	if p.cfg.Learn == LearnPick {
		return
	}
	sc := p.hashed(cs, req)
	if sc == nil {
		return
	}
	tab := p.tab.Load()
	if id := tab.id(ep); id != 0 {
		p.pending.answered(sc.hashes[0], id)
		p.record(sc, tab, id, ep)
	}
}
