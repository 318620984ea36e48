package sim

import (
	"encoding/binary"

	"github.com/trimtab/trimtab/sim/engine"
)

// BytesPerToken is how many prompt bytes the simulator synthesises per
// token; it matches the prefix scorer's tokens→bytes assumption.
const BytesPerToken = 4

// segment is a run of synthetic tokens. The same key always yields the
// same bytes, so two prompts that start with the same segments share
// exactly those leading bytes, which is all that prefix hashing (in the
// router and in the engine) can see.
type segment struct {
	key    uint64
	tokens int
}

// appendSegment appends seg's bytes to buf: 4 printable bytes per token
// drawn from a SplitMix64 stream seeded by the key.
func appendSegment(buf []byte, seg segment) []byte {
	n := seg.tokens * BytesPerToken
	start := len(buf)
	buf = growBytes(buf, n)
	out := buf[start:]
	state := seg.key
	var w [8]byte
	for i := 0; i < n; i += 8 {
		state += 0x9e3779b97f4a7c15
		z := state
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		binary.LittleEndian.PutUint64(w[:], z)
		for j := 0; j < 8 && i+j < n; j++ {
			out[i+j] = 'a' + w[j]%26
		}
	}
	return buf
}

func growBytes(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// blockHashes appends the engine's prefix-cache keys of stream's full
// blocks of blockTokens tokens.
func blockHashes(dst []uint64, stream []byte, blockTokens int) []uint64 {
	return engine.HashBlocks(dst, stream, blockTokens*BytesPerToken)
}

// mixKey derives a segment key from a few identifiers.
func mixKey(vals ...uint64) uint64 {
	h := uint64(0x6a09e667f3bcc909)
	for _, v := range vals {
		h ^= v + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)
		h = (h ^ (h >> 33)) * 0xff51afd7ed558ccd
		h ^= h >> 33
	}
	return h
}
