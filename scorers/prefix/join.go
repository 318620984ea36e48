package prefix

import (
	"sync/atomic"

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
