package flow

import (
	"container/heap"
	"time"
)

// Item is one request waiting in a Queue. The queue owns it from Push
// until Pop, Remove or Expire hands it back.
type Item[T any] struct {
	// Value is the caller's payload.
	Value T
	// Band, Tenant: the request's class.
	Band   int
	Tenant string
	// Enqueued is when the request joined the queue; Deadline when it
	// must have left it.
	Enqueued, Deadline time.Time

	seq    uint64
	idx    int // position in its tenant's heap; -1 when not queued
	tenant *tenantQueue[T]
}

// Queued reports whether the item is still in its queue.
func (it *Item[T]) Queued() bool { return it.idx >= 0 && it.tenant != nil }

// tenantQueue is one tenant's requests in one band, earliest deadline
// first (then first come).
type tenantQueue[T any] struct {
	name   string
	items  []*Item[T]
	active bool // in the band's round
}

func (q *tenantQueue[T]) Len() int { return len(q.items) }
func (q *tenantQueue[T]) Less(i, j int) bool {
	a, b := q.items[i], q.items[j]
	if !a.Deadline.Equal(b.Deadline) {
		return a.Deadline.Before(b.Deadline)
	}
	return a.seq < b.seq
}
func (q *tenantQueue[T]) Swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	q.items[i].idx, q.items[j].idx = i, j
}
func (q *tenantQueue[T]) Push(x any) {
	it := x.(*Item[T])
	it.idx = len(q.items)
	q.items = append(q.items, it)
}
func (q *tenantQueue[T]) Pop() any {
	n := len(q.items) - 1
	it := q.items[n]
	q.items[n] = nil
	q.items = q.items[:n]
	it.idx = -1
	return it
}

// band is one priority band: its tenants' queues and the round of
// tenants with requests waiting, served in turn.
type band[T any] struct {
	tenants map[string]*tenantQueue[T]
	round   []*tenantQueue[T] // tenants with requests, in turn order
	next    int               // index in round of the tenant served next
	n       int
}

// Queue holds the requests flow control keeps in the router: strict
// priority across bands; within a band, deficit round robin across
// tenants with a quantum of one request (each backlogged tenant gets one
// dispatch per round, however much it sends); within a tenant, earliest
// deadline first. It is a plain data structure of step functions: not
// safe for concurrent use; the caller locks.
type Queue[T any] struct {
	bands []band[T]
	n     int
	max   int
	shed  []bool
	seq   uint64
}

// NewQueue returns a queue of bands bands (0 highest) holding at most max
// requests; sheddable[i] marks band i sheddable (may be nil).
func NewQueue[T any](bands, max int, sheddable []bool) *Queue[T] {
	q := &Queue[T]{bands: make([]band[T], bands), max: max, shed: make([]bool, bands)}
	copy(q.shed, sheddable)
	for i := range q.bands {
		q.bands[i].tenants = map[string]*tenantQueue[T]{}
	}
	return q
}

// Len returns the requests queued; BandLen those of band b.
func (q *Queue[T]) Len() int          { return q.n }
func (q *Queue[T]) BandLen(b int) int { return q.bands[b].n }

// Push queues it. When the queue is full it makes room by dropping the
// latest-deadline request of the lowest sheddable band below it's band,
// returned as victim; when there is none, it is not queued and ok is
// false.
func (q *Queue[T]) Push(it *Item[T]) (victim *Item[T], ok bool) {
	if q.n >= q.max {
		victim = q.victim(it.Band)
		if victim == nil {
			return nil, false
		}
		q.Remove(victim)
	}
	q.seq++
	it.seq = q.seq
	b := &q.bands[it.Band]
	tq := b.tenants[it.Tenant]
	if tq == nil {
		tq = &tenantQueue[T]{name: it.Tenant}
		b.tenants[it.Tenant] = tq
	}
	it.tenant = tq
	heap.Push(tq, it)
	if !tq.active {
		tq.active = true
		b.round = append(b.round, tq)
	}
	b.n++
	q.n++
	return victim, true
}

// victim returns the request a full queue drops for one of band above:
// the latest deadline of the lowest sheddable band lower than above.
func (q *Queue[T]) victim(above int) *Item[T] {
	for bi := len(q.bands) - 1; bi > above; bi-- {
		if !q.shed[bi] || q.bands[bi].n == 0 {
			continue
		}
		var worst *Item[T]
		for _, tq := range q.bands[bi].round {
			for _, it := range tq.items {
				if worst == nil || it.Deadline.After(worst.Deadline) || it.Deadline.Equal(worst.Deadline) && it.seq > worst.seq {
					worst = it
				}
			}
		}
		return worst
	}
	return nil
}

// Peek returns the request to dispatch next, nil when the queue is
// empty: the first tenant in turn of the highest non-empty band, and its
// earliest deadline.
func (q *Queue[T]) Peek() *Item[T] {
	for bi := range q.bands {
		b := &q.bands[bi]
		if b.n == 0 {
			continue
		}
		return b.round[b.next].items[0]
	}
	return nil
}

// Pop removes and returns Peek's request and moves its band's turn to the
// next tenant.
func (q *Queue[T]) Pop() *Item[T] {
	it := q.Peek()
	if it == nil {
		return nil
	}
	b := &q.bands[it.Band]
	tq := it.tenant
	q.Remove(it)
	if b.next < len(b.round) && b.round[b.next] == tq {
		b.next++ // the tenant stays in the round: its turn is over
	}
	if b.next >= len(b.round) {
		b.next = 0
	}
	return it
}

// Remove takes it out of the queue (a client that went away). It is a
// no-op for an item no longer queued.
func (q *Queue[T]) Remove(it *Item[T]) {
	if !it.Queued() {
		return
	}
	tq := it.tenant
	heap.Remove(tq, it.idx)
	it.idx = -1
	b := &q.bands[it.Band]
	b.n--
	q.n--
	if len(tq.items) == 0 {
		for i, x := range b.round {
			if x == tq {
				b.round = append(b.round[:i], b.round[i+1:]...)
				if i < b.next {
					b.next--
				}
				break
			}
		}
		tq.active = false
		delete(b.tenants, tq.name)
		if b.next >= len(b.round) {
			b.next = 0
		}
	}
	it.tenant = nil
}

// Expire removes every request whose deadline is not after now and
// appends them to out, returning it.
func (q *Queue[T]) Expire(now time.Time, out []*Item[T]) []*Item[T] {
	if q.n == 0 {
		return out
	}
	for bi := range q.bands {
		b := &q.bands[bi]
		for i := 0; i < len(b.round); {
			tq := b.round[i]
			for len(tq.items) > 0 && !tq.items[0].Deadline.After(now) {
				it := tq.items[0]
				out = append(out, it)
				if len(tq.items) == 1 {
					q.Remove(it) // drops tq from the round
					break
				}
				q.Remove(it)
			}
			if i < len(b.round) && b.round[i] == tq {
				i++
			}
		}
	}
	return out
}

// TenantLen returns how many requests tenant has queued in band b.
func (q *Queue[T]) TenantLen(b int, tenant string) int {
	if tq := q.bands[b].tenants[tenant]; tq != nil {
		return len(tq.items)
	}
	return 0
}
