package prefix

import (
	"math/bits"
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
// length; one view load per shard. 0 when the index knows none of them.
func (p *Scorer) filled(sc *cycleScratch, tab *idTable, ids []uint32) float64 {
	f, _ := p.fillOf(sc, tab, ids)
	return f
}

// fillOf is filled and how many of ids the index knows.
func (p *Scorer) fillOf(sc *cycleScratch, tab *idTable, ids []uint32) (float64, int) {
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
		return 0, 0
	}
	return sum / float64(n), n
}

// Fill implements scheduler.FillReporter: the index's fill (filled) over
// the pool's endpoints, for the control loop's fill law. Off the request
// path: it allocates its scratch.
func (p *Scorer) Fill(pool []*scheduler.Endpoint) (float64, bool) {
	tab := p.tab.Load()
	ids := make([]uint32, len(pool))
	for i, e := range pool {
		ids[i] = tab.id(e)
	}
	f, n := p.fillOf(&cycleScratch{}, tab, ids)
	return f, n > 0
}

// Evictions implements scheduler.FillReporter: Stats' Evictions and
// Capacity (each shard's read lock in turn).
func (p *Scorer) Evictions() (uint64, int) {
	st := p.Stats()
	return st.Evictions, st.Capacity
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
	if p.kvFull(sc) {
		return true
	}
	return p.cfg.JoinCacheFill > 0 && p.roomy(sc, tab) && p.filled(sc, tab, sc.ids[:len(sc.idsFor)]) >= p.cfg.JoinCacheFill
}

// kvFull is the scraped half of the join gate: whether the mean KV-cache
// use of the request's candidates (sc.idsFor) with fresh metrics is at
// least JoinKVUtil; false when it is off or no candidate is fresh.
func (p *Scorer) kvFull(sc *cycleScratch) bool {
	if p.cfg.JoinKVUtil <= 0 {
		return false
	}
	var sum float64
	var n int
	for _, e := range sc.idsFor {
		if e.State == scheduler.StateFresh {
			sum += e.KVUtil
			n++
		}
	}
	return n > 0 && sum/float64(n) >= p.cfg.JoinKVUtil
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

// pendingShards × pendingPerShard bounds how many are tracked (a ring
// per shard, by the top bits of the prompt's first block hash, so picks
// of different prefixes do not contend on one lock); pendingJoinTTL is how
// long one counts after its request arrived without a first byte (a
// request that fails never answers). Past either, the prefix reads as
// computed and its joiners join, as without the bound.
const (
	pendingShards   = 16
	pendingPerShard = 64
	pendingJoinTTL  = 60 * time.Second
)

// pendingEntry is one tracked prefix: the hash of its first block, the
// endpoint computing it, and when the request that started it arrived
// (Unix nanoseconds; 0: unknown, which never expires by age).
type pendingEntry struct {
	hash uint64
	at   int64
	id   uint32
	live bool
}

// stale reports whether e is past the TTL at now (Unix nanoseconds); an
// unknown time on either side is not.
func (e *pendingEntry) stale(now int64) bool {
	return now != 0 && e.at != 0 && now-e.at > int64(pendingJoinTTL)
}

// pendingShard is one ring of entries; adding to it overwrites the oldest.
type pendingShard struct {
	mu   sync.Mutex
	live atomic.Int32 // live entries, read without the lock
	next int
	ring [pendingPerShard]pendingEntry
}

// pendingJoins is the set of joins in progress. The zero value is empty;
// nothing in it allocates.
type pendingJoins struct {
	shards [pendingShards]pendingShard
}

func (q *pendingJoins) shard(hash uint64) *pendingShard {
	return &q.shards[hash>>(64-bits.Len(pendingShards-1))]
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// add records that the prompt whose first block hashes to hash is being
// computed on endpoint id, for a request that arrived at at.
func (q *pendingJoins) add(hash uint64, id uint32, at time.Time) {
	s := q.shard(hash)
	s.mu.Lock()
	e := &s.ring[s.next]
	if !e.live {
		s.live.Add(1)
	}
	*e = pendingEntry{hash: hash, at: unixNano(at), id: id, live: true}
	s.next = (s.next + 1) % pendingPerShard
	s.mu.Unlock()
}

// computing returns the endpoint computing the prompt whose first block
// hashes to hash (its newest entry), for a request that arrived at now;
// ok is false when none is or that entry is past the TTL. One atomic
// load while the shard is empty.
func (q *pendingJoins) computing(hash uint64, now time.Time) (id uint32, ok bool) {
	s := q.shard(hash)
	if s.live.Load() == 0 {
		return 0, false
	}
	t := unixNano(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := 1; k <= pendingPerShard; k++ {
		e := &s.ring[(s.next-k+pendingPerShard)%pendingPerShard]
		if !e.live || e.hash != hash {
			continue
		}
		if e.stale(t) {
			return 0, false
		}
		return e.id, true
	}
	return 0, false
}

// answered removes the prompt whose first block hashes to hash from
// endpoint id's entries: that endpoint has computed it.
func (q *pendingJoins) answered(hash uint64, id uint32) {
	s := q.shard(hash)
	if s.live.Load() == 0 {
		return
	}
	s.mu.Lock()
	for k := range s.ring {
		if e := &s.ring[k]; e.live && e.hash == hash && e.id == id {
			e.live = false
			s.live.Add(-1)
		}
	}
	s.mu.Unlock()
}

// forget removes the entries of the given endpoint ids (left the pool,
// or numbered anew). Off the request path (PoolChanged).
func (q *pendingJoins) forget(ids []uint32) {
	if len(ids) == 0 {
		return
	}
	gone := make(map[uint32]bool, len(ids))
	for _, id := range ids {
		gone[id] = true
	}
	for i := range q.shards {
		s := &q.shards[i]
		if s.live.Load() == 0 {
			continue
		}
		s.mu.Lock()
		for k := range s.ring {
			if e := &s.ring[k]; e.live && gone[e.id] {
				e.live = false
				s.live.Add(-1)
			}
		}
		s.mu.Unlock()
	}
}

// ReportsJoins implements scheduler.JoinReporter: with join_spread_fill
// set, Match reports the joins in progress.
func (p *Scorer) ReportsJoins() bool { return p.cfg.JoinSpreadFill > 0 }

// markJoining reports, in cs, the candidate whose match is a prompt still
// in its first prefill there (scheduler.Match.Joining), while the
// candidates' caches have room for another copy: the index's fill below
// join_spread_fill and, with join_kv_util set, their scraped KV use below
// it (the fill reads low where servers do not report their KV size).
// sc holds the request's hashes and matches (Score).
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
	if at < 0 || p.kvFull(sc) || p.filled(sc, sc.idsTab, sc.ids[:len(eps)]) >= p.cfg.JoinSpreadFill {
		return
	}
	cs.SetJoining(eps[at])
}
