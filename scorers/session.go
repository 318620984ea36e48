package scorers

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/lru"
)

// SessionConfig configures the session scorer (YAML params of a scorer
// with type "session").
type SessionConfig struct {
	// LoadFactor is c in consistent hashing with bounded loads: no endpoint
	// is assigned a new session while it holds ⌈c × mean⌉ sessions
	// (load_factor, default 1.25, ≥ 1).
	LoadFactor float64 `mapstructure:"load_factor"`
	// MaxSessions bounds the session table; the least recently used
	// session is forgotten beyond it (max_sessions, default 65536).
	MaxSessions int `mapstructure:"max_sessions"`
	// IdleTimeout forgets a session not seen for this long, measured in
	// request time (req.Arrival) (idle_timeout, default "30m"; 0 disables).
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	// VirtualNodes is the number of ring points per endpoint
	// (virtual_nodes, default 100).
	VirtualNodes int `mapstructure:"virtual_nodes"`
	// Shards is the number of independently locked table shards; a power
	// of two (shards, default 16).
	Shards int `mapstructure:"shards"`
}

// DefaultSessionConfig returns the defaults: c = 1.25, 65536 sessions,
// 30 minutes idle timeout, 100 virtual nodes, 16 shards.
func DefaultSessionConfig() SessionConfig {
	return SessionConfig{LoadFactor: 1.25, MaxSessions: 1 << 16, IdleTimeout: 30 * time.Minute, VirtualNodes: 100, Shards: 16}
}

// Validate checks the config; errors name the field.
func (c SessionConfig) Validate() error {
	switch {
	case !(c.LoadFactor >= 1) || math.IsInf(c.LoadFactor, 0):
		return fmt.Errorf("session.load_factor: must be a finite number ≥ 1, got %v", c.LoadFactor)
	case c.MaxSessions <= 0 || c.MaxSessions > 1<<28:
		return fmt.Errorf("session.max_sessions: must be in 1…2^28, got %d", c.MaxSessions)
	case c.IdleTimeout < 0:
		return fmt.Errorf("session.idle_timeout: must be ≥ 0, got %v", c.IdleTimeout)
	case c.VirtualNodes <= 0 || c.VirtualNodes > 4096:
		return fmt.Errorf("session.virtual_nodes: must be in 1…4096, got %d", c.VirtualNodes)
	case c.Shards <= 0 || c.Shards > 1024 || c.Shards&(c.Shards-1) != 0:
		return fmt.Errorf("session.shards: must be a power of two in 1…1024, got %d", c.Shards)
	}
	return nil
}

// Session is an affinity scorer for sticky sessions. A request's session
// key is the hash of req.SessionID (scheduler.SessionIDKey; the proxy takes
// it from the x-session-id header or the body's session id fields) or, when
// the client sent none, req.SessionKey, derived by the proxy from the
// conversation's lineage (scheduler.LineageKey): a thousand agents on one
// scaffold have a thousand keys and spread over the ring, while each
// agent's turns share one. Keys are 64-bit hashes of the whole id, so ids
// sharing a string prefix ("session-1", "session-12") are unrelated.
//
// Assignment: the first time a session is seen it is assigned an endpoint
// by consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam
// 2018): walk the hash ring clockwise from the session's hash and take the
// first candidate endpoint holding fewer than ⌈c × (m+1) / n⌉ sessions, for
// m sessions assigned and n endpoints in the pool (if every candidate is at
// the bound, the first candidate on the ring). The assignment is kept in a
// bounded table and reused for the session's later requests, so an endpoint
// joining the pool moves no session and an endpoint leaving moves only its
// own sessions (to their next ring endpoint). The bound holds at
// assignment (approximately when several shards assign at the same moment:
// each reads the loads atomically but they do not lock each other out);
// sessions are never moved to rebalance.
//
// Formula: score = 1 for the session's endpoint, 0 for every other
// candidate.
// Neutral rule: a request without a session key scores 0 on every candidate
// (a constant, so it does not change the ranking); so does a session whose
// endpoint is not among the candidates (filtered out for this request).
//
// Memory: at most MaxSessions sessions (LRU per shard, MaxSessions/Shards
// each) and a session idle for IdleTimeout of request time is forgotten.
// Score allocates only when the table grows.
type Session struct {
	cfg       SessionConfig
	shardMask uint64
	perShard  int
	idle      int64 // nanoseconds, 0: never
	shards    []sessionShard

	log    *slog.Logger
	poolMu sync.Mutex // serialises PoolChanged
	// ring is read under any one shard lock and replaced with all shard
	// locks held, so a shard operation sees one consistent ring.
	ring *sessionRing
}

// sessionRing is the consistent-hash ring of one pool, with the number of
// sessions each endpoint holds.
type sessionRing struct {
	points []ringPoint // sorted by hash
	addrs  []string    // by endpoint index
	byAddr map[string]uint32
	loads  []atomic.Int64 // sessions per endpoint index
	total  atomic.Int64
}

