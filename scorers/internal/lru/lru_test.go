package lru

import (
	"slices"
	"testing"
)

// walk returns l's node indexes head to tail, and checks that the Prev
// links walk the same nodes back and that N counts them.
func walk(t *testing.T, l *List, nodes []Node) []uint32 {
	t.Helper()
	var fwd []uint32
	prev := Nil
	for i := l.Head; i != Nil; i = nodes[i].Next {
		if nodes[i].Prev != prev {
			t.Fatalf("node %d: Prev %d, want %d", i, nodes[i].Prev, prev)
		}
		fwd = append(fwd, i)
		prev = i
		if len(fwd) > len(nodes) {
			t.Fatal("cycle")
		}
	}
	if l.Tail != prev {
		t.Fatalf("Tail %d, walked to %d", l.Tail, prev)
	}
	if int(l.N) != len(fwd) {
		t.Fatalf("N %d, walked %d", l.N, len(fwd))
	}
	return fwd
}

func TestList(t *testing.T) {
	// Each case starts from the list 0 1 2 3 4 (head first, built by
	// pushing 4, 3, 2, 1, 0 to the front); node 5 is unlinked.
	tests := []struct {
		name string
		op   func(l *List, n []Node)
		want []uint32
	}{
		{"as built", func(*List, []Node) {}, []uint32{0, 1, 2, 3, 4}},
		{"remove head", func(l *List, n []Node) { l.Remove(n, 0) }, []uint32{1, 2, 3, 4}},
		{"remove tail", func(l *List, n []Node) { l.Remove(n, 4) }, []uint32{0, 1, 2, 3}},
		{"remove middle", func(l *List, n []Node) { l.Remove(n, 2) }, []uint32{0, 1, 3, 4}},
		{"move tail to front", func(l *List, n []Node) { l.MoveToFront(n, 4) }, []uint32{4, 0, 1, 2, 3}},
		{"move head to front", func(l *List, n []Node) { l.MoveToFront(n, 0) }, []uint32{0, 1, 2, 3, 4}},
		{"insert 5 after 2", func(l *List, n []Node) { l.InsertAfter(n, 2, 5) }, []uint32{0, 1, 2, 5, 3, 4}},
		{"insert 5 after the tail", func(l *List, n []Node) { l.InsertAfter(n, 4, 5) }, []uint32{0, 1, 2, 3, 4, 5}},
		// The run 2 3 moves to the head: 2 3 0 1 4.
		{"splice 2…3 to the head", func(l *List, n []Node) { l.Splice(n, Nil, 2, 3) }, []uint32{2, 3, 0, 1, 4}},
		// The run 0 1 moves after 4: 2 3 4 0 1.
		{"splice 0…1 after the tail", func(l *List, n []Node) { l.Splice(n, 4, 0, 1) }, []uint32{2, 3, 4, 0, 1}},
		// Node 5 takes 2's place.
		{"relocate 2 to 5", func(l *List, n []Node) { l.Relocate(n, 2, 5) }, []uint32{0, 1, 5, 3, 4}},
		{"relocate the head", func(l *List, n []Node) { l.Relocate(n, 0, 5) }, []uint32{5, 1, 2, 3, 4}},
		{"relocate the tail", func(l *List, n []Node) { l.Relocate(n, 4, 5) }, []uint32{0, 1, 2, 3, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := make([]Node, 6)
			l := Empty()
			for i := 4; i >= 0; i-- {
				l.PushFront(nodes, uint32(i))
			}
			tt.op(&l, nodes)
			if got := walk(t, &l, nodes); !slices.Equal(got, tt.want) {
				t.Errorf("list %v, want %v", got, tt.want)
			}
		})
	}
}

func TestListEmptiesAndRefills(t *testing.T) {
	nodes := make([]Node, 2)
	l := Empty()
	l.PushFront(nodes, 0)
	l.Remove(nodes, 0)
	if l.Head != Nil || l.Tail != Nil || l.N != 0 {
		t.Fatalf("emptied list %+v, want Head and Tail Nil, N 0", l)
	}
	l.PushFront(nodes, 1)
	l.PushFront(nodes, 0)
	if got := walk(t, &l, nodes); !slices.Equal(got, []uint32{0, 1}) {
		t.Errorf("list %v, want [0 1]", got)
	}
}
