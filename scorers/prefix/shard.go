package prefix

// The prefix index's shards as several cores use them at once: lookups
// and freshness checks that read a shard without a lock (a sequence lock,
// see shard), and recording, which takes a shard's write lock only
// when it changes something.

import (
	"runtime"
	"sync/atomic"

	"github.com/trimtab/trimtab/scheduler"
)

// lookupShard sets, for every block of the request in shard s and every
// candidate holding it, the block's bit in the candidate's bitmap. It
// reports whether any candidate holds block 0 (meaningful for block 0's
// shard only). It reads the shard optimistically (see shard),
// retrying while a writer gets in the way, and in the end under the read
// lock.
func (p *Scorer) lookupShard(sc *cycleScratch, s, words int) (block0 bool) {
	lo, hi := sc.start[s], sc.start[s+1]
	if lo == hi {
		return false
	}
	blocks := sc.byShard[lo:hi]
	sh := &p.shards[s]
	for range optimisticTries {
		seq := sh.seq.Load()
		if seq&1 != 0 {
			runtime.Gosched() // a writer is at work; it holds the shard briefly
			continue
		}
		var table []slot
		if v := sh.view.Load(); v != nil {
			table = v.slots
		}
		block0 = scanShard(sc, table, blocks, words)
		if sh.seq.Load() == seq {
			return block0
		}
		// A writer changed the shard meanwhile: forget what was read.
		for c := range len(sc.held) / words {
			for _, b := range blocks {
				sc.held[c*words+int(b>>6)] &^= 1 << (b & 63)
			}
		}
	}
	sh.mu.RLock()
	block0 = scanShard(sc, sh.slots, blocks, words)
	sh.mu.RUnlock()
	return block0
}

// optimisticTries bounds how often a lookup or a record tries a shard
// without waiting, yielding in between, before it waits on the lock:
// parking a goroutine and waking it again costs more than a writer holds a
// shard.
const optimisticTries = 64

// scanShard probes table for blocks (one shard's), setting held bits and
// seen positions; it reports whether any candidate holds block 0.
func scanShard(sc *cycleScratch, table []slot, blocks []uint16, words int) (block0 bool) {
	held, candOf, seen := sc.held, sc.candOf, sc.seen
	size := len(table)
	if size == 0 {
		return false
	}
	sc.touch = touchHomes(sc.hashes, table, blocks)
	for _, b := range blocks {
		h := sc.hashes[b]
		hm := h & hashMask
		at := seenAt{pos: nilIdx}
		// At most size probes: a table read while a writer changes it
		// need not hold the empty slot that ends a run where expected.
		for pos, n := home(h, size), 0; n < size; n++ {
			k := atomic.LoadUint64(&table[pos].Key)
			if k == 0 {
				break
			}
			if k&hashMask == hm {
				if id := uint32(k & maxEndpointID); int(id) < len(candOf) {
					if c := candOf[id]; c > 0 {
						held[int(c-1)*words+int(b>>6)] |= 1 << (b & 63)
						at = seenAt{pos: uint32(pos), id: id}
					}
				}
			}
			if pos++; pos == size {
				pos = 0
			}
		}
		seen[b] = at
		block0 = block0 || (b == 0 && at.pos != nilIdx)
	}
	return block0
}

// touchHomes loads the home slot of every block in turn and returns the
// keys' sum (kept by the caller so the loads stay). The loads depend on
// nothing but the hashes, so the core keeps many cache misses in flight at
// once; the probe loop after it, whose branches depend on what it reads,
// would take them one by one. Measured with BenchmarkPick's x-xxhash64 at
// 256 endpoints / 32k tokens: 5.1–5.7 with it, 5.7–6.1 without.
func touchHomes(hashes []uint64, table []slot, blocks []uint16) (sum uint64) {
	size := len(table)
	for _, b := range blocks {
		sum += atomic.LoadUint64(&table[home(hashes[b], size)].Key)
	}
	return sum
}

// record makes the request's blocks id's most recently used entries.
// Shards whose lock another core holds are left for later passes, so a
// record rarely parks behind another.
func (p *Scorer) record(sc *cycleScratch, tab *idTable, id uint32, chosen *scheduler.Endpoint) {
	perShard := tab.perShard[id]
	later := sc.later[:0]
	// Shards in turn from one picked by the prompt, as in Score (there by
	// block 0; here by the last block, which differs between prompts of a
	// family).
	first := int(sc.hashes[sc.n-1] & p.shardMask)
	for i := range p.shards {
		s := (first + i) & int(p.shardMask)
		if sc.start[s] < sc.start[s+1] && !p.recordShard(sc, s, id, perShard, true) {
			later = append(later, int32(s))
		}
	}
	for range optimisticTries {
		if len(later) == 0 {
			break
		}
		runtime.Gosched()
		left := later[:0]
		for _, s := range later {
			if !p.recordShard(sc, int(s), id, perShard, true) {
				left = append(left, s)
			}
		}
		later = left
	}
	for _, s := range later {
		p.recordShard(sc, int(s), id, perShard, false)
	}
	sc.later = later
	if l := p.pickLog.Load(); l != nil {
		l.Append(chosen.Address, sc.hashes[:sc.n])
	}
}

