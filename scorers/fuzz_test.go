package scorers

import (
	"testing"

	"github.com/trimtab/trimtab/scheduler"
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
		h := newHarness(t, p, eps("a:1", "b:1"))
		req := scheduler.Request{Model: model, CacheSalt: salt, Prompt: pr}
		h.route(t, req, "a:1")
		got, _ := h.pick(t, &req)
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
