package prefix

import (
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/trimtab/trimtab/scheduler"
)

// PoolChanged implements scheduler.PoolObserver: it assigns ids to new
// endpoints, sizes their capacity and purges endpoints that left.
func (p *Scorer) PoolChanged(eps []*scheduler.Endpoint) {
	p.poolMu.Lock()
	defer p.poolMu.Unlock()
	old := p.tab.Load()
	t := &idTable{
		byPtr:  make(map[*scheduler.Endpoint]uint32, len(eps)),
		byAddr: make(map[string]uint32, len(eps)),
	}
	var fresh []uint32 // ids handed out now that may carry stale entries
	next := old.maxID + 1
	free := p.freed
	skipped := 0
	for _, e := range eps {
		id, ok := t.byAddr[e.Address]
		if !ok {
			id, ok = old.byAddr[e.Address]
		}
		if !ok {
			switch {
			case len(free) > 0:
				id, free = free[len(free)-1], free[:len(free)-1]
				fresh = append(fresh, id)
			case next <= maxEndpointID:
				id = next
				next++
			default:
				skipped++ // scores 0 as an unknown endpoint
				continue
			}
		}
		t.byAddr[e.Address] = id
		t.byPtr[e] = id
		t.maxID = max(t.maxID, id)
	}
	t.maxID = max(t.maxID, old.maxID)
	t.perShard = make([]uint32, t.maxID+1)
	t.capacity = make([]uint32, t.maxID+1)
	for _, e := range eps {
		id, ok := t.byAddr[e.Address]
		if !ok {
			continue
		}
		c := p.capacityOf(e)
		t.capacity[id] = uint32(c)
		t.perShard[id] = uint32(max(1, c/len(p.shards)))
	}
	var gone []uint32
	for addr, id := range old.byAddr {
		if _, ok := t.byAddr[addr]; !ok {
			gone = append(gone, id)
		}
	}
	for s := range p.shards {
		sh := &p.shards[s]
		sh.lock()
		sh.ensureIDs(int(t.maxID) + 1)
		// A recycled id may still have entries a Picked racing with the
		// previous PoolChanged wrote after that purge.
		for _, id := range fresh {
			sh.purge(id)
		}
		for _, id := range gone {
			sh.purge(id)
		}
		sh.unlock()
	}
	if skipped > 0 {
		p.log.Warn("prefix index: more endpoints than it can number; the rest are not indexed", "skipped", skipped, "max", maxEndpointID)
	}
	if len(gone) > 0 {
		p.log.Debug("prefix index: purged endpoints that left the pool", "endpoints", len(gone))
	}
	p.pending.forget(append(fresh, gone...))
	// Released ids are only reused by the next PoolChanged, after any Pick
	// still holding the previous table has finished with them.
	p.freed = append(free, gone...)
	p.tab.Store(t)
}

// capacityOf is e's index capacity in blocks.
func (p *Scorer) capacityOf(e *scheduler.Endpoint) int {
	if e.CacheBlocks > 0 && e.CacheBlockSize > 0 {
		c := int64(e.CacheBlocks) * int64(e.CacheBlockSize) / int64(p.cfg.BlockSize)
		return int(min(max(c, 1), 1<<30))
	}
	return p.cfg.Capacity
}

// Stats describes the prefix index's size.
type Stats struct {
	// Blocks is the number of cached (block, endpoint) entries.
	Blocks int
	// Slots is the number of allocated table slots (≥ Blocks).
	Slots int
	// Bytes is the index's memory: slot tables, per-endpoint list heads,
	// the eviction filters (ghosts) and the endpoint id maps (estimated
	// from their entry counts).
	Bytes int
	// Endpoints is the number of endpoints in the index's pool.
	Endpoints int
	// Capacity is the sum of the endpoints' capacities, in blocks: the
	// most Blocks can reach.
	Capacity int
	// Evictions counts entries evicted for capacity since the start.
	Evictions uint64
	// CapacityMisses counts entries recorded again on their endpoint
	// while the index remembered evicting them (ghosts; README, "Capacity
	// misses").
	CapacityMisses uint64
}

// Stats returns the index's current size. It takes each shard's read lock
// in turn, so it is a consistent view per shard, not a global snapshot.
func (p *Scorer) Stats() Stats {
	var st Stats
	for s := range p.shards {
		sh := &p.shards[s]
		sh.mu.RLock()
		st.Blocks += sh.used
		st.Slots += len(sh.slots)
		st.Bytes += sh.bytes()
		st.Evictions += sh.evicts
		st.CapacityMisses += sh.misses
		sh.mu.RUnlock()
	}
	t := p.tab.Load()
	st.Endpoints = len(t.byPtr)
	for _, id := range t.byAddr {
		st.Capacity += int(t.capacity[id])
	}
	// Id maps: roughly 2 × (key + value + control byte) per entry, and the
	// per-id capacity arrays.
	st.Bytes += len(t.byPtr)*2*(8+4+1) + len(t.byAddr)*2*(16+4+1) + len(t.perShard)*8 +
		int(unsafe.Sizeof(shard{}))*len(p.shards)
	return st
}

// grow returns b resized to n, reallocating only when it is too small.
// The contents are unspecified.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// capacityMissesHelp is the help of trimtab_prefix_index_capacity_misses_total.
const capacityMissesHelp = "Prefix index entries recorded again on their endpoint while it remembered evicting them (the last one or two generations of its shard's evictions, each as many as the shard holds): what larger caches would have kept. A small share of the evictions (the filter's false positives, 1-2 %) says the caches evict prompts that do not come back."

// collector reports the index's size at scrape time. Its
// descriptors carry the scorer name as a constant label, so several prefix
// scorers can share a registry.
type collector struct {
	p                                          *Scorer
	blocks, bytes, capacity, evictions, misses *prometheus.Desc
}

func newCollector(p *Scorer, name string) *collector {
	l := prometheus.Labels{"scorer": name}
	return &collector{
		p: p,
		blocks: prometheus.NewDesc("trimtab_prefix_index_blocks",
			"Cached (block, endpoint) entries in the prefix scorer's index.", nil, l),
		bytes: prometheus.NewDesc("trimtab_prefix_index_bytes",
			"Memory held by the prefix scorer's index, in bytes.", nil, l),
		capacity: prometheus.NewDesc("trimtab_prefix_index_capacity_blocks",
			"Most entries the prefix index may hold: the sum of its endpoints' capacities.", nil, l),
		evictions: prometheus.NewDesc("trimtab_prefix_index_evictions_total",
			"Prefix index entries evicted because an endpoint reached its capacity.", nil, l),
		misses: prometheus.NewDesc("trimtab_prefix_index_capacity_misses_total", capacityMissesHelp, nil, l),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.blocks
	ch <- c.bytes
	ch <- c.capacity
	ch <- c.evictions
	ch <- c.misses
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.p.Stats()
	ch <- prometheus.MustNewConstMetric(c.blocks, prometheus.GaugeValue, float64(st.Blocks))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(st.Capacity))
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.Evictions))
	ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(st.CapacityMisses))
}
