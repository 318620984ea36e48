package scenario

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
type Segment struct {
	Key    uint64
	Tokens int
}

// appendSegment appends seg's bytes to buf: 4 bytes per token drawn from
// a SplitMix64 stream seeded by the key, eight printable letters ('a'…'p')
// per draw.
func AppendSegment(buf []byte, seg Segment) []byte {
	n := seg.Tokens * BytesPerToken
	start := len(buf)
	buf = growBytes(buf, n)
	out := buf[start:]
	state := seg.Key
	var w [8]byte
	i := 0
	for ; i < n; i += 8 {
		state += 0x9e3779b97f4a7c15
		z := state
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		z = z&0x0f0f0f0f0f0f0f0f + 0x6161616161616161
		if i+8 <= n {
			binary.LittleEndian.PutUint64(out[i:], z)
			continue
		}
		binary.LittleEndian.PutUint64(w[:], z)
		copy(out[i:], w[:n-i])
	}
	return buf
}

// segCache keeps the bytes of long segments (system prompts, trace
// blocks), which repeat across requests; it is cleared when it outgrows
// its budget. Not safe for concurrent use (one per run).
type SegCache struct {
	m     map[Segment][]byte
	bytes int
}

const segCacheBudget = 64 << 20

func (c *SegCache) Append(buf []byte, seg Segment) []byte {
	if seg.Tokens < 256 {
		return AppendSegment(buf, seg)
	}
	if b, ok := c.m[seg]; ok {
		return append(buf, b...)
	}
	start := len(buf)
	buf = AppendSegment(buf, seg)
	if c.m == nil || c.bytes > segCacheBudget {
		c.m, c.bytes = make(map[Segment][]byte), 0
	}
	c.m[seg] = append([]byte(nil), buf[start:]...)
	c.bytes += len(buf) - start
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
func BlockHashes(dst []uint64, stream []byte, blockTokens int) []uint64 {
	return engine.HashBlocks(dst, stream, blockTokens*BytesPerToken)
}

// mixKey derives a segment key from a few identifiers.
func MixKey(vals ...uint64) uint64 {
	h := uint64(0x6a09e667f3bcc909)
	for _, v := range vals {
		h ^= v + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)
		h = (h ^ (h >> 33)) * 0xff51afd7ed558ccd
		h ^= h >> 33
	}
	return h
}