// recordShard records the request's blocks of shard s on id: nothing
// when they are fresh (checked first without a lock, then under it), else
// under the write lock. With try it gives up, reporting false, instead of
// waiting for the lock. Finding the blocks fresh under the lock leaves seq
// alone, so optimistic readers are disturbed only by real changes.
func (p *Scorer) recordShard(sc *cycleScratch, s int, id, perShard uint32, try bool) bool {
	sh := &p.shards[s]
	blocks := sc.byShard[sc.start[s]:sc.start[s+1]]
	if sh.fresh(id, perShard, blocks, sc.hashes, sc.seen) {
		return true
	}
	if try {
		if !sh.mu.TryLock() {
			return false
		}
	} else {
		sh.mu.Lock()
	}
	if int(id) < len(sh.lists) && !sh.freshLocked(id, perShard, blocks, sc.hashes, sc.seen) {
		sh.seq.Add(1)
		// Block order, block 0 most recent, so the prompt's tail is
		// evicted before its head.
		sh.record(id, perShard, blocks, sc.hashes, sc.seen)
		sh.seq.Add(1)
	}
	sh.mu.Unlock()
	return true
}

// shardView is what optimistic readers see of a shard. They read only
// slot keys, stamps and list ticks, which writers store atomically.
type shardView struct {
	slots  []slot
	stamps []uint32
	lists  []lruList
}

func (s *shard) publish() {
	s.view.Store(&shardView{slots: s.slots, stamps: s.stamps, lists: s.lists})
}

// lock and unlock bracket a change to the shard: mu excludes other
// writers and locked readers, the odd seq tells optimistic readers to
// retry.
func (s *shard) lock() {
	s.mu.Lock()
	s.seq.Add(1)
}

func (s *shard) unlock() {
	s.seq.Add(1)
	s.mu.Unlock()
}

// promotionWindow is lazy promotion's slack for a list of n entries
// with a per-shard capacity: entries stamped fewer than this many ticks ago
// are not moved again. It is half the room left, so promotion is lazy
// while the list has room and exact LRU once it is full, when its order
// decides what is evicted next; and exact below a capacity of 64.
func promotionWindow(capacity, n uint32) uint32 {
	if capacity < 64 || n >= capacity {
		return 0
	}
	return (capacity - n) / 2
}

// fresh reports whether record(id, capacity, blocks, hashes, seen) would
// change nothing: id holds every block, each placed within the promotion
// window. It reads the published view optimistically, without any lock,
// and answers false whenever it cannot be sure (a writer was active or
// came in between), so a prompt recorded again soon after, the common
// case for a hot prompt, touches no lock at all.
func (s *shard) fresh(id, capacity uint32, blocks []uint16, hashes []uint64, seen []seenAt) bool {
	seq := s.seq.Load()
	v := s.view.Load()
	if seq&1 != 0 || v == nil {
		return false
	}
	return freshIn(v, id, capacity, blocks, hashes, seen) && s.seq.Load() == seq
}

// freshLocked is fresh for a caller holding mu.
func (s *shard) freshLocked(id, capacity uint32, blocks []uint16, hashes []uint64, seen []seenAt) bool {
	return freshIn(&shardView{slots: s.slots, stamps: s.stamps, lists: s.lists}, id, capacity, blocks, hashes, seen)
}

// freshIn is fresh's check on one view. The window is the list's as of
// its last record, capped by the capacity now (it may have shrunk since).
func freshIn(v *shardView, id, capacity uint32, blocks []uint16, hashes []uint64, seen []seenAt) bool {
	if int(id) >= len(v.lists) || len(v.slots) == 0 {
		return false
	}
	window := min(atomic.LoadUint32(&v.lists[id].window), promotionWindow(capacity, 0))
	if window == 0 {
		return false
	}
	tick := atomic.LoadUint32(&v.lists[id].tick)
	for _, b := range blocks {
		key := hashes[b]&hashMask | uint64(id)
		pos := seen[b].pos
		if seen[b].id != id || int(pos) >= len(v.slots) || atomic.LoadUint64(&v.slots[pos].Key) != key {
			p, found := probeTable(v.slots, key)
			if !found {
				return false
			}
			pos = p
		}
		if tick-atomic.LoadUint32(&v.stamps[pos]) >= window {
			return false
		}
	}
	return true
}

// probeTable is probe for optimistic readers: atomic loads, and at most
// len(slots) probes, since a table read while a writer changes it need
// not hold the empty slot that ends a run where expected.
func probeTable(slots []slot, key uint64) (uint32, bool) {
	size := len(slots)
	for pos, n := home(key, size), 0; n < size; n++ {
		k := atomic.LoadUint64(&slots[pos].Key)
		if k == key {
			return uint32(pos), true
		}
		if k == 0 {
			break
		}
		if pos++; pos == size {
			pos = 0
		}
	}
	return 0, false
}
