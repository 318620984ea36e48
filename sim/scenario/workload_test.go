package scenario

import (
	"testing"
)

func TestTraceSynthesis(t *testing.T) {
	// Two entries sharing their first two ids share exactly 2 × 512 tokens
	// of prompt bytes and then differ.
	g := &TraceGen{w: &Workload{TraceTokensPerID: 512}, entries: []TraceEntry{
		{InputLength: 1500, OutputLength: 5, HashIDs: []uint64{7, 8, 9}},
		{InputLength: 1300, OutputLength: 5, HashIDs: []uint64{7, 8, 10}},
	}}
	var a, b Request
	g.Next(nil, 0, &a)
	g.Next(nil, 0, &b)
	if a.PromptTokens() != 1500 || b.PromptTokens() != 1300 {
		t.Fatalf("prompt tokens %d and %d, want 1500 and 1300", a.PromptTokens(), b.PromptTokens())
	}
	var ba, bb []byte
	for _, s := range a.Segs {
		ba = AppendSegment(ba, s)
	}
	for _, s := range b.Segs {
		bb = AppendSegment(bb, s)
	}
	common := 0
	for common < len(ba) && common < len(bb) && ba[common] == bb[common] {
		common++
	}
	// 2 × 512 tokens × 4 bytes = 4096 shared bytes (the third blocks
	// differ from their first byte with overwhelming probability).
	if common < 4096 || common > 4096+8 {
		t.Errorf("shared %d bytes, want 4096", common)
	}
}
