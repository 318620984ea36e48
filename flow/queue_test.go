package flow

import (
	"math"
	"testing"
	"time"
)

func push(t *testing.T, q *Queue[int], v, band int, tenant string, deadline time.Duration) *Item[int] {
	t.Helper()
	it := &Item[int]{Value: v, Band: band, Tenant: tenant, Enqueued: t0, Deadline: t0.Add(deadline)}
	if victim, ok := q.Push(it); !ok || victim != nil {
		t.Fatalf("push %d: ok %v victim %v", v, ok, victim)
	}
	return it
}

func popAll(q *Queue[int]) []int {
	var out []int
	for it := q.Pop(); it != nil; it = q.Pop() {
		out = append(out, it.Value)
	}
	return out
}

func TestQueueOrder(t *testing.T) {
	q := NewQueue[int](3, 100, nil)
	push(t, q, 1, 2, "x", time.Second)
	push(t, q, 2, 1, "x", 3*time.Second)
	push(t, q, 3, 1, "x", 2*time.Second) // earlier deadline than 2: first in its band
	push(t, q, 4, 0, "x", 9*time.Second)
	push(t, q, 5, 1, "x", 2*time.Second) // same deadline as 3: first come first
	// band 0 (4), then band 1 by deadline (3, 5, 2), then band 2 (1).
	got := popAll(q)
	want := []int{4, 3, 5, 2, 1}
	if !equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestQueueRoundRobinAcrossTenants(t *testing.T) {
	q := NewQueue[int](1, 100, nil)
	for i := range 4 {
		push(t, q, 10+i, 0, "big", time.Second)
	}
	push(t, q, 20, 0, "small", time.Second)
	push(t, q, 30, 0, "third", time.Second)
	// One each in turn: big, small, third, then big alone.
	got := popAll(q)
	want := []int{10, 20, 30, 11, 12, 13}
	if !equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// TestFairnessTenTimesTraffic: two tenants in one band, "big" sending
// 10 requests a tick and "small" 1, the pool dispatching 3 every 2 ticks
// (1.5 a tick). Both stay backlogged (small's 1/tick exceeds its fair
// 0.75), so small's share of dispatches must be within 10 % of its fair
// share, 50 %: in [45 %, 55 %].
func TestFairnessTenTimesTraffic(t *testing.T) {
	q := NewQueue[int](1, 1<<20, nil)
	counts := map[string]int{}
	total := 0
	for tick := range 400 {
		for range 10 {
			push(t, q, 0, 0, "big", time.Hour)
		}
		push(t, q, 0, 0, "small", time.Hour)
		n := 1 + tick%2 // 1, 2, 1, 2 …: 1.5 a tick
		for range n {
			if q.TenantLen(0, "big") == 0 || q.TenantLen(0, "small") == 0 {
				t.Fatalf("tick %d: a tenant is no longer backlogged", tick)
			}
			counts[q.Pop().Tenant]++
			total++
		}
	}
	share := float64(counts["small"]) / float64(total)
	// 600 dispatches alternate between the two: small gets 300, 50 %.
	if math.Abs(share-0.5) > 0.05 {
		t.Fatalf("small tenant's share %.3f (%d of %d), want 0.5 ± 0.05", share, counts["small"], total)
	}
}

func TestQueueShedsSheddableFirst(t *testing.T) {
	q := NewQueue[int](3, 3, []bool{false, false, true})
	push(t, q, 1, 2, "x", time.Second)
	push(t, q, 2, 2, "x", 5*time.Second) // latest deadline of the sheddable band: the victim
	push(t, q, 3, 1, "x", time.Second)
	victim, ok := q.Push(&Item[int]{Value: 4, Band: 0, Tenant: "y", Deadline: t0.Add(time.Second)})
	if !ok || victim == nil || victim.Value != 2 {
		t.Fatalf("push into a full queue: ok %v victim %+v, want the sheddable request 2 dropped", ok, victim)
	}
	// A sheddable request cannot push out another of its band …
	if _, ok := q.Push(&Item[int]{Value: 5, Band: 2, Tenant: "x"}); ok {
		t.Fatal("a sheddable request was queued into a full queue")
	}
	// A standard one sheds the last sheddable request, 1 …
	if v, ok := q.Push(&Item[int]{Value: 6, Band: 1, Tenant: "x", Deadline: t0.Add(time.Hour)}); !ok || v == nil || v.Value != 1 {
		t.Fatalf("standard push: ok %v victim %+v, want 1 shed", ok, v)
	}
	// … and with no sheddable request left, nothing pushes another out.
	if _, ok := q.Push(&Item[int]{Value: 7, Band: 0, Tenant: "x"}); ok {
		t.Fatal("an interactive request pushed a standard one out")
	}
	if got, want := popAll(q), []int{4, 3, 6}; !equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
}

func TestQueueExpireAndRemove(t *testing.T) {
	q := NewQueue[int](2, 100, nil)
	a := push(t, q, 1, 0, "x", time.Second)
	push(t, q, 2, 0, "y", 3*time.Second)
	push(t, q, 3, 1, "x", 2*time.Second)
	push(t, q, 4, 1, "z", time.Second)
	q.Remove(a)
	q.Remove(a) // no-op
	// At t0+2s: 3 (deadline 2s, not after now) and 4 expire; 1 was removed.
	out := q.Expire(t0.Add(2*time.Second), nil)
	var got []int
	for _, it := range out {
		got = append(got, it.Value)
	}
	if len(got) != 2 || q.Len() != 1 {
		t.Fatalf("expired %v, %d left; want 3 and 4 expired, 1 left", got, q.Len())
	}
	if got := popAll(q); !equal(got, []int{2}) {
		t.Fatalf("left %v, want [2]", got)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
