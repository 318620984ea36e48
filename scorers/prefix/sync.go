package prefix

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/trimtab/trimtab/scheduler"
)

// Replica sync hooks. Several router replicas in front of one pool each
// learn only their own picks; these hooks let a sync layer (trimtab's
// replica package, or the simulator) share what each learns of the prefix
// index:
//
//   - PickLog collects the prefix scorer's local picks (endpoint and the
//     request's block-hash chain) in a bounded buffer the sync layer drains;
//   - Scorer.RecordPeer records a peer's pick in the index, Scorer.Export
//     and Scorer.Restore copy a whole index to a (re)joining replica.
//
// The router-local loads the replicas exchange beside them are package
// replica/peerload's.
//
// A peer only feeds hints: what it reports changes scores, never the set of
// candidates, which comes from discovery alone.

// Chain is one pick as the sync layer ships it: the endpoint's address and
// the request's prefix-block hash chain, block 0 first. The chain's seed
// already carries the model and cache salt, so chains of different models
// or tenants never meet.
type Chain struct {
	Endpoint string
	Hashes   []uint64
}

// PickLog is a bounded buffer of local picks for the sync layer: Append is
// called on the request path (when the scorer records a request) and never blocks on the
// consumer or allocates; when the buffer is full the pick is dropped and
// counted. Drain empties it. Safe for concurrent use.
type PickLog struct {
	mu       sync.Mutex
	words    []uint64  // the buffered picks' hashes, back to back; len = used
	recs     []pickRec // the buffered picks; len = count
	dropped  atomic.Uint64
	appended atomic.Uint64
}

type pickRec struct {
	addr string
	n    int // hashes, following the previous record's in words
}

// NewPickLog returns a log holding at most picks picks and hashes block
// hashes in all (8 bytes each); both must be positive.
func NewPickLog(picks, hashes int) (*PickLog, error) {
	if picks <= 0 || hashes <= 0 {
		return nil, fmt.Errorf("pick log: picks %d and hashes %d must both be > 0", picks, hashes)
	}
	return &PickLog{words: make([]uint64, 0, hashes), recs: make([]pickRec, 0, picks)}, nil
}

// Append adds one pick; it reports false, and counts a drop, when the log
// is full. hashes is copied.
func (l *PickLog) Append(addr string, hashes []uint64) bool {
	l.mu.Lock()
	if len(l.recs) == cap(l.recs) || len(l.words)+len(hashes) > cap(l.words) {
		l.mu.Unlock()
		l.dropped.Add(1)
		return false
	}
	l.words = append(l.words, hashes...)
	l.recs = append(l.recs, pickRec{addr: addr, n: len(hashes)})
	l.mu.Unlock()
	l.appended.Add(1)
	return true
}

// Drain moves every buffered pick, oldest first, into dst (reusing its
// elements' Hashes capacity) and returns it.
func (l *PickLog) Drain(dst []Chain) []Chain {
	dst = dst[:0]
	l.mu.Lock()
	defer l.mu.Unlock()
	off := 0
	for k := range l.recs {
		r := &l.recs[k]
		if len(dst) < cap(dst) {
			dst = dst[:len(dst)+1]
		} else {
			dst = append(dst, Chain{})
		}
		c := &dst[len(dst)-1]
		c.Endpoint = r.addr
		c.Hashes = append(c.Hashes[:0], l.words[off:off+r.n]...)
		off += r.n
		r.addr = ""
	}
	l.words, l.recs = l.words[:0], l.recs[:0]
	return dst
}

// Len returns the number of buffered picks.
func (l *PickLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recs)
}

// Dropped returns how many picks Append dropped because the log was full.
func (l *PickLog) Dropped() uint64 { return l.dropped.Load() }

// Appended returns how many picks Append accepted.
func (l *PickLog) Appended() uint64 { return l.appended.Load() }

// SetPickLog makes the scorer append every request it records (at the
// first response byte, or at the pick with learn: pick) to l (nil: stop).
// The log sees the request's indexed blocks and its endpoint's address.
func (p *Scorer) SetPickLog(l *PickLog) { p.pickLog.Store(l) }

// Synced returns the prefix scorer whose index replica sync shares
// between routers, and its position in entries: the one with the largest
// profile weight, the first of those on a tie (nil and -1 when there is
// none). Only that index is synced; a profile's other prefix indexes
// (a weight-0 index that learns at the pick, say) stay router-local.
// `trimtab serve`'s replica sync and the simulator's routers both use it,
// so they sync the same index.
func Synced(entries []scheduler.ScorerEntry) (*Scorer, int) {
	var best *Scorer
	at := -1
	for i, e := range entries {
		if p, ok := e.Scorer.(*Scorer); ok && (best == nil || e.Weight > entries[at].Weight) {
			best, at = p, i
		}
	}
	return best, at
}

