package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestPolicyOrderRotates: with three policies over three repeats, repeat
// r starts at policy r mod 3 (a b c, b c a, c a b), so no policy always
// runs last, when the machine has drifted furthest; each run records its
// place in its repeat and the report states every repeat's order.
func TestPolicyOrderRotates(t *testing.T) {
	url := (&wordServer{}).start(t)
	sc := testScenario(t, 1, 300*time.Millisecond)
	cfg := Config{Scenario: sc, TimeScale: 1, Repeat: 3, Seed: 1, RouterURL: url,
		Policies: []Policy{{Name: "a"}, {Name: "b"}, {Name: "c"}}}
	rep, err := Run(context.Background(), cfg, Deps{Salt: counter()})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rep.Runs {
		got = append(got, r.Policy)
	}
	if want := "a b c b c a c a b"; strings.Join(got, " ") != want {
		t.Errorf("run order %q, want %q", strings.Join(got, " "), want)
	}
	for i, r := range rep.Runs {
		// Runs 1–9 in order: place i mod 3 + 1 in repeat i/3 + 1.
		if r.Order != i%3+1 || r.Repeat != i/3+1 {
			t.Errorf("run %d (%s): order %d repeat %d, want %d, %d", i+1, r.Policy, r.Order, r.Repeat, i%3+1, i/3+1)
		}
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md, "-", "cmd", "setup"); err != nil {
		t.Fatal(err)
	}
	if want := "Policy order per repeat (rotated): 1: a, b, c; 2: b, c, a; 3: c, a, b."; !strings.Contains(md.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, md.String())
	}
}
