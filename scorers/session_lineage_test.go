package scorers

import (
	"context"
	"fmt"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

// TestSessionPrefixSharingIDs: ids that share a string prefix are
// unrelated keys (vllm-project/router#219 piled "session-1",
// "session-12", … onto one worker), so the 111 ids starting with
// "session-1" spread over the ring like any others.
func TestSessionPrefixSharingIDs(t *testing.T) {
	if scheduler.SessionIDKey("session-1") == scheduler.SessionIDKey("session-12") {
		t.Fatal("session-1 and session-12 have one key")
	}
	const n, sessions = 8, 800
	sc := mustSession(t, DefaultSessionConfig())
	h := scorertest.NewHarness(t, sc, scorertest.Eps(manyAddrs(n)...))
	count := map[string]int{}
	prefixed := map[string]int{} // owners of the ids starting "session-1"
	for i := 1; i <= sessions; i++ {
		id := fmt.Sprint("session-", i)
		o := ownerOf(t, h, &scheduler.Request{SessionID: id})
		count[o]++
		if id == "session-1" || id[:9] == "session-1" {
			prefixed[o]++
		}
	}
	// bound ⌈1.25 × 800 / 8⌉ = 125 per endpoint.
	for a, k := range count {
		if k > 125 {
			t.Errorf("%s holds %d sessions, bound 125", a, k)
		}
	}
	// session-1, session-10…19, session-100…199: 1 + 10 + 100 = 111 ids;
	// piled on one endpoint they would be 111 there. Spread: at most the
	// bound's share, on most endpoints.
	total := 0
	for _, k := range prefixed {
		total += k
	}
	if total != 111 || len(prefixed) < n-2 {
		t.Errorf("the %d ids starting session-1 sit on %d endpoints (%v), want 111 on ≥ %d", total, len(prefixed), prefixed, n-2)
	}
}

// TestSessionLineageKeys: without a session id the scorer uses the
// derived SessionKey — a thousand conversations on one scaffold spread
// within the bound and each one's turns stay on its endpoint; an id, when
// sent, wins over the derived key; no key at all is neutral.
func TestSessionLineageKeys(t *testing.T) {
	const n, sessions = 8, 1000
	sc := mustSession(t, DefaultSessionConfig())
	h := scorertest.NewHarness(t, sc, scorertest.Eps(manyAddrs(n)...))
	scaffold := []byte("<|system|>\nYou are a coding agent.\n<|tools|>\n[{\"name\":\"bash\"}]\n")
	keys := make([]uint64, sessions)
	owner := make([]string, sessions)
	count := map[string]int{}
	for i := range keys {
		keys[i] = scheduler.LineageKey(fmt.Appendf(append([]byte(nil), scaffold...), "<|user|>\ntask %d\n", i))
		owner[i] = ownerOf(t, h, &scheduler.Request{SessionKey: keys[i]})
		count[owner[i]]++
	}
	// ⌈1.25 × 1000 / 8⌉ = 157.
	if len(count) != n {
		t.Errorf("1000 conversations on one scaffold use %d of %d endpoints", len(count), n)
	}
	for a, k := range count {
		if k > 157 {
			t.Errorf("%s holds %d conversations, bound 157", a, k)
		}
	}
	for i := range keys {
		if got := ownerOf(t, h, &scheduler.Request{SessionKey: keys[i]}); got != owner[i] {
			t.Fatalf("conversation %d moved from %s to %s", i, owner[i], got)
		}
	}
	// An id wins: session "x" goes where its own key leads, whatever the
	// derived key says.
	idOwner := ownerOf(t, h, &scheduler.Request{SessionID: "x"})
	for i := range 20 {
		if got := ownerOf(t, h, &scheduler.Request{SessionID: "x", SessionKey: keys[i]}); got != idOwner {
			t.Fatalf("session x with derived key %d went to %s, want %s", i, got, idOwner)
		}
	}
	got, _ := h.Pick(t, &scheduler.Request{})
	scorertest.CheckScores(t, got, make([]float64, n))
}

// TestSessionHotSessionGuarded: a hot session is an affinity like a hot
// prefix: under the guard, once its endpoint is over the bound the next
// request goes elsewhere and the endpoint is charged a herd pick.
func TestSessionHotSessionGuarded(t *testing.T) {
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{
		{Name: "session", Type: "session", Scorer: mustSession(t, DefaultSessionConfig()), Weight: 1},
	}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(scorertest.Eps("a:1", "b:1", "c:1", "d:1"))
	if err := s.Publish(&scheduler.Weights{Version: 2, Values: []float64{1}, Guard: scheduler.Guard{Factor: 2, Slack: 1}, Calm: []float64{1}}); err != nil {
		t.Fatal(err)
	}
	req := &scheduler.Request{SessionKey: scheduler.LineageKey([]byte("scaffold + task 7"))}
	pick := func() *scheduler.Decision {
		t.Helper()
		d, err := s.Pick(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := pick()
	home := first.Endpoint
	// Second: home has 1 in flight of 1 in all (mean ¼); bound
	// max(2 × ¼, ¼ + 1) = 1.25 per capacity, and taking this request makes
	// it 2 > 1.25: over, so the pick goes elsewhere and home is charged.
	second := pick()
	if second.Endpoint == home {
		t.Fatalf("second request of the hot session went to its endpoint %s over the bound", home.Address)
	}
	if got := home.HerdPicks(); got != 1 {
		t.Errorf("%s herd picks %d, want 1", home.Address, got)
	}
	first.Done(scheduler.Outcome{})
	second.Done(scheduler.Outcome{})
	// Load gone: the session is back on its endpoint.
	third := pick()
	if third.Endpoint != home {
		t.Errorf("third request went to %s, want the session's %s", third.Endpoint.Address, home.Address)
	}
	third.Done(scheduler.Outcome{})
}

// TestSessionNewSessionAllocs: recording a new session (derived key or id)
// in a full table allocates nothing at steady state.
func TestSessionNewSessionAllocs(t *testing.T) {
	if scorertest.RaceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	cfg := DefaultSessionConfig()
	cfg.MaxSessions, cfg.Shards = 64, 4
	sc := mustSession(t, cfg)
	h := scorertest.NewHarness(t, sc, scorertest.Eps(manyAddrs(8)...))
	ids := make([]string, 4096)
	for i := range ids {
		ids[i] = fmt.Sprint("session-", i)
	}
	i := 0
	req := &scheduler.Request{}
	next := func() {
		*req = scheduler.Request{SessionID: ids[i%len(ids)]}
		if i%2 == 1 {
			*req = scheduler.Request{SessionKey: uint64(i)*0x9e3779b97f4a7c15 | 1}
		}
		h.PickDone(t, req)
		i++
	}
	for range 2000 {
		next()
	}
	if a := testing.AllocsPerRun(1000, next); a != 0 {
		t.Errorf("a new session allocates %v times per request, want 0", a)
	}
}
