package prefix

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/trimtab/trimtab/scorers/internal/lru"
)

// nilIdx marks the end of an LRU list.
const nilIdx = lru.Nil

// Slot table sizing: the table starts at minSlots, grows by half when the
// load would pass 3/5 and shrinks (on purge) below 1/5, so a slot array is
// between 2/5 and 3/5 full at steady state. A multimap lookup must scan to
// the end of its probe run (about ½(1 + 1/(1−α)²) slots at load α: 2.4 at
// 2/5, 3.6 at 3/5), which is why the load is kept this low.
const (
	minSlots = 64
	growNum  = 3 // grow when used+1 > size*growNum/growDen
	growDen  = 5
)

// maxEndpointID is the largest endpoint id a slot can store.
const maxEndpointID = 1<<16 - 1

// hashMask keeps the 48 high bits of a block hash, the part a slot stores.
const hashMask = ^uint64(maxEndpointID)

// slot is one cached (block, endpoint) entry, 16 bytes: Key holds the
// block hash's high 48 bits and the endpoint id in the low 16 (id 0 marks
// an empty slot); Prev and Next link the endpoint's LRU list (slot
// indexes, nilIdx at the ends). Comparing 48 bits of a 64-bit hash makes a
// false match between two live blocks about a 2^-48 event per comparison;
// it would only inflate one score. A slot's fields share a cache line, so
// an insert or eviction touches one line per slot.
type slot = lru.Node

// keyID and keyHash split a slot's Key into the endpoint id and the
// stored hash bits.
func keyID(key uint64) uint32   { return uint32(key & maxEndpointID) }
func keyHash(key uint64) uint64 { return key & hashMask }

// storeKey writes a published slot's key. Optimistic readers (see shard)
// load keys without the lock, so every write of a key in a published table
// is atomic; Prev and Next are read only under the lock.
func storeKey(e *slot, key uint64) { atomic.StoreUint64(&e.Key, key) }

// bytesPerSlot is what one table slot costs: the slot and its stamp.
const bytesPerSlot = int(unsafe.Sizeof(slot{})) + 4

// lruList is one endpoint's LRU list within a shard: head is the most
// recently used slot, tail the least. tick counts the entries record has
// placed; stamps are ticks, and tick − stamp bounds how far back an entry
// may sit (record says how exactly).
type lruList struct {
	lru.List
	tick uint32
	// window is promotionWindow as of the list's last record, for
	// optimistic readers (fresh).
	window uint32
	// held is N as of the list's last change, for optimistic readers
	// (Scorer.filled).
	held uint32
	// epoch counts the purges of the list's endpoint id (ghostKey).
	epoch uint32
}