type ringPoint struct {
	hash uint64
	ep   uint32
}

const noEndpoint = ^uint32(0)

// sessionShard is one shard of the session table: entries by index, the
// same index in nodes (key and LRU links) and in ents.
type sessionShard struct {
	mu    sync.Mutex
	m     map[uint64]uint32 // session key → entry
	nodes []lru.Node        // Key: the session key
	ents  []sessionEntry
	lru   lru.List // Head most recent
	free  uint32   // free entries, linked through nodes' Next

	_ [64]byte
}

type sessionEntry struct {
	last int64 // request time of the last use, Unix ns (0: unknown)
	ep   uint32
}

// NewSession builds a session scorer named name.
func NewSession(name string, cfg SessionConfig, deps Deps) (*Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scorer %q: %w", name, err)
	}
	s := &Session{
		cfg:       cfg,
		shardMask: uint64(cfg.Shards - 1),
		perShard:  max(1, (cfg.MaxSessions+cfg.Shards-1)/cfg.Shards),
		idle:      int64(cfg.IdleTimeout),
		shards:    make([]sessionShard, cfg.Shards),
		ring:      &sessionRing{byAddr: map[string]uint32{}},
		log:       deps.logger().With("scorer", name),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = map[uint64]uint32{}
		sh.lru, sh.free = lru.Empty(), lru.Nil
	}
	return s, nil
}

// Category implements scheduler.Scorer: affinity.
func (*Session) Category() scheduler.Category { return scheduler.CategoryAffinity }

type sessionScratch struct {
	cand []bool // by ring endpoint index: is it a candidate
}

// Score implements scheduler.Scorer.
func (s *Session) Score(cs *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	clear(out)
	h := req.SessionKey
	if req.SessionID != "" {
		h = scheduler.SessionIDKey(req.SessionID)
	}
	if h == 0 {
		return
	}
	var now int64
	if !req.Arrival.IsZero() {
		now = req.Arrival.UnixNano()
	}
	sh := &s.shards[h&s.shardMask]
	sh.mu.Lock()
	r := s.ring
	ep := noEndpoint
	if idx, ok := sh.m[h]; ok {
		e := &sh.ents[idx]
		if s.expired(e.last, now) {
			sh.drop(r, idx)
		} else {
			ep = e.ep
			e.last = max(e.last, now)
			sh.lru.MoveToFront(sh.nodes, idx)
		}
	}
	// Forget a couple of idle sessions from the cold end, so expiry costs
	// O(1) per request and needs no sweeper goroutine.
	for range 2 {
		if sh.lru.Tail == lru.Nil || !s.expired(sh.ents[sh.lru.Tail].last, now) {
			break
		}
		sh.drop(r, sh.lru.Tail)
	}
	if ep == noEndpoint && len(r.addrs) > 0 {
		ep = s.assign(cs, r, h, eps)
		if ep != noEndpoint {
			sh.add(r, h, ep, now, s.perShard)
		}
	}
	sh.mu.Unlock()
	if ep == noEndpoint {
		return
	}
	addr := r.addrs[ep]
	for i, e := range eps {
		if e.Address == addr {
			out[i] = 1
		}
	}
}

func (s *Session) expired(last, now int64) bool {
	return s.idle > 0 && last != 0 && now != 0 && now-last > s.idle
}

// assign picks the endpoint for a new session (consistent hashing with
// bounded loads, restricted to candidates). Caller holds a shard lock.
func (s *Session) assign(cs *scheduler.CycleState, r *sessionRing, h uint64, eps []*scheduler.Endpoint) uint32 {
	slot := cs.Slot()
	sc, _ := (*slot).(*sessionScratch)
	if sc == nil {
		sc = &sessionScratch{}
		*slot = sc
	}
	if cap(sc.cand) < len(r.addrs) {
		sc.cand = make([]bool, len(r.addrs))
	}
	cand := sc.cand[:len(r.addrs)]
	clear(cand)
	nCand := 0
	for _, e := range eps {
		if i, ok := r.byAddr[e.Address]; ok && !cand[i] {
			cand[i] = true
			nCand++
		}
	}
	if nCand == 0 {
		return noEndpoint
	}
	m := r.total.Load() + 1
	bound := int64(math.Ceil(s.cfg.LoadFactor * float64(m) / float64(len(r.addrs))))
	first := noEndpoint
	start, _ := slices.BinarySearchFunc(r.points, h, func(p ringPoint, h uint64) int {
		switch {
		case p.hash < h:
			return -1
		case p.hash > h:
			return 1
		}
		return 0
	})
	for k := range r.points {
		p := r.points[(start+k)%len(r.points)]
		if !cand[p.ep] {
			continue
		}
		if first == noEndpoint {
			first = p.ep
		}
		if r.loads[p.ep].Load() < bound {
			return p.ep
		}
	}
	return first
}

