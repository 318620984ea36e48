package peerload

import (
	"slices"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

// inFlightScheduler is a scheduler over addrs whose one scorer is the
// in-flight scorer, which reads the pool-wide in-flight count.
func inFlightScheduler(t *testing.T, addrs ...string) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{
		{Name: "inflight", Type: scorers.TypeInFlight, Scorer: &scorers.InFlight{}, Weight: 1},
	}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	pool := make([]scheduler.Endpoint, len(addrs))
	for i, a := range addrs {
		pool[i] = scheduler.Endpoint{Address: a, Models: []string{"m"}}
	}
	s.SetEndpoints(pool)
	return s
}

// pick runs one decision on s and leaves it open.
func pick(t *testing.T, s *scheduler.Scheduler, req *scheduler.Request) *scheduler.Decision {
	t.Helper()
	d, err := s.Pick(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPeers(t *testing.T) {
	s := inFlightScheduler(t, "a:1", "b:1")
	a, b := s.Pool().Pointers()[0], s.Pool().Pointers()[1]
	pl := NewPeers(s)
	pl.Apply("p1", []Load{{"a:1", 3, 300}, {"b:1", 1, 0}})
	pl.Apply("p2", []Load{{"a:1", 2, 0}})
	// a:1: 3 + 2 = 5 in flight, 300 pending; b:1: 1.
	if a.InFlight() != 5 || a.PendingPrefill() != 300 || b.InFlight() != 1 {
		t.Fatalf("a:1 %d/%d, b:1 %d; want 5/300, 1", a.InFlight(), a.PendingPrefill(), b.InFlight())
	}
	// p1's next report replaces its last: a:1 1 (so 1 + 2 = 3), b:1 gone.
	pl.Apply("p1", []Load{{"a:1", 1, 0}})
	if a.InFlight() != 3 || a.PendingPrefill() != 0 || b.InFlight() != 0 {
		t.Errorf("after p1's second report: a:1 %d/%d, b:1 %d; want 3/0, 0", a.InFlight(), a.PendingPrefill(), b.InFlight())
	}
	// The in-flight scorer sees the pool-wide count: a:1 3, b:1 0 → 0, 1.
	d := pick(t, s, &scheduler.Request{})
	if scores := []float64{d.Score(0, 0), d.Score(0, 1)}; !slices.Equal(scores, []float64{0, 1}) {
		t.Errorf("inflight scores %v, want [0 1]", scores)
	}
	d.Done(scheduler.Outcome{})
	pl.Expire("p2")
	pl.Expire("p1")
	if a.InFlight() != 0 || b.InFlight() != 0 || len(pl.Peer("p1")) != 0 {
		t.Errorf("after expiry: a:1 %d, b:1 %d, p1 %v; want 0, 0, none", a.InFlight(), b.InFlight(), pl.Peer("p1"))
	}
	// A report naming an endpoint twice counts its last entry once: a:1
	// 2 then 5 → 5; expiring the peer takes back exactly 5.
	pl.Apply("p3", []Load{{"a:1", 2, 10}, {"a:1", 5, 20}})
	if a.InFlight() != 5 || a.PendingPrefill() != 20 {
		t.Errorf("after a repeated endpoint: a:1 %d/%d, want 5/20", a.InFlight(), a.PendingPrefill())
	}
	pl.Expire("p3")
	if a.InFlight() != 0 || a.PendingPrefill() != 0 {
		t.Errorf("after p3 expired: a:1 %d/%d, want 0/0 (no phantom load)", a.InFlight(), a.PendingPrefill())
	}
	// Local reports only this router's own counts.
	pl.Apply("p1", []Load{{"b:1", 4, 0}})
	d = pick(t, s, &scheduler.Request{Subset: []string{"a:1"}})
	got := Local(s.Pool(), nil)
	d.Done(scheduler.Outcome{})
	if len(got) != 1 || got[0] != (Load{"a:1", 1, 0}) {
		t.Errorf("Local %v, want [{a:1 1 0}] (b:1's 4 are the peer's)", got)
	}
}