// shard is one shard of the prefix index: an open-addressing
// multimap from block hash to the endpoints holding it, with linear probing
// and backward-shift deletion, whose slots double as the nodes of one LRU
// list per endpoint. A slot is one cached (block, endpoint) entry and costs
// bytesPerSlot bytes; there are no per-entry heap objects and no pointers,
// so the garbage collector never scans the index.
//
// Promotion is lazy: recording an entry that is already among the
// endpoint's newest (stamped fewer than promotionWindow ticks ago) leaves
// it where it is, and a prompt whose blocks in the shard are all fresh is
// not recorded at all (fresh): re-recording a hot prompt writes nothing,
// not even a lock word. An entry is still never evicted while fewer than
// capacity − window − run distinct entries have been recorded on the
// endpoint after it, where window (promotionWindow) is half the list's
// free room, at most half the capacity, and run the most blocks one prompt
// has in the shard; a full list, and any capacity under 64 per shard, is
// exact LRU.
//
// Writers (inserts, evictions, purges) hold mu and keep seq odd while
// they change the table (lock, unlock). Lookups are optimistic, a
// sequence lock: they read seq, the published table and its keys without
// taking any lock, and keep what they read only if seq is even and
// unchanged afterwards; otherwise they look up again under the read lock.
// So scoring writes no shared cache line and never waits behind a
// writer, which is what lets picks on several cores run in parallel.
// Every other field is guarded by mu.
type shard struct {
	mu  sync.RWMutex
	seq atomic.Uint32
	// Every lock and unlock writes mu or seq; the padding keeps the fields
	// below off their cache line, so reading the table is not slowed by
	// another core taking the lock.
	_ [64]byte

	slots []slot
	// stamps[pos] is the list tick at which slots[pos] was last placed;
	// kept apart from slots so that stamping never writes a line lookups
	// read.
	stamps []uint32
	// view publishes slots, stamps and lists (the same arrays) to
	// optimistic readers; it is replaced whenever one of them is.
	view   atomic.Pointer[shardView]
	used   int
	lists  []lruList // by endpoint id
	evicts uint64    // entries evicted by capacity (not by purge)
	// ghost remembers the latest evictions; misses counts the new entries
	// it remembered (capacity misses, see ghosts).
	ghost  ghosts
	misses uint64

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// home is the preferred slot of hash h in a table of size slots. It uses
// the high 32 bits (the shard is chosen from the low bits, which slots do
// not store) and Lemire's
// multiply-shift range reduction, so any table size works.
func home(h uint64, size int) int {
	return int((h >> 32) * uint64(size) >> 32)
}

// ensureIDs makes the per-endpoint lists cover ids < n.
func (s *shard) ensureIDs(n int) {
	if len(s.lists) >= n {
		return
	}
	for len(s.lists) < n {
		s.lists = append(s.lists, lruList{List: lru.Empty()})
	}
	s.publish()
}

// record makes blocks (indexes into hashes) the endpoint id's most
// recently used entries, in that order (blocks[0] most recent), adding the
// ones it does not hold,
// then evicts the id's least recently used entries while it holds more
// than capacity. With capacity under 64 (no promotion window) the result
// is the same as inserting the hashes one at a time from last to first;
// entries already in the right place are not moved. Above it, promotion is
// lazy (see shard): an entry still fresh is left where it is. seen,
// when not nil, holds by block index where Score last saw a block held
// (position and id), checked before use.
// Caller holds the write lock; id < len(s.lists); the blocks' hashes are
// distinct.
func (s *shard) record(id, capacity uint32, blocks []uint16, hashes []uint64, seen []seenAt) {
	// Grow once up front for the worst case (all new), so slot positions
	// stay put while the run is built; evict only at the end, for the
	// same reason.
	if need := s.used + len(blocks); need*growDen > len(s.slots)*growNum {
		s.resize(max(minSlots, len(s.slots)+len(s.slots)/2, need*growDen/growNum+1))
	}
	l := &s.lists[id]
	window := promotionWindow(capacity, l.N)
	// Entries this run places (new, moved, or in place with a stale stamp)
	// are stamped with the tick before the run and tick once each, so an
	// entry stamped t has at most tick − t entries ahead of it, plus
	// run-mates that did not tick (fresh ones: at most the run's length).
	// With no window (a full list) nothing is fresh, so a moved entry's
	// stamp is not rewritten: left older than its placement, it only makes
	// the entry look staler. A new entry is always stamped, since its
	// slot's old stamp counted another list's ticks.
	base, placed := l.tick, uint32(0)
	stamp := func(pos uint32, isNew bool) {
		if window > 0 || isNew {
			atomic.StoreUint32(&s.stamps[pos], base)
		}
		placed++
	}
	cursor := nilIdx // the run built so far ends here; nilIdx: at the head
	for k := 0; k < len(blocks); k++ {
		b := blocks[k]
		key := hashes[b]&hashMask | uint64(id)
		pos := nilIdx
		if seen != nil && seen[b].id == id && int(seen[b].pos) < len(s.slots) && s.slots[seen[b].pos].Key == key {
			pos = seen[b].pos
		} else {
			p, found := s.probe(key)
			if !found {
				if s.ghost.has(ghostKey(key, l.epoch)) {
					s.misses++
				}
				storeKey(&s.slots[p], key)
				s.used++
				s.linkAfter(cursor, p)
				stamp(p, true)
				cursor = p
				continue
			}
			pos = p
		}
		next := l.Head
		if cursor != nilIdx {
			next = s.slots[cursor].Next
		}
		stale := base+placed-s.stamps[pos] >= window
		switch {
		case pos == next || pos == cursor:
			// In place: it stays; restamp it only when stale, so the next
			// record of the same prompt finds it fresh.
			if stale {
				stamp(pos, false)
			}
		case !stale:
			continue // lazy promotion: among the newest already, it stays
		default:
			// Move it, with the run's next blocks that already follow it
			// in the list (a prompt recorded before lies in one piece):
			// one splice instead of a relink per entry.
			last := pos
			stamp(pos, false)
			for k+1 < len(blocks) {
				nk := hashes[blocks[k+1]]&hashMask | uint64(id)
				n := s.slots[last].Next
				if n == nilIdx || s.slots[n].Key != nk || base+placed-s.stamps[n] < window {
					break
				}
				last = n
				stamp(n, false)
				k++
			}
			s.splice(cursor, pos, last)
			cursor = last
			continue
		}
		cursor = pos
	}
	for l.N > capacity && l.Tail != nilIdx {
		s.ghost.add(ghostKey(s.slots[l.Tail].Key, l.epoch), s.used)
		s.remove(l.Tail)
		s.evicts++
	}
	atomic.StoreUint32(&l.tick, base+placed)
	atomic.StoreUint32(&l.window, promotionWindow(capacity, l.N))
	atomic.StoreUint32(&l.held, l.N)
}

// probe returns the slot holding key and true, or the empty slot that ends
// key's probe run and false. The table must have an empty slot.
func (s *shard) probe(key uint64) (uint32, bool) {
	size := len(s.slots)
	for pos := home(key, size); ; {
		k := s.slots[pos].Key
		if k == key {
			return uint32(pos), true
		}
		if k == 0 {
			return uint32(pos), false
		}
		if pos++; pos == size {
			pos = 0
		}
	}
}

// list returns the LRU list the linked or just-keyed slot pos belongs to.
func (s *shard) list(pos uint32) *lru.List { return &s.lists[keyID(s.slots[pos].Key)].List }

// linkAfter links the unlinked entry pos into its endpoint's list right
// after slot after (at the head when after is nilIdx).
func (s *shard) linkAfter(after, pos uint32) { s.list(pos).InsertAfter(s.slots, after, pos) }

func (s *shard) linkFront(pos uint32) { s.linkAfter(nilIdx, pos) }

func (s *shard) unlink(pos uint32) { s.list(pos).Remove(s.slots, pos) }

// splice moves the linked run first…last of one endpoint's list to right
// after slot after (to the head when after is nilIdx); after is not in
// the run.
func (s *shard) splice(after, first, last uint32) {
	s.list(first).Splice(s.slots, after, first, last)
}

// remove deletes the entry in slot pos (backward-shift deletion: later
// entries of the probe run move up so lookups never need tombstones; their
// LRU neighbours are re-pointed).
func (s *shard) remove(pos uint32) {
	s.unlink(pos)
	s.used--
	size := len(s.slots)
	i := int(pos)
	j := i
	for {
		if j++; j == size {
			j = 0
		}
		if s.slots[j].Key == 0 {
			break
		}
		k := home(keyHash(s.slots[j].Key), size)
		// The entry at j may move to i only if its home is not cyclically
		// within (i, j].
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		s.move(uint32(j), uint32(i))
		i = j
	}
	e := &s.slots[i]
	storeKey(e, 0)
	e.Prev, e.Next = 0, 0
}

// move relocates the entry in slot from to the empty slot to.
func (s *shard) move(from, to uint32) {
	key := s.slots[from].Key
	s.list(from).Relocate(s.slots, from, to)
	storeKey(&s.slots[to], key)
	atomic.StoreUint32(&s.stamps[to], s.stamps[from])
	storeKey(&s.slots[from], 0)
}

// resize rebuilds the table with size slots, keeping every entry and each
// endpoint's LRU order.
func (s *shard) resize(size int) {
	old, oldStamps := s.slots, s.stamps
	oldLists := append([]lruList(nil), s.lists...)
	// Filled before it is published, so plain writes suffice; readers
	// still holding the old table fail their seq check.
	s.slots = make([]slot, size)
	s.stamps = make([]uint32, size)
	defer s.publish()
	for id := range s.lists {
		// Not the tick, which optimistic readers may be loading.
		l := &s.lists[id]
		l.List = lru.Empty()
	}
	for id, l := range oldLists {
		// Oldest first, so the newest ends up at the head again.
		for pos := l.Tail; pos != nilIdx; pos = old[pos].Prev {
			h := keyHash(old[pos].Key)
			np := home(h, size)
			for s.slots[np].Key != 0 {
				if np++; np == size {
					np = 0
				}
			}
			s.slots[np].Key = h | uint64(id)
			s.stamps[np] = oldStamps[pos]
			s.linkFront(uint32(np))
		}
	}
}

// purge removes every entry of endpoint id and shrinks the table when it is
// mostly empty.
func (s *shard) purge(id uint32) {
	if int(id) >= len(s.lists) {
		return
	}
	for s.lists[id].Head != nilIdx {
		s.remove(s.lists[id].Head)
	}
	atomic.StoreUint32(&s.lists[id].held, 0)
	s.lists[id].epoch++
	if len(s.slots) > minSlots && s.used*5 < len(s.slots) {
		s.resize(max(minSlots, s.used*5/2))
	}
}

// bytes is the shard's memory: the slot and stamp arrays at their
// allocated size, the per-endpoint list heads and the eviction filters.
func (s *shard) bytes() int {
	return cap(s.slots)*bytesPerSlot + cap(s.lists)*int(unsafe.Sizeof(lruList{})) + s.ghost.bytes()
}
