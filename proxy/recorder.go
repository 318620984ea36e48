package proxy

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/trimtab/trimtab/scheduler"
)

// Recorder keeps the most recent decision explanations in a bounded ring
// for /debug/decisions. It samples one decision in every N so that the
// copy (Decision.Explain allocates) stays off the hot path. Safe for
// concurrent use.
type Recorder struct {
	every uint64
	n     atomic.Uint64
	mu    sync.Mutex
	ring  []scheduler.Explanation
	next  int
	full  bool
}

// NewRecorder keeps the last size explanations, recording one decision in
// every `every` (1 records all). size 0 records nothing.
func NewRecorder(size, every int) *Recorder {
	if every < 1 {
		every = 1
	}
	return &Recorder{every: uint64(every), ring: make([]scheduler.Explanation, size)}
}

// SessionHash is how debug views show a session id: the 16 hex digits of
// its 64-bit xxhash, stable across requests and restarts so one session's
// decisions can be matched, without the id itself.
func SessionHash(id string) string {
	return fmt.Sprintf("%016x", xxhash.Sum64String(id))
}

// Sample reports whether the next decision should be recorded. Callers
// call it once per decision and, when true, Record before Done.
func (r *Recorder) Sample() bool {
	if r == nil || len(r.ring) == 0 {
		return false
	}
	return (r.n.Add(1)-1)%r.every == 0
}

// Record stores x, with its session id replaced by SessionHash of it:
// the debug views never show a client's session id.
func (r *Recorder) Record(x scheduler.Explanation) {
	if r == nil || len(r.ring) == 0 {
		return
	}
	if x.SessionID != "" {
		x.SessionID = SessionHash(x.SessionID)
	}
	r.mu.Lock()
	r.ring[r.next] = x
	r.next++
	if r.next == len(r.ring) {
		r.next, r.full = 0, true
	}
	r.mu.Unlock()
}

// Recent returns the recorded explanations, newest first, in a new slice.
func (r *Recorder) Recent() []scheduler.Explanation {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = len(r.ring)
	}
	out := make([]scheduler.Explanation, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, r.ring[(r.next-i+len(r.ring))%len(r.ring)])
	}
	return out
}
