package scorers

import (
	"sync"
	"unsafe"
)

// nilIdx marks the end of an LRU list.
const nilIdx = ^uint32(0)

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

// slot is one cached (block, endpoint) entry, 16 bytes: key holds the
// block hash's high 48 bits and the endpoint id in the low 16 (id 0 marks
// an empty slot); prev and next link the endpoint's LRU list (slot
// indexes, nilIdx at the ends). Comparing 48 bits of a 64-bit hash makes a
// false match between two live blocks about a 2^-48 event per comparison;
// it would only inflate one score. A slot's fields share a cache line, so
// an insert or eviction touches one line per slot.
type slot struct {
	key        uint64
	prev, next uint32
}

func (e *slot) id() uint32              { return uint32(e.key & maxEndpointID) }
func (e *slot) hash() uint64            { return e.key & hashMask }
func (e *slot) set(h uint64, id uint32) { e.key = h&hashMask | uint64(id) }

// bytesPerSlot is what one table slot costs.
const bytesPerSlot = int(unsafe.Sizeof(slot{}))

// lruList is one endpoint's LRU list within a shard: head is the most
// recently used slot, tail the least.
type lruList struct {
	head, tail, n uint32
}

// prefixShard is one shard of the prefix index: an open-addressing
// multimap from block hash to the endpoints holding it, with linear probing
// and backward-shift deletion, whose slots double as the nodes of one LRU
// list per endpoint. A slot is one cached (block, endpoint) entry and costs
// bytesPerSlot bytes; there are no per-entry heap objects and no pointers,
// so the garbage collector never scans the index.
//
// All fields are guarded by mu. Lookups take the read lock; inserts,
// evictions and purges the write lock.
type prefixShard struct {
	mu sync.RWMutex

	slots  []slot
	used   int
	lists  []lruList // by endpoint id
	evicts uint64    // entries evicted by capacity (not by purge)

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
func (s *prefixShard) ensureIDs(n int) {
	for len(s.lists) < n {
		s.lists = append(s.lists, lruList{head: nilIdx, tail: nilIdx})
	}
}

// insert records that endpoint id holds block h and makes it the id's most
// recently used entry, evicting the id's least recently used entries while
// it holds more than capacity. Caller holds the write lock; id <
// len(s.lists).
func (s *prefixShard) insert(h uint64, id uint32, capacity uint32) {
	one, first := [1]uint64{h}, [1]uint16{0}
	s.record(id, capacity, first[:], one[:], nil)
}

// record makes blocks (indexes into hashes) the endpoint id's most
// recently used entries, in that order (blocks[0] most recent), adding the
// ones it does not hold,
// then evicts the id's least recently used entries while it holds more
// than capacity. The result is the same as inserting the hashes one at a
// time from last to first, but entries already in the right place are not
// moved: re-recording a prompt whose leading blocks were recorded last
// costs one read per block. seen, when not nil, holds by block index where
// Score last saw a block held (position and id), checked before use.
// Caller holds the write lock; id < len(s.lists); the blocks' hashes are
// distinct.
func (s *prefixShard) record(id, capacity uint32, blocks []uint16, hashes []uint64, seen []seenAt) {
	// Grow once up front for the worst case (all new), so slot positions
	// stay put while the run is built; evict only at the end, for the
	// same reason.
	if need := s.used + len(blocks); need*growDen > len(s.slots)*growNum {
		s.resize(max(minSlots, len(s.slots)+len(s.slots)/2, need*growDen/growNum+1))
	}
	l := &s.lists[id]
	cursor := nilIdx // the run built so far ends here; nilIdx: at the head
	for _, b := range blocks {
		key := hashes[b]&hashMask | uint64(id)
		pos := nilIdx
		if seen != nil && seen[b].id == id && int(seen[b].pos) < len(s.slots) && s.slots[seen[b].pos].key == key {
			pos = seen[b].pos
		} else {
			p, found := s.probe(key)
			if !found {
				s.slots[p].key = key
				s.used++
				s.linkAfter(cursor, p)
				cursor = p
				continue
			}
			pos = p
		}
		next := l.head
		if cursor != nilIdx {
			next = s.slots[cursor].next
		}
		if pos != next && pos != cursor {
			s.unlink(pos)
			s.linkAfter(cursor, pos)
		}
		cursor = pos
	}
	for l.n > capacity && l.tail != nilIdx {
		s.remove(l.tail)
		s.evicts++
	}
}

// probe returns the slot holding key and true, or the empty slot that ends
// key's probe run and false. The table must have an empty slot.
func (s *prefixShard) probe(key uint64) (uint32, bool) {
	size := len(s.slots)
	for pos := home(key, size); ; {
		k := s.slots[pos].key
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

// linkAfter links the unlinked entry pos into its endpoint's list right
// after slot after (at the head when after is nilIdx).
func (s *prefixShard) linkAfter(after, pos uint32) {
	if after == nilIdx {
		s.linkFront(pos)
		return
	}
	e := &s.slots[pos]
	l := &s.lists[e.id()]
	a := &s.slots[after]
	e.prev, e.next = after, a.next
	if a.next != nilIdx {
		s.slots[a.next].prev = pos
	} else {
		l.tail = pos
	}
	a.next = pos
	l.n++
}

func (s *prefixShard) linkFront(pos uint32) {
	e := &s.slots[pos]
	l := &s.lists[e.id()]
	e.prev, e.next = nilIdx, l.head
	if l.head != nilIdx {
		s.slots[l.head].prev = pos
	} else {
		l.tail = pos
	}
	l.head = pos
	l.n++
}

func (s *prefixShard) unlink(pos uint32) {
	e := &s.slots[pos]
	l := &s.lists[e.id()]
	if e.prev != nilIdx {
		s.slots[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nilIdx {
		s.slots[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
	l.n--
}

// remove deletes the entry in slot pos (backward-shift deletion: later
// entries of the probe run move up so lookups never need tombstones; their
// LRU neighbours are re-pointed).
func (s *prefixShard) remove(pos uint32) {
	s.unlink(pos)
	s.used--
	size := len(s.slots)
	i := int(pos)
	j := i
	for {
		if j++; j == size {
			j = 0
		}
		if s.slots[j].key == 0 {
			break
		}
		k := home(s.slots[j].hash(), size)
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
	s.slots[i] = slot{}
}

// move relocates the entry in slot from to the empty slot to.
func (s *prefixShard) move(from, to uint32) {
	e := s.slots[from]
	s.slots[to] = e
	l := &s.lists[e.id()]
	if e.prev != nilIdx {
		s.slots[e.prev].next = to
	} else {
		l.head = to
	}
	if e.next != nilIdx {
		s.slots[e.next].prev = to
	} else {
		l.tail = to
	}
	s.slots[from].key = 0
}

// resize rebuilds the table with size slots, keeping every entry and each
// endpoint's LRU order.
func (s *prefixShard) resize(size int) {
	old := s.slots
	oldLists := append([]lruList(nil), s.lists...)
	s.slots = make([]slot, size)
	for id := range s.lists {
		s.lists[id] = lruList{head: nilIdx, tail: nilIdx}
	}
	for id, l := range oldLists {
		// Oldest first, so the newest ends up at the head again.
		for pos := l.tail; pos != nilIdx; pos = old[pos].prev {
			h := old[pos].hash()
			np := home(h, size)
			for s.slots[np].key != 0 {
				if np++; np == size {
					np = 0
				}
			}
			s.slots[np].set(h, uint32(id))
			s.linkFront(uint32(np))
		}
	}
}

// purge removes every entry of endpoint id and shrinks the table when it is
// mostly empty.
func (s *prefixShard) purge(id uint32) {
	if int(id) >= len(s.lists) {
		return
	}
	for s.lists[id].head != nilIdx {
		s.remove(s.lists[id].head)
	}
	if len(s.slots) > minSlots && s.used*5 < len(s.slots) {
		s.resize(max(minSlots, s.used*5/2))
	}
}

// bytes is the shard's memory: the slot array at its allocated size plus
// the per-endpoint list heads.
func (s *prefixShard) bytes() int {
	return cap(s.slots)*bytesPerSlot + cap(s.lists)*int(unsafe.Sizeof(lruList{}))
}
