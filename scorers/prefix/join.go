package prefix

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// The join gate of learn: join_new: whether a new prefix is recorded on
// its pod at the pick (Picked), so the prompts that share it and arrive
// during its first prefill join that pod.

// filled is the mean over the candidates (ids, resolved with tab) of the
// share of what the index can hold for each that it holds: the router's
// own account of how full each server's prefix cache is, counting the
// blocks a server keeps after their requests finished, which its scraped
// KV-cache use does not. Lock-free, like fresh: each list publishes its
// length; one view load per shard.
func (p *Scorer) filled(sc *cycleScratch, tab *idTable, ids []uint32) float64 {
	sc.fill = grow(sc.fill, len(ids))
	clear(sc.fill)
	for s := range p.shards {
		v := p.shards[s].view.Load()
		if v == nil {
			continue
		}
		for i, id := range ids {
			if id != 0 && int(id) < len(v.lists) {
				sc.fill[i] += uint64(atomic.LoadUint32(&v.lists[id].held))
			}
		}
	}
	var sum float64
	var n int
	for i, id := range ids {
		if room := p.holds(tab, id); room != 0 {
			sum += min(1, float64(sc.fill[i])/float64(room))
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// holds is what the index can hold for endpoint id (resolved with tab), in
// blocks; 0 for an unknown endpoint. Eviction holds each shard's list to
// perShard.
func (p *Scorer) holds(tab *idTable, id uint32) uint64 {
	if id == 0 {
		return 0
	}
	return uint64(tab.perShard[id]) * uint64(len(p.shards))
}

// cachesFull is the join gate of learn: join_new: whether the caches of
// the request's candidates (sc.idsFor, resolved with tab) are full enough
// that a new prefix computed on several of them evicts others — by
// scraped KV-cache use (JoinKVUtil, fresh metrics only; checked first, it
// is cheaper) or by the index's own fill (JoinCacheFill) where the caches
// hold JoinCacheRoom prompts of the request's length. With neither set
// the join is always made.
func (p *Scorer) cachesFull(sc *cycleScratch, tab *idTable) bool {
	if p.cfg.JoinKVUtil <= 0 && p.cfg.JoinCacheFill <= 0 {
		return true
	}
	if p.cfg.JoinKVUtil > 0 {
		var sum float64
		var n int
		for _, e := range sc.idsFor {
			if e.State == scheduler.StateFresh {
				sum += e.KVUtil
				n++
			}
		}
		if n > 0 && sum/float64(n) >= p.cfg.JoinKVUtil {
			return true
		}
	}
	return p.cfg.JoinCacheFill > 0 && p.roomy(sc, tab) && p.filled(sc, tab, sc.ids[:len(sc.idsFor)]) >= p.cfg.JoinCacheFill
}

// roomy reports whether the candidates' prefix caches hold at least
// JoinCacheRoom prompts of this request's length: the mean over the
// candidates (sc.ids, resolved with tab) of what the index can hold for
// each, in blocks, against the request's sc.n blocks. Lock-free: it reads
// the id table only.
func (p *Scorer) roomy(sc *cycleScratch, tab *idTable) bool {
	if p.cfg.JoinCacheRoom <= 0 {
		return true
	}
	var sum float64
	var n int
	for _, id := range sc.ids[:len(sc.idsFor)] {
		if room := p.holds(tab, id); room != 0 {
			sum += float64(room)
			n++
		}
	}
	return n > 0 && sum/float64(n) >= p.cfg.JoinCacheRoom*float64(max(sc.n, 1))
}

// Joins in progress (join_spread_fill): the new prefixes recorded at the
// pick whose first byte has not come, so a candidate holding one is
// computing it still and a request that shares it would wait for that
// prefill (scheduler.Match.Joining).

// maxPendingJoins bounds how many are tracked; pendingJoinTTL is how long
// one counts without its first byte (a request that fails never
// answers). Past either, the prefix reads as computed and its joiners
// join, as without the bound.
const (
	maxPendingJoins = 4096
	pendingJoinTTL  = 60 * time.Second
)

// pendingJoin is one tracked prefix: the endpoint computing it and when
// the request that started it arrived (Unix nanoseconds; 0: unknown).
type pendingJoin struct {
	id uint32
	at int64
}

// pendingEntry is one slot of pendingJoins' ring.
type pendingEntry struct {
	hash uint64
	pendingJoin
}

// pendingJoins is the set of joins in progress, by the hash of the
// prompt's first block, bounded by a ring of its entries in the order
// they came: adding to a full set drops the oldest, and entries past the
// TTL leave as new ones come. The zero value is empty.
type pendingJoins struct {
	mu         sync.Mutex
	byHash     map[uint64]pendingJoin
	ring       []pendingEntry // maxPendingJoins slots, allocated on first add
	head, size int
	n          atomic.Int64 // len(byHash), read without the lock
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// stale reports whether j is past the TTL at now (Unix nanoseconds); an
// unknown time on either side is not.
func (j pendingJoin) stale(now int64) bool {
	return now != 0 && j.at != 0 && now-j.at > int64(pendingJoinTTL)
}

// add records that the prompt whose first block hashes to hash is being
// computed on endpoint id, for a request that arrived at at.
func (q *pendingJoins) add(hash uint64, id uint32, at time.Time) {
	now := unixNano(at)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ring == nil {
		q.ring = make([]pendingEntry, maxPendingJoins)
		q.byHash = make(map[uint64]pendingJoin, maxPendingJoins)
	}
	for q.size > 0 && (q.size == len(q.ring) || q.ring[q.head].stale(now)) {
		old := q.ring[q.head]
		if j, ok := q.byHash[old.hash]; ok && j == old.pendingJoin {
			delete(q.byHash, old.hash)
		}
		q.head = (q.head + 1) % len(q.ring)
		q.size--
	}
	j := pendingJoin{id: id, at: now}
	q.byHash[hash] = j
	q.ring[(q.head+q.size)%len(q.ring)] = pendingEntry{hash, j}
	q.size++
	q.n.Store(int64(len(q.byHash)))
}

// computing returns the endpoint computing the prompt whose first block
// hashes to hash, for a request that arrived at now; ok is false when
// none is (or its entry is past the TTL). Lock-free while none is tracked.
func (q *pendingJoins) computing(hash uint64, now time.Time) (id uint32, ok bool) {
	if q.n.Load() == 0 {
		return 0, false
	}
	q.mu.Lock()
	j, ok := q.byHash[hash]
	q.mu.Unlock()
	if !ok || j.stale(unixNano(now)) {
		return 0, false
	}
	return j.id, true
}

// answered removes the prompt whose first block hashes to hash when it
// is endpoint id's: that endpoint has computed it.
func (q *pendingJoins) answered(hash uint64, id uint32) {
	if q.n.Load() == 0 {
		return
	}
	q.mu.Lock()
	if j, ok := q.byHash[hash]; ok && j.id == id {
		delete(q.byHash, hash)
		q.n.Store(int64(len(q.byHash)))
	}
	q.mu.Unlock()
}

// forget removes the entries of the given endpoint ids (left the pool,
// or numbered anew).
func (q *pendingJoins) forget(ids []uint32) {
	if len(ids) == 0 || q.n.Load() == 0 {
		return
	}
	q.mu.Lock()
	for h, j := range q.byHash {
		if slices.Contains(ids, j.id) {
			delete(q.byHash, h)
		}
	}
	q.n.Store(int64(len(q.byHash)))
	q.mu.Unlock()
}

// markJoining reports, in cs, each candidate whose match is a prompt still
// in its first prefill there (scheduler.Match.Joining), while the
// candidates' caches have room for another copy (fill below
// join_spread_fill). sc holds the request's hashes and matches (Score).
func (p *Scorer) markJoining(cs *scheduler.CycleState, sc *cycleScratch, eps []*scheduler.Endpoint) {
	if p.cfg.JoinSpreadFill <= 0 || sc.idsTab == nil || len(sc.ids) < len(eps) {
		return
	}
	id, ok := p.pending.computing(sc.hashes[0], sc.req.Arrival)
	if !ok {
		return
	}
	at := -1
	for i := range eps {
		if sc.ids[i] == id && sc.matched[i] > 0 {
			at = i
			break
		}
	}
	if at < 0 || p.filled(sc, sc.idsTab, sc.ids[:len(eps)]) >= p.cfg.JoinSpreadFill {
		return
	}
	cs.SetJoining(eps[at])
}
