package scorers

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

func mustSession(t testing.TB, cfg SessionConfig) *Session {
	t.Helper()
	s, err := NewSession("session", cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ownerOf returns the candidate the session scorer gives 1 to ("" if none).
func ownerOf(t *testing.T, h *scorertest.Harness, req *scheduler.Request) string {
	t.Helper()
	d, err := h.S.Pick(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Done(scheduler.Outcome{})
	owner := ""
	for i, c := range d.Candidates() {
		switch v := d.Score(0, i); v {
		case 1:
			if owner != "" {
				t.Fatalf("two endpoints score 1: %s and %s", owner, c.Address)
			}
			owner = c.Address
		case 0:
		default:
			t.Fatalf("session score %v, want 0 or 1", v)
		}
	}
	return owner
}

func manyAddrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.0.%d:8000", i+1)
	}
	return out
}

func TestSessionNeutralWithoutID(t *testing.T) {
	h := scorertest.NewHarness(t, mustSession(t, DefaultSessionConfig()), scorertest.Eps("a:1", "b:1", "c:1"))
	got, _ := h.Pick(t, &scheduler.Request{})
	scorertest.CheckScores(t, got, []float64{0, 0, 0})
}

func TestSessionSticks(t *testing.T) {
	h := scorertest.NewHarness(t, mustSession(t, DefaultSessionConfig()), scorertest.Eps(manyAddrs(8)...))
	for i := range 20 {
		req := &scheduler.Request{SessionID: fmt.Sprint("user-", i)}
		first := ownerOf(t, h, req)
		if first == "" {
			t.Fatalf("session %d has no endpoint", i)
		}
		for range 5 {
			if got := ownerOf(t, h, req); got != first {
				t.Fatalf("session %d moved from %s to %s", i, first, got)
			}
		}
	}
}

func TestSessionBoundedLoad(t *testing.T) {
	const n, sessions = 8, 2000
	for _, c := range []float64{1, 1.25, 2} {
		t.Run(fmt.Sprint("c=", c), func(t *testing.T) {
			cfg := DefaultSessionConfig()
			cfg.LoadFactor = c
			sc := mustSession(t, cfg)
			h := scorertest.NewHarness(t, sc, scorertest.Eps(manyAddrs(n)...))
			count := map[string]int{}
			for i := range sessions {
				count[ownerOf(t, h, &scheduler.Request{SessionID: fmt.Sprint("s-", i)})]++
			}
			// c = 1: ⌈2000/8⌉ = 250; 1.25: ⌈312.5⌉ = 313; 2: 500.
			bound := int(math.Ceil(c * sessions / n))
			total, maxLoad := sc.Sessions()
			if total != sessions {
				t.Errorf("table holds %d sessions, want %d", total, sessions)
			}
			for a, k := range count {
				if k > bound {
					t.Errorf("%s holds %d sessions, bound %d", a, k, bound)
				}
				maxLoad = max(maxLoad, k)
			}
			if c == 1 && maxLoad != 250 {
				t.Errorf("c = 1: max load %d, want exactly 250", maxLoad)
			}
		})
	}
}

func TestSessionStabilityWhenPoolChanges(t *testing.T) {
	const n, sessions = 10, 1000
	cfg := DefaultSessionConfig()
	sc := mustSession(t, cfg)
	all := manyAddrs(n)
	h := scorertest.NewHarness(t, sc, scorertest.Eps(all...))
	owner := make([]string, sessions)
	for i := range owner {
		owner[i] = ownerOf(t, h, &scheduler.Request{SessionID: fmt.Sprint("s-", i)})
	}

	// Remove one endpoint: only its sessions move.
	gone := all[3]
	h.S.SetEndpoints(scorertest.Eps(slices.Delete(slices.Clone(all), 3, 4)...))
	count := map[string]int{}
	moved := 0
	for i := range owner {
		now := ownerOf(t, h, &scheduler.Request{SessionID: fmt.Sprint("s-", i)})
		switch {
		case owner[i] == gone:
			moved++
			if now == gone || now == "" {
				t.Fatalf("session %d still on %q", i, now)
			}
		case now != owner[i]:
			t.Fatalf("session %d moved from %s to %s though its endpoint stayed", i, owner[i], now)
		}
		owner[i] = now
		count[now]++
	}
	if moved == 0 {
		t.Fatal("the removed endpoint held no session; the test proves nothing")
	}
	// ⌈1.25 × 1000 / 9⌉ = ⌈138.9⌉ = 139.
	for a, k := range count {
		if k > 139 {
			t.Errorf("%s holds %d sessions after the move, bound 139", a, k)
		}
	}

	// Add an endpoint (and a metrics refresh with the same set): nothing
	// moves.
	h.S.SetEndpoints(scorertest.Eps(append(slices.Clone(all), "10.0.1.1:8000")...))
	h.S.SetEndpoints(scorertest.Eps(append(slices.Clone(all), "10.0.1.1:8000")...))
	for i := range owner {
		if now := ownerOf(t, h, &scheduler.Request{SessionID: fmt.Sprint("s-", i)}); now != owner[i] {
			t.Fatalf("session %d moved from %s to %s when an endpoint joined", i, owner[i], now)
		}
	}
}

func TestSessionRespectsCandidates(t *testing.T) {
	h := scorertest.NewHarness(t, mustSession(t, DefaultSessionConfig()), scorertest.Eps("a:1", "b:1", "c:1"))
	req := &scheduler.Request{SessionID: "s", Subset: []string{"b:1"}}
	// A new session is only assigned among candidates.
	if got := ownerOf(t, h, req); got != "b:1" {
		t.Fatalf("new session assigned to %q, want the only candidate b:1", got)
	}
	// Later, when b is not a candidate, nobody gets the 1.
	got, _ := h.Pick(t, &scheduler.Request{SessionID: "s", Subset: []string{"a:1", "c:1"}})
	scorertest.CheckScores(t, got, []float64{0, 0}) // candidates a, c
}

func TestSessionTableBounded(t *testing.T) {
	cfg := DefaultSessionConfig()
	cfg.MaxSessions, cfg.Shards = 16, 4 // 4 per shard
	sc := mustSession(t, cfg)
	h := scorertest.NewHarness(t, sc, scorertest.Eps("a:1", "b:1"))
	for i := range 500 {
		h.PickDone(t, &scheduler.Request{SessionID: fmt.Sprint("s-", i)})
		if total, _ := sc.Sessions(); total > 16 {
			t.Fatalf("after %d sessions the table holds %d, max 16", i+1, total)
		}
	}
	total, maxLoad := sc.Sessions()
	// ⌈1.25 × (total) / 2⌉ bounds each endpoint while nothing left; the
	// loads must at least add up to the table.
	if total == 0 || maxLoad > total {
		t.Errorf("total %d, max load %d", total, maxLoad)
	}
}

func TestSessionIdleExpiry(t *testing.T) {
	cfg := DefaultSessionConfig()
	cfg.IdleTimeout, cfg.Shards = time.Minute, 1
	sc := mustSession(t, cfg)
	h := scorertest.NewHarness(t, sc, scorertest.Eps("a:1", "b:1"))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h.PickDone(t, &scheduler.Request{SessionID: "old", Arrival: t0})
	h.PickDone(t, &scheduler.Request{SessionID: "kept", Arrival: t0.Add(50 * time.Second)})
	if total, _ := sc.Sessions(); total != 2 {
		t.Fatalf("%d sessions, want 2", total)
	}
	// 61 s after "old" was last seen (> 1 min) it is forgotten; "kept"
	// (11 s idle) stays; the newcomer is added.
	h.PickDone(t, &scheduler.Request{SessionID: "new", Arrival: t0.Add(61 * time.Second)})
	if total, _ := sc.Sessions(); total != 2 {
		t.Fatalf("%d sessions after expiry, want 2 (kept, new)", total)
	}
	// Use refreshes: "kept" seen at 100 s is not idle at 150 s.
	h.PickDone(t, &scheduler.Request{SessionID: "kept", Arrival: t0.Add(100 * time.Second)})
	h.PickDone(t, &scheduler.Request{SessionID: "x", Arrival: t0.Add(150 * time.Second)})
	sh := &sc.shards[0]
	sh.mu.Lock()
	_, kept := sh.m[scheduler.SessionIDKey("kept")]
	_, stale := sh.m[scheduler.SessionIDKey("new")] // last seen at 61 s, 89 s idle
	sh.mu.Unlock()
	if !kept || stale {
		t.Errorf("kept present %v (want true), new present %v (want false)", kept, stale)
	}
}
