package prefix

import (
	"testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

// FuzzPrefix feeds arbitrary prompts (outside input) through the prefix
// scorer: it must not panic, scores must stay in [0,1], and a prompt just
// routed to an endpoint must score 1 there when it has a full block.
func FuzzPrefix(f *testing.F) {
	f.Add([]byte(""), "m", "", uint8(4))
	f.Add(prompt("ABCD"), "m", "salt", uint8(4))
	f.Add(append(prompt("AB"), 0xff, 0x00), "", "", uint8(1))
	f.Add(make([]byte, 300), "model-with-a-long-name", "t", uint8(16))
	f.Fuzz(func(t *testing.T, pr []byte, model, salt string, blockTokens uint8) {
		cfg := smallPrefix()
		cfg.BlockSize = 1 + int(blockTokens%32)
		p := mustPrefix(t, cfg)
		h := scorertest.NewHarness(t, p, scorertest.Eps("a:1", "b:1"))
		req := scheduler.Request{Model: model, CacheSalt: salt, Prompt: pr}
		route(t, h, req, "a:1")
		got, _ := h.Pick(t, &req)
		for _, v := range got {
			if !(v >= 0 && v <= 1) {
				t.Fatalf("score %v outside [0,1]", v)
			}
		}
		if len(pr) >= cfg.BlockSize*cfg.BytesPerToken && got[0] != 1 {
			t.Fatalf("prompt routed to a scores %v there, want 1", got[0])
		}
	})
}

// FuzzPrefixPeer feeds arbitrary hash chains (a peer's data, outside
// input: repeats, zeros, any length) into RecordPeer and Restore: the index
// must stay consistent (checkIndex: slot table and LRU lists agree, no
// endpoint over capacity) and keep answering scores in [0,1].
func FuzzPrefixPeer(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8}, false)
	f.Add(make([]byte, 8*40), true)
	f.Add([]byte("0123456789abcdef0123456789abcdefzzzzzzzz"), true)
	f.Fuzz(func(t *testing.T, raw []byte, restore bool) {
		cfg := smallPrefix()
		cfg.Shards, cfg.Capacity = 2, 8
		p := mustPrefix(t, cfg)
		h := scorertest.NewHarness(t, p, scorertest.Eps("a:1", "b:1"))
		hashes := make([]uint64, len(raw)/8)
		for i := range hashes {
			for b := range 8 {
				hashes[i] |= uint64(raw[i*8+b]) << (8 * b)
			}
		}
		for _, addr := range []string{"a:1", "b:1", "gone:1"} {
			if restore {
				p.Restore(addr, hashes)
			} else {
				p.RecordPeer(addr, hashes)
			}
		}
		checkIndex(t, p)
		route(t, h, scheduler.Request{Model: "m", Prompt: prompt("ABCD")}, "b:1")
		checkIndex(t, p)
		got, _ := h.Pick(t, &scheduler.Request{Model: "m", Prompt: prompt("ABCD")})
		for _, v := range got {
			if !(v >= 0 && v <= 1) {
				t.Fatalf("score %v outside [0,1]", v)
			}
		}
	})
}
