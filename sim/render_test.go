package sim

import (
	"bytes"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim/scenario"
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
	render := func(salt uint64) []scenario.Rendered {
		r, err := scenario.NewRenderer(sc, 3, salt, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []scenario.Rendered
		for i := range 60 {
			out = append(out, r.Next(1, i%8)) // the burst phase: a hot prefix
		}
		return out
	}
	plain, salted, again := render(0), render(7), render(7)
	checkSameSharing(t, "unsalted", "salted", plain, salted, again)
}

// TestTraceSeedsSampleBytes: a trace scenario's seeds render the same
// trace — prompt lengths and which requests share which leading bytes —
// in other bytes, so its seeds are samples of hash-dependent router state
// rather than one replay.
func TestTraceSeedsSampleBytes(t *testing.T) {
	sc := loadShipped(t, "mooncake-trace", 0)
	render := func(seed uint64) []scenario.Rendered {
		r, err := scenario.NewRenderer(sc, seed, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []scenario.Rendered
		for range 80 {
			out = append(out, r.Next(0, -1))
		}
		return out
	}
	one, two, again := render(1), render(2), render(2)
	checkSameSharing(t, "seed 1", "seed 2", one, two, again)
}

// checkSameSharing checks that b renders a's requests in other bytes:
// the same prompt lengths, output lengths and arrivals, no common leading
// bytes between a request and its counterpart, and the same common
// prefixes between any two requests (within 16 bytes: random letters may
// extend a shared prefix by chance by a few bytes); again must equal b
// byte for byte, and some pair must share a long prefix.
func checkSameSharing(t *testing.T, an, bn string, a, b, again []scenario.Rendered) {
	t.Helper()
	shared := 0
	for i := range a {
		if len(a[i].Prompt) != len(b[i].Prompt) || a[i].OutputTokens != b[i].OutputTokens || a[i].Arrival != b[i].Arrival {
			t.Fatalf("request %d: lengths %d/%d, outputs %d/%d, arrivals %v/%v", i, len(a[i].Prompt), len(b[i].Prompt), a[i].OutputTokens, b[i].OutputTokens, a[i].Arrival, b[i].Arrival)
		}
		if !bytes.Equal(b[i].Prompt, again[i].Prompt) {
			t.Fatalf("request %d: %s rendered different bytes twice", i, bn)
		}
		if cp := commonPrefix(a[i].Prompt, b[i].Prompt); cp > 16 {
			t.Errorf("request %d: %s and %s share %d leading bytes", i, an, bn, cp)
		}
		for j := range i {
			x, y := commonPrefix(a[i].Prompt, a[j].Prompt), commonPrefix(b[i].Prompt, b[j].Prompt)
			if x-y > 16 || y-x > 16 {
				t.Errorf("requests %d and %d share %d bytes %s, %d %s", i, j, x, an, y, bn)
			}
			if x > 1000 {
				shared++
			}
		}
	}
	if shared == 0 {
		t.Fatal("no two requests share a long prefix; the test checks nothing")
	}
}

// TestRendererAgentTurns: an agentic scenario's rendered requests say how
// their prompt splits. Client 0 (a lead of agentic-surge: 12 turns, 1.5 s
// tool calls) renders turn 0 … 11 of one session, then turn 0 of the
// next; turn k has 2 + 2k parts that sum to the prompt's length, starts
// with turn k−1's prompt, and pauses for a tool call after every turn but
// the last. The scaffold is part 0; sessions of one team share it.
func TestRendererAgentTurns(t *testing.T) {
	sc := loadShipped(t, "agentic-surge", 0)
	r, err := scenario.NewRenderer(sc, 1, 5, "")
	if err != nil {
		t.Fatal(err)
	}
	var prev scenario.Rendered
	for i := range 13 {
		q := r.Next(0, 0)
		a := q.Agent
		if a == nil {
			t.Fatal("no agent turn")
		}
		turn := i % 12
		sum := 0
		for _, n := range a.Parts {
			sum += n
		}
		if a.API != scenario.AgentAPIResponses || a.Turn != turn || len(a.Parts) != 2+2*turn || sum != len(q.Prompt) {
			t.Fatalf("request %d: api %s turn %d, %d parts summing to %d of %d bytes; want responses, turn %d, %d parts",
				i, a.API, a.Turn, len(a.Parts), sum, len(q.Prompt), turn, 2+2*turn)
		}
		if (a.Pause > 0) != (turn < 11) {
			t.Errorf("turn %d: pause %v", turn, a.Pause)
		}
		if i > 0 {
			same := a.Session == prev.Agent.Session
			if same != (turn > 0) {
				t.Errorf("request %d (turn %d): session %d after %d", i, turn, a.Session, prev.Agent.Session)
			}
			if turn > 0 && !bytes.HasPrefix(q.Prompt, prev.Prompt) {
				t.Errorf("turn %d does not extend turn %d's prompt", turn, turn-1)
			}
			if p := a.Parts[0]; !bytes.Equal(q.Prompt[:p], prev.Prompt[:p]) {
				t.Errorf("request %d: the scaffold changed", i)
			}
		}
		prev = q
	}
	// A uniform workload has no agent turns.
	if q := renderOne(t); q.Agent != nil {
		t.Errorf("a uniform request has agent turn %+v", q.Agent)
	}
}

func renderOne(t *testing.T) scenario.Rendered {
	t.Helper()
	sc := loadShipped(t, "small-pool-burst", 0)
	r, err := scenario.NewRenderer(sc, 1, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	return r.Next(0, 0)
}
