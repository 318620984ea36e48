package scorers

import (
	"sync"
	"unsafe"
)

// nilIdx marks the end of an LRU list.
const nilIdx = ^uint32(0)

// Slot table sizing: the table starts at minSlots, grows by half when the
// load would pass 3/4 and shrinks (on purge) below 1/4, so a slot array is
// between about 1/2 and 3/4 full at steady state.
const (
	minSlots = 64
	growNum  = 3 // grow when used+1 > size*growNum/growDen
	growDen  = 4
)

// bytesPerSlot is what one table slot costs: hash (8) + endpoint id (4) +
// LRU prev and next links (4 + 4).
const bytesPerSlot = 8 + 4 + 4 + 4

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

	hashes []uint64
	ids    []uint32 // endpoint id per slot; 0 = empty
	prev   []uint32 // LRU links (slot indexes), nilIdx at the ends
	next   []uint32
	used   int
	lists  []lruList // by endpoint id
	evicts uint64    // entries evicted by capacity (not by purge)

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// home is the preferred slot of hash h in a table of size slots. It uses
// the high 32 bits (the shard is chosen from the low bits) and Lemire's
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
	if (s.used+1)*growDen > len(s.ids)*growNum {
		s.resize(max(minSlots, len(s.ids)+len(s.ids)/2))
	}
	size := len(s.ids)
	pos := home(h, size)
	for s.ids[pos] != 0 {
		if s.ids[pos] == id && s.hashes[pos] == h {
			s.touch(pos)
			return
		}
		if pos++; pos == size {
			pos = 0
		}
	}
	s.hashes[pos], s.ids[pos] = h, id
	s.used++
	s.linkFront(uint32(pos))
	l := &s.lists[id]
	for l.n > capacity && l.tail != nilIdx {
		s.remove(l.tail)
		s.evicts++
	}
}

func (s *prefixShard) linkFront(pos uint32) {
	l := &s.lists[s.ids[pos]]
	s.prev[pos] = nilIdx
	s.next[pos] = l.head
	if l.head != nilIdx {
		s.prev[l.head] = pos
	} else {
		l.tail = pos
	}
	l.head = pos
	l.n++
}

func (s *prefixShard) unlink(pos uint32) {
	l := &s.lists[s.ids[pos]]
	p, n := s.prev[pos], s.next[pos]
	if p != nilIdx {
		s.next[p] = n
	} else {
		l.head = n
	}
	if n != nilIdx {
		s.prev[n] = p
	} else {
		l.tail = p
	}
	l.n--
}

func (s *prefixShard) touch(pos int) {
	p := uint32(pos)
	if s.lists[s.ids[p]].head == p {
		return
	}
	s.unlink(p)
	s.linkFront(p)
}

// remove deletes the entry in slot pos (backward-shift deletion: later
// entries of the probe run move up so lookups never need tombstones; their
// LRU neighbours are re-pointed).
func (s *prefixShard) remove(pos uint32) {
	s.unlink(pos)
	s.used--
	size := len(s.ids)
	i := int(pos)
	j := i
	for {
		if j++; j == size {
			j = 0
		}
		if s.ids[j] == 0 {
			break
		}
		k := home(s.hashes[j], size)
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
	s.ids[i] = 0
}

// move relocates the entry in slot from to the empty slot to.
func (s *prefixShard) move(from, to uint32) {
	s.hashes[to], s.ids[to] = s.hashes[from], s.ids[from]
	p, n := s.prev[from], s.next[from]
	s.prev[to], s.next[to] = p, n
	l := &s.lists[s.ids[to]]
	if p != nilIdx {
		s.next[p] = to
	} else {
		l.head = to
	}
	if n != nilIdx {
		s.prev[n] = to
	} else {
		l.tail = to
	}
	s.ids[from] = 0
}

// resize rebuilds the table with size slots, keeping every entry and each
// endpoint's LRU order.
func (s *prefixShard) resize(size int) {
	oldHashes, oldPrev := s.hashes, s.prev
	oldLists := append([]lruList(nil), s.lists...)
	s.hashes = make([]uint64, size)
	s.ids = make([]uint32, size)
	s.prev = make([]uint32, size)
	s.next = make([]uint32, size)
	for id := range s.lists {
		s.lists[id] = lruList{head: nilIdx, tail: nilIdx}
	}
	for id, l := range oldLists {
		// Oldest first, so the newest ends up at the head again.
		for pos := l.tail; pos != nilIdx; pos = oldPrev[pos] {
			h := oldHashes[pos]
			np := home(h, size)
			for s.ids[np] != 0 {
				if np++; np == size {
					np = 0
				}
			}
			s.hashes[np], s.ids[np] = h, uint32(id)
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
	if len(s.ids) > minSlots && s.used*4 < len(s.ids) {
		s.resize(max(minSlots, s.used*2))
	}
}

// bytes is the shard's memory: the slot arrays at their allocated size
// plus the per-endpoint list heads.
func (s *prefixShard) bytes() int {
	return cap(s.hashes)*8 + cap(s.ids)*4 + cap(s.prev)*4 + cap(s.next)*4 +
		cap(s.lists)*int(unsafe.Sizeof(lruList{}))
}
