package scheduler

import "github.com/cespare/xxhash/v2"

// SessionIDKey is the session key of a client's session id: its 64-bit
// xxhash, never 0. Keys are whole-string hashes, so ids sharing a string
// prefix ("session-1", "session-12") are unrelated keys.
func SessionIDKey(id string) uint64 { return nonZero(xxhash.Sum64String(id)) }

// LineageKey is the session key of a conversation whose root renders as
// root: the prompt bytes up to the end of its first turn (the scaffold —
// system prompt and tools — and the first message after it). Every later
// turn of the conversation resends the same root, so its turns share the
// key, while conversations on one scaffold differ in their first turn.
// It is never 0; the caller must not pass the scaffold alone.
func LineageKey(root []byte) uint64 { return nonZero(xxhash.Sum64(root) ^ lineageSalt) }

// lineageSalt keeps lineage keys apart from SessionIDKey of the same bytes.
const lineageSalt = 0x6c696e6561676521

func nonZero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}
