package fakeserver

import (
	"fmt"
	"sync"
)

// ResponseStore keeps the conversations of Responses API responses by
// response id, so that a request continuing one (previous_response_id) is
// prefilled with the whole conversation, as a server that stores responses
// rebuilds it. A fleet shares one store (Deps.Responses): a continuation
// routed to a server that does not hold the conversation in its prefix
// cache still sees the whole conversation and prefills it, while one
// routed to the server that answered the turn before reads it from the
// cache.
//
// The store is bounded by both the number of responses and their bytes;
// the oldest response is forgotten first, and a continuation of a
// forgotten response is refused as one of an unknown id. It is safe for
// concurrent use.
type ResponseStore struct {
	maxN, maxBytes int

	mu    sync.Mutex
	m     map[string][]byte
	queue []string // ids, oldest first from head
	head  int
	bytes int
}

// Default bounds of a store made for a server without one: 4,096
// responses, 64 MiB of conversation.
const (
	DefaultStoredResponses = 4096
	DefaultStoredBytes     = 64 << 20
)

// NewResponseStore returns a store of at most maxResponses responses
// holding at most maxBytes bytes of conversation (ids included); both must
// be ≥ 1.
func NewResponseStore(maxResponses, maxBytes int) (*ResponseStore, error) {
	if maxResponses < 1 || maxBytes < 1 {
		return nil, fmt.Errorf("response store: %d responses of %d bytes, want ≥ 1 of each", maxResponses, maxBytes)
	}
	return &ResponseStore{maxN: maxResponses, maxBytes: maxBytes, m: make(map[string][]byte)}, nil
}

// put stores conv as the conversation up to and including response id's
// output; the store keeps its own reference to conv, which the caller
// must not change. A conversation larger than the byte bound is not
// stored.
func (s *ResponseStore) put(id string, conv []byte) {
	size := len(id) + len(conv)
	if size > s.maxBytes {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.m[id]; ok {
		s.bytes -= len(id) + len(old)
		s.m[id] = conv
		s.bytes += size
	} else {
		s.m[id] = conv
		s.queue = append(s.queue, id)
		s.bytes += size
	}
	for len(s.m) > s.maxN || s.bytes > s.maxBytes {
		old := s.queue[s.head]
		s.queue[s.head] = ""
		s.head++
		if c, ok := s.m[old]; ok {
			s.bytes -= len(old) + len(c)
			delete(s.m, old)
		}
	}
	if s.head > len(s.queue)/2 {
		s.queue = append(s.queue[:0], s.queue[s.head:]...)
		s.head = 0
	}
}

// get returns the conversation stored for response id.
func (s *ResponseStore) get(id string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[id]
	return c, ok
}

// Len returns the number of responses stored and their bytes (ids
// included).
func (s *ResponseStore) Len() (responses, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m), s.bytes
}
