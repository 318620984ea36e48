package proxy

import (
	"bytes"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/trimtab/trimtab/scheduler"
)

// Keyless session affinity (see package parse): a Responses continuation
// (previous_response_id) takes the session key of the request whose
// response it continues, which the HTTP proxy learned from that response's
// id (lineage); a continuation of a response the proxy never saw takes the
// hash of the id it names, and its own response passes that key on.

// lineageShards and lineagePerShard bound the table: 16 × 4096 responses.
const (
	lineageShards   = 16
	lineagePerShard = 4096
)

// lineage maps the hash of a response id to the session key of the
// request it answered. It is bounded (the oldest entry of a shard is
// forgotten first), allocates nothing once its shards are full, and is
// safe for concurrent use.
type lineage struct {
	shards [lineageShards]lineageShard
}

type lineageShard struct {
	mu   sync.Mutex
	m    map[uint64]uint64
	ring []uint64 // response id hashes in insertion order, 0 = free
	next int
	_    [40]byte
}

func newLineage() *lineage {
	l := &lineage{}
	for i := range l.shards {
		l.shards[i].m = make(map[uint64]uint64, lineagePerShard)
		l.shards[i].ring = make([]uint64, lineagePerShard)
	}
	return l
}

// idHash is the key of a response id in the table (never 0): the same
// bytes whether read from a response or from a previous_response_id.
func idHash(id []byte) uint64 {
	h := xxhash.Sum64(id)
	if h == 0 {
		h = 1
	}
	return h
}

// learn records that the response with id hash id continued session key.
func (l *lineage) learn(id, key uint64) {
	if id == 0 || key == 0 {
		return
	}
	sh := &l.shards[id%lineageShards]
	sh.mu.Lock()
	if _, ok := sh.m[id]; !ok {
		if old := sh.ring[sh.next]; old != 0 {
			delete(sh.m, old)
		}
		sh.ring[sh.next] = id
		sh.next = (sh.next + 1) % len(sh.ring)
	}
	sh.m[id] = key
	sh.mu.Unlock()
}

// lookup returns the session key the response with id hash id continued.
func (l *lineage) lookup(id uint64) (uint64, bool) {
	sh := &l.shards[id%lineageShards]
	sh.mu.Lock()
	k, ok := sh.m[id]
	sh.mu.Unlock()
	return k, ok
}

// ContinuationKey is the session key of a continuation of response id
// (parse.Continuations).
func (l *lineage) ContinuationKey(id []byte) uint64 {
	h := idHash(id)
	if k, ok := l.lookup(h); ok {
		return k
	}
	return h
}

// effectiveKey is the session key the session scorer uses for req.
func effectiveKey(req *scheduler.Request) uint64 {
	if req.SessionID != "" {
		return scheduler.SessionIDKey(req.SessionID)
	}
	return req.SessionKey
}

// maxSniff bounds how far into a Responses response the proxy looks for
// its id, and maxIDLen how long an id may be.
const (
	maxSniff = 4 << 10
	maxIDLen = 256
)

// idSniffer finds a Responses response's id: the first "id" member in its
// first maxSniff bytes (a JSON body starts with it; a stream's first event,
// response.created, carries the response object, whose id comes before
// any output item's). It keeps the leading bytes in a fixed buffer, so an
// id split across reads is found too. Once found, the id is learned as a
// continuation of key by p at once, before the client can have the whole
// response and send its continuation.
type idSniffer struct {
	p    *Parser
	key  uint64
	buf  [maxSniff]byte
	n    int
	done bool
	id   []byte // into buf, once found
}

var idMember = []byte(`"id"`)

// feed looks at the next response bytes.
func (sn *idSniffer) feed(p []byte) {
	if sn == nil || sn.done {
		return
	}
	c := copy(sn.buf[sn.n:], p)
	sn.n += c
	b := sn.buf[:sn.n]
	if i := bytes.Index(b, idMember); i >= 0 {
		rest := b[i+len(idMember):]
		j := 0
		for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t' || rest[j] == '\n' || rest[j] == '\r') {
			j++
		}
		if j < len(rest) && rest[j] == ':' {
			j++
			for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t' || rest[j] == '\n' || rest[j] == '\r') {
				j++
			}
		}
		if j < len(rest) && rest[j] == '"' {
			if end := bytes.IndexByte(rest[j+1:], '"'); end >= 0 {
				id := rest[j+1 : j+1+end]
				sn.done = true
				if len(id) > 0 && len(id) <= maxIDLen && bytes.IndexByte(id, '\\') < 0 {
					sn.id = id
					if sn.p != nil {
						sn.p.Learn(id, sn.key)
					}
				}
				return
			}
		} else if j < len(rest) {
			sn.done = true // "id" followed by something else: not a response object
			return
		}
	}
	if sn.n == len(sn.buf) {
		sn.done = true
	}
}

var sniffers = sync.Pool{New: func() any { return new(idSniffer) }}

func putSniffer(sn *idSniffer) {
	sn.p, sn.key, sn.n, sn.done, sn.id = nil, 0, 0, false, nil
	sniffers.Put(sn)
}
