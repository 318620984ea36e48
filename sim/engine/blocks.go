package engine

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// lookup attaches the longest cached prefix of s's blocks, leaving at least
// one token to compute (as vLLM does, so the last position gets logits).
func (e *Engine) lookup(s *Seq) {
	if !e.cfg.PrefixCaching {
		return
	}
	limit := min(len(s.Hashes), (s.tokens()-1)/e.cfg.BlockSize)
	hits := 0
	for hits < limit {
		id, ok := e.cache[s.Hashes[hits]]
		if !ok {
			break
		}
		e.touch(id)
		s.blocks = append(s.blocks, id)
		hits++
	}
	s.computed = hits * e.cfg.BlockSize
	s.hashed = hits
	if !s.admitted {
		s.CachedTokens = min(s.computed, s.PromptTokens)
	}
}

// ensure gives s enough blocks for tokens tokens; false (and no change)
// when the free list is too short.
func (e *Engine) ensure(s *Seq, tokens int) bool {
	need := ceilDiv(tokens, e.cfg.BlockSize) - len(s.blocks)
	if need <= 0 {
		return true
	}
	if need > e.free {
		return false
	}
	for range need {
		s.blocks = append(s.blocks, e.allocate())
	}
	return true
}

// register puts s's newly full blocks into the prefix cache.
func (e *Engine) register(s *Seq) {
	if !e.cfg.PrefixCaching {
		return
	}
	full := min(s.computed/e.cfg.BlockSize, len(s.Hashes), len(s.blocks))
	for ; s.hashed < full; s.hashed++ {
		h := s.Hashes[s.hashed]
		b := &e.blocks[s.blocks[s.hashed]]
		if b.hasHash {
			continue
		}
		if _, dup := e.cache[h]; dup {
			continue // another sequence computed the same block first
		}
		b.hash, b.hasHash = h, true
		e.cache[h] = s.blocks[s.hashed]
	}
}

func (e *Engine) preempt(s *Seq) {
	e.running = e.running[:len(e.running)-1]
	e.releaseBlocks(s)
	s.state = stateWaiting
	s.Preemptions++
	e.st.Preemptions++
	e.waiting.pushFront(s)
}

// releaseBlocks drops s's references. Blocks nobody references go back to
// the free list: hashed ones to the tail, last block first, so a prefix's
// tail is evicted before its head; unhashed ones to the head.
func (e *Engine) releaseBlocks(s *Seq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		id := s.blocks[i]
		b := &e.blocks[id]
		b.ref--
		if b.ref > 0 {
			continue
		}
		if b.hasHash {
			e.pushFree(id, false)
		} else {
			e.pushFree(id, true)
		}
	}
	s.blocks = s.blocks[:0]
	s.computed, s.hashed = 0, 0
}

// allocate takes the least recently freed block, evicting its cached
// contents.
func (e *Engine) allocate() int32 {
	id := e.freeHead
	e.unlinkFree(id)
	b := &e.blocks[id]
	if b.hasHash {
		if cur, ok := e.cache[b.hash]; ok && cur == id {
			delete(e.cache, b.hash)
		}
		b.hasHash = false
	}
	b.ref = 1
	return id
}

// touch takes a reference on a cached block, removing it from the free
// list if nobody held it.
func (e *Engine) touch(id int32) {
	b := &e.blocks[id]
	if b.ref == 0 {
		e.unlinkFree(id)
	}
	b.ref++
}

func (e *Engine) unlinkFree(id int32) {
	b := &e.blocks[id]
	if b.prev >= 0 {
		e.blocks[b.prev].next = b.next
	} else {
		e.freeHead = b.next
	}
	if b.next >= 0 {
		e.blocks[b.next].prev = b.prev
	} else {
		e.freeTail = b.prev
	}
	b.prev, b.next = -1, -1
	e.free--
}

func (e *Engine) pushFree(id int32, head bool) {
	b := &e.blocks[id]
	if e.free == 0 {
		b.prev, b.next = -1, -1
		e.freeHead, e.freeTail = id, id
	} else if head {
		b.prev, b.next = -1, e.freeHead
		e.blocks[e.freeHead].prev = id
		e.freeHead = id
	} else {
		b.prev, b.next = e.freeTail, -1
		e.blocks[e.freeTail].next = id
		e.freeTail = id
	}
	e.free++
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// deque is a FIFO with push-front for preempted sequences.
type deque struct {
	buf        []*Seq
	head, size int
}

func (q *deque) len() int { return q.size }

func (q *deque) grow() {
	n := max(16, 2*len(q.buf))
	buf := make([]*Seq, n)
	for i := range q.size {
		buf[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = buf, 0
}

func (q *deque) pushBack(s *Seq) {
	if q.size == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.size)%len(q.buf)] = s
	q.size++
}

func (q *deque) pushFront(s *Seq) {
	if q.size == len(q.buf) {
		q.grow()
	}
	q.head = (q.head - 1 + len(q.buf)) % len(q.buf)
	q.buf[q.head] = s
	q.size++
}

func (q *deque) front() *Seq { return q.buf[q.head] }

// at returns the i-th sequence from the front.
func (q *deque) at(i int) *Seq { return q.buf[(q.head+i)%len(q.buf)] }

func (q *deque) popFront() *Seq {
	s := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return s
}

func (q *deque) remove(s *Seq) {
	for i := range q.size {
		if q.buf[(q.head+i)%len(q.buf)] != s {
			continue
		}
		for j := i; j < q.size-1; j++ {
			q.buf[(q.head+j)%len(q.buf)] = q.buf[(q.head+j+1)%len(q.buf)]
		}
		q.buf[(q.head+q.size-1)%len(q.buf)] = nil
		q.size--
		return
	}
}

// HashBlocks appends to dst the chained hashes of the full blocks of
// stream, blockBytes bytes each: h0 = xxh64(block0), hi = xxh64(h(i−1) ‖
// blocki) (vLLM hashes token-id blocks the same chained way). A trailing
// partial block is not hashed.
func HashBlocks(dst []uint64, stream []byte, blockBytes int) []uint64 {
	var d xxhash.Digest
	var prev [8]byte
	for off := 0; off+blockBytes <= len(stream); off += blockBytes {
		d.Reset()
		if off > 0 {
			_, _ = d.Write(prev[:])
		}
		_, _ = d.Write(stream[off : off+blockBytes])
		h := d.Sum64()
		binary.LittleEndian.PutUint64(prev[:], h)
		dst = append(dst, h)
	}
	return dst
}
