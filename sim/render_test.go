package sim

import (
	"bytes"
	"testing"
	"time"
)

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestRendererSalt: a salt changes every byte of the prompts but keeps
// their lengths, output lengths and which requests share which leading
// bytes (common prefixes equal within 16 bytes: random letters may
// extend a shared prefix by chance by a few bytes).
func TestRendererSalt(t *testing.T) {
	sc := loadShipped(t, "small-pool-burst", 30*time.Second)
	render := func(salt uint64) []Rendered {
		r, err := NewRenderer(sc, 3, salt, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []Rendered
		for i := range 60 {
			out = append(out, r.Next(1, i%8)) // the burst phase: a hot prefix
		}
		return out
	}
	plain, salted, again := render(0), render(7), render(7)
	shared := 0
	for i := range plain {
		if len(plain[i].Prompt) != len(salted[i].Prompt) || plain[i].OutputTokens != salted[i].OutputTokens {
			t.Fatalf("request %d: lengths %d/%d, outputs %d/%d", i, len(plain[i].Prompt), len(salted[i].Prompt), plain[i].OutputTokens, salted[i].OutputTokens)
		}
		if !bytes.Equal(salted[i].Prompt, again[i].Prompt) {
			t.Fatalf("request %d: the same salt rendered different bytes", i)
		}
		if cp := commonPrefix(plain[i].Prompt, salted[i].Prompt); cp > 16 {
			t.Errorf("request %d: salted prompt shares %d leading bytes with the unsalted one", i, cp)
		}
		for j := range i {
			a, b := commonPrefix(plain[i].Prompt, plain[j].Prompt), commonPrefix(salted[i].Prompt, salted[j].Prompt)
			if a-b > 16 || b-a > 16 {
				t.Errorf("requests %d and %d share %d bytes unsalted, %d salted", i, j, a, b)
			}
			if a > 1000 {
				shared++
			}
		}
	}
	if shared == 0 {
		t.Fatal("no two requests share a system prompt; the test checks nothing")
	}
}

// TestTraceSeedsSampleBytes: a trace scenario's seeds render the same
// trace — prompt lengths and which requests share which leading bytes —
// in other bytes, so its seeds are samples of hash-dependent router state
// rather than one replay.
func TestTraceSeedsSampleBytes(t *testing.T) {
	sc := loadShipped(t, "mooncake-trace", 0)
	render := func(seed uint64) []Rendered {
		r, err := NewRenderer(sc, seed, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []Rendered
		for range 80 {
			out = append(out, r.Next(0, -1))
		}
		return out
	}
	one, two, again := render(1), render(2), render(1)
	shared := 0
	for i := range one {
		if len(one[i].Prompt) != len(two[i].Prompt) || one[i].Arrival != two[i].Arrival {
			t.Fatalf("request %d: lengths %d/%d, arrivals %v/%v", i, len(one[i].Prompt), len(two[i].Prompt), one[i].Arrival, two[i].Arrival)
		}
		if !bytes.Equal(one[i].Prompt, again[i].Prompt) {
			t.Fatalf("request %d: the same seed rendered different bytes", i)
		}
		if cp := commonPrefix(one[i].Prompt, two[i].Prompt); cp > 16 {
			t.Errorf("request %d: seeds 1 and 2 share %d leading bytes", i, cp)
		}
		for j := range i {
			a, b := commonPrefix(one[i].Prompt, one[j].Prompt), commonPrefix(two[i].Prompt, two[j].Prompt)
			if a-b > 16 || b-a > 16 {
				t.Errorf("requests %d and %d share %d bytes with seed 1, %d with seed 2", i, j, a, b)
			}
			if a > 1000 {
				shared++
			}
		}
	}
	if shared == 0 {
		t.Fatal("no two trace requests share a prefix; the test checks nothing")
	}
}