// add records a new session on ep, evicting the shard's least recently used
// session when the shard is full. Caller holds sh.mu.
func (sh *sessionShard) add(r *sessionRing, key uint64, ep uint32, now int64, limit int) {
	if len(sh.m) >= limit && sh.lru.Tail != lru.Nil {
		sh.drop(r, sh.lru.Tail)
	}
	var idx uint32
	if sh.free != lru.Nil {
		idx = sh.free
		sh.free = sh.nodes[idx].Next
	} else {
		idx = uint32(len(sh.ents))
		sh.ents = append(sh.ents, sessionEntry{})
		sh.nodes = append(sh.nodes, lru.Node{})
	}
	sh.ents[idx] = sessionEntry{last: now, ep: ep}
	sh.nodes[idx] = lru.Node{Key: key}
	sh.m[key] = idx
	sh.lru.PushFront(sh.nodes, idx)
	r.loads[ep].Add(1)
	r.total.Add(1)
}

// drop forgets entry idx. Caller holds sh.mu.
func (sh *sessionShard) drop(r *sessionRing, idx uint32) {
	e := &sh.ents[idx]
	delete(sh.m, sh.nodes[idx].Key)
	sh.lru.Remove(sh.nodes, idx)
	if int(e.ep) < len(r.loads) {
		r.loads[e.ep].Add(-1)
		r.total.Add(-1)
	}
	*e = sessionEntry{}
	sh.nodes[idx] = lru.Node{Next: sh.free}
	sh.free = idx
}

// PoolChanged implements scheduler.PoolObserver. When the set of addresses
// changed it rebuilds the ring, moves the remaining sessions to the new
// endpoint numbering and forgets the sessions of endpoints that left (their
// next request is assigned anew). A pool with the same addresses (a metrics
// refresh) costs one pass over the addresses.
func (s *Session) PoolChanged(eps []*scheduler.Endpoint) {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	old := s.ring // only PoolChanged writes it, and poolMu is held
	if sameAddrs(old, eps) {
		return
	}
	r := &sessionRing{byAddr: make(map[string]uint32, len(eps))}
	for _, e := range eps {
		if _, ok := r.byAddr[e.Address]; ok {
			continue
		}
		r.byAddr[e.Address] = uint32(len(r.addrs))
		r.addrs = append(r.addrs, e.Address)
	}
	r.loads = make([]atomic.Int64, len(r.addrs))
	r.points = make([]ringPoint, 0, len(r.addrs)*s.cfg.VirtualNodes)
	for i, a := range r.addrs {
		for v := range s.cfg.VirtualNodes {
			r.points = append(r.points, ringPoint{hash: xxhash.Sum64String(a + "#" + strconv.Itoa(v)), ep: uint32(i)})
		}
	}
	slices.SortFunc(r.points, func(a, b ringPoint) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return int(a.ep) - int(b.ep)
	})

	for i := range s.shards {
		s.shards[i].mu.Lock()
	}
	for i := range s.shards {
		sh := &s.shards[i]
		for idx := sh.lru.Head; idx != lru.Nil; {
			e := &sh.ents[idx]
			next := sh.nodes[idx].Next
			if ni, ok := r.byAddr[old.addrs[e.ep]]; ok {
				e.ep = ni
				r.loads[ni].Add(1)
				r.total.Add(1)
			} else {
				e.ep = noEndpoint // not counted in r's loads
				sh.drop(r, idx)
			}
			idx = next
		}
	}
	s.ring = r
	for i := range s.shards {
		s.shards[i].mu.Unlock()
	}
	s.log.Debug("session ring rebuilt", "endpoints", len(r.addrs), "sessions_kept", r.total.Load())
}

func sameAddrs(r *sessionRing, eps []*scheduler.Endpoint) bool {
	n := 0
	for _, e := range eps {
		if _, ok := r.byAddr[e.Address]; !ok {
			return false
		}
		n++
	}
	// Duplicate addresses in eps would make n overcount; they map to one
	// ring endpoint, so compare distinct counts only when sizes differ.
	if n == len(r.addrs) {
		return true
	}
	seen := make(map[string]struct{}, len(eps))
	for _, e := range eps {
		seen[e.Address] = struct{}{}
	}
	return len(seen) == len(r.addrs)
}

// Sessions returns the number of sessions in the table and the largest
// number held by one endpoint.
func (s *Session) Sessions() (total, maxLoad int) {
	for i := range s.shards {
		s.shards[i].mu.Lock()
	}
	r := s.ring
	for i := range s.shards {
		total += len(s.shards[i].m)
	}
	for i := range r.loads {
		maxLoad = max(maxLoad, int(r.loads[i].Load()))
	}
	for i := range s.shards {
		s.shards[i].mu.Unlock()
	}
	return total, maxLoad
}
