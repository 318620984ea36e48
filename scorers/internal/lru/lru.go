// Package lru is the doubly linked list that the prefix index and the
// session table keep their least-recently-used order in: nodes live in a
// slice the caller owns and link to each other by index, so a list costs
// no heap object per entry and no pointer the garbage collector scans.
//
// A Node is 16 bytes: the caller's 64-bit key and the two links. A List is
// a head, a tail and a count over one such slice; several lists may share
// a slice (the prefix index keeps one per endpoint in a shard's table).
// Nothing here locks: the caller guards a list and its nodes.
package lru

// Nil is the index that ends a list: Prev of the head, Next of the tail,
// and Head and Tail of an empty list.
const Nil = ^uint32(0)

// Node is one entry of a list: Key is the caller's, Prev and Next the
// indexes of its neighbours in the same slice (Nil at the ends). Only the
// List methods write Prev and Next of a linked node.
type Node struct {
	Key        uint64
	Prev, Next uint32
}

// List is one list over a slice of nodes: Head the most recently used
// node, Tail the least, N the number linked.
type List struct {
	Head, Tail, N uint32
}

// Empty returns a list with no node.
func Empty() List { return List{Head: Nil, Tail: Nil} }

// PushFront links the unlinked node i at the head.
func (l *List) PushFront(nodes []Node, i uint32) { l.InsertAfter(nodes, Nil, i) }

// InsertAfter links the unlinked node i right after node after (at the
// head when after is Nil).
func (l *List) InsertAfter(nodes []Node, after, i uint32) {
	l.Attach(nodes, after, i, i)
	l.N++
}

// Remove unlinks node i.
func (l *List) Remove(nodes []Node, i uint32) {
	l.Detach(nodes, i, i)
	l.N--
}

// MoveToFront makes the linked node i the head.
func (l *List) MoveToFront(nodes []Node, i uint32) {
	if l.Head == i {
		return
	}
	l.Detach(nodes, i, i)
	l.Attach(nodes, Nil, i, i)
}

// Splice moves the linked run first…last to right after node after (to
// the head when after is Nil); after is not in the run.
func (l *List) Splice(nodes []Node, after, first, last uint32) {
	l.Detach(nodes, first, last)
	l.Attach(nodes, after, first, last)
}

// Detach unlinks the run first…last (linked, in order), leaving the run's
// own links and N as they are.
func (l *List) Detach(nodes []Node, first, last uint32) {
	f, t := &nodes[first], &nodes[last]
	if f.Prev != Nil {
		nodes[f.Prev].Next = t.Next
	} else {
		l.Head = t.Next
	}
	if t.Next != Nil {
		nodes[t.Next].Prev = f.Prev
	} else {
		l.Tail = f.Prev
	}
}

// Attach links the detached run first…last right after node after (at
// the head when after is Nil), leaving N as it is.
func (l *List) Attach(nodes []Node, after, first, last uint32) {
	f, t := &nodes[first], &nodes[last]
	var next uint32
	if after == Nil {
		next, l.Head = l.Head, first
	} else {
		a := &nodes[after]
		next, a.Next = a.Next, first
	}
	f.Prev, t.Next = after, next
	if next != Nil {
		nodes[next].Prev = last
	} else {
		l.Tail = last
	}
}

// Relocate moves the links of the linked node from to the unused node
// to, which takes from's place in the list; keys are the caller's to
// move.
func (l *List) Relocate(nodes []Node, from, to uint32) {
	e, t := &nodes[from], &nodes[to]
	t.Prev, t.Next = e.Prev, e.Next
	if e.Prev != Nil {
		nodes[e.Prev].Next = to
	} else {
		l.Head = to
	}
	if e.Next != Nil {
		nodes[e.Next].Prev = to
	} else {
		l.Tail = to
	}
}