// SyncKey identifies what must match between replicas for their indexes to
// be interchangeable: the block-hash scheme (chainHashes; a replica of
// another release that hashes differently is refused, not silently
// mismatched), the block length in bytes and the shard count (a snapshot
// keeps only a block hash's high 48 bits and its shard).
func (p *Scorer) SyncKey() string {
	return fmt.Sprintf("hash=xxh3-link,block_bytes=%d,shards=%d", p.blockBytes, p.cfg.Shards)
}

// peerScratch groups a peer's hashes by shard; guarded by Scorer.peerMu.
type peerScratch struct {
	byShard []uint16
	start   []int32
}

// RecordPeer records a peer's pick in the index: the chain's blocks become
// the most recently used entries of the endpoint at addr, as if this router
// had picked it (block 0 first). At most MaxBlocks leading hashes are
// kept. It reports false, and records nothing, when addr is not in the
// index's pool. Off the request path; it takes each involved shard's write
// lock once.
func (p *Scorer) RecordPeer(addr string, hashes []uint64) bool {
	if len(hashes) > p.cfg.MaxBlocks {
		hashes = hashes[:p.cfg.MaxBlocks]
	}
	return p.recordAt(addr, hashes)
}

// Restore records a snapshot's entries for the endpoint at addr, as
// Export produced them (per shard, most recent first): afterwards the
// endpoint's most recent entries in each shard are these, in this order,
// within its capacity. It reports false when addr is not in the pool.
func (p *Scorer) Restore(addr string, hashes []uint64) bool {
	const chunk = 1 << 16 // record indexes blocks with uint16
	// Later chunks hold older entries: record them first.
	for hi := len(hashes); hi > 0; hi -= chunk {
		if !p.recordAt(addr, hashes[max(0, hi-chunk):hi]) {
			return false
		}
	}
	return true
}

func (p *Scorer) recordAt(addr string, hashes []uint64) bool {
	if len(hashes) == 0 {
		return true
	}
	tab := p.tab.Load()
	id := tab.byAddr[addr]
	if id == 0 {
		return false
	}
	p.peerMu.Lock()
	defer p.peerMu.Unlock()
	sc := &p.peer
	if len(sc.start) != len(p.shards)+1 {
		sc.start = make([]int32, len(p.shards)+1)
	}
	if len(sc.byShard) < len(hashes) {
		sc.byShard = make([]uint16, len(hashes))
	}
	start := sc.start
	byShard(hashes, p.shardMask, start, sc.byShard)
	perShard := tab.perShard[id]
	for s := range p.shards {
		lo, hi := start[s], start[s+1]
		if lo == hi {
			continue
		}
		sh := &p.shards[s]
		sh.lock()
		if int(id) < len(sh.lists) {
			sh.record(id, perShard, dedup(sc.byShard[lo:hi], hashes), hashes, nil)
		}
		sh.unlock()
	}
	return true
}

// dedup drops, in place, blocks whose stored hash repeats an earlier one's
// (record requires distinct hashes, and a peer's data comes from outside
// this process): pairwise for short runs, through a map for long ones.
func dedup(blocks []uint16, hashes []uint64) []uint16 {
	if len(blocks) > 64 {
		seen := make(map[uint64]struct{}, len(blocks))
		out := blocks[:0]
		for _, b := range blocks {
			h := hashes[b] & hashMask
			if _, ok := seen[h]; ok {
				continue
			}
			seen[h] = struct{}{}
			out = append(out, b)
		}
		return out
	}
	out := blocks[:0]
next:
	for _, b := range blocks {
		for _, o := range out {
			if hashes[o]&hashMask == hashes[b]&hashMask {
				continue next
			}
		}
		out = append(out, b)
	}
	return out
}

// Export calls fn once per endpoint in the index's pool with its entries:
// for each shard in turn, the endpoint's entries most recent first, each as
// a hash that Restore puts back in the same place (the stored high 48 bits
// plus the shard index; a replica restoring it needs the same SyncKey).
// fn must not retain hashes. Shards are read-locked one at a time, so the
// copy is consistent per shard, not across shards.
func (p *Scorer) Export(fn func(addr string, hashes []uint64)) {
	tab := p.tab.Load()
	addrs := make([]string, 0, len(tab.byAddr))
	for a := range tab.byAddr {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var buf []uint64
	for _, a := range addrs {
		id := tab.byAddr[a]
		buf = buf[:0]
		for s := range p.shards {
			sh := &p.shards[s]
			sh.mu.RLock()
			if int(id) < len(sh.lists) {
				for pos := sh.lists[id].Head; pos != nilIdx; pos = sh.slots[pos].Next {
					buf = append(buf, keyHash(sh.slots[pos].Key)|uint64(s))
				}
			}
			sh.mu.RUnlock()
		}
		if len(buf) > 0 {
			fn(a, buf)
		}
	}
}
