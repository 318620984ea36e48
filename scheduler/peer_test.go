package scheduler

import (
	"context"
	"testing"
)

func TestAddPeerLoad(t *testing.T) {
	entries := []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1, "b:1": 0}}, Weight: 1}}
	s := newTestScheduler(t, entries)
	s.SetEndpoints(eps("a:1", "b:1"))
	a, b := s.Pool().Pointers()[0], s.Pool().Pointers()[1]

	d, err := s.Pick(context.Background(), &Request{Prompt: make([]byte, 100)})
	if err != nil {
		t.Fatal(err)
	}
	s.AddPeerLoad("a:1", 3, 400)
	s.AddPeerLoad("b:1", 2, 0)
	// a:1: 1 local + 3 peer = 4 in flight; 100 + 400 = 500 bytes pending.
	if got, local := a.InFlight(), a.LocalInFlight(); got != 4 || local != 1 {
		t.Errorf("a:1 in flight %d (local %d), want 4 (1)", got, local)
	}
	if got, local := a.PendingPrefill(), a.LocalPendingPrefill(); got != 500 || local != 100 {
		t.Errorf("a:1 pending %d (local %d), want 500 (100)", got, local)
	}
	if got := b.InFlight(); got != 2 {
		t.Errorf("b:1 in flight %d, want 2 (peer only)", got)
	}
	d.Done(Outcome{})
	// Done releases only the local count: 0 local + 3 peer.
	if got := a.InFlight(); got != 3 {
		t.Errorf("a:1 in flight after Done %d, want 3", got)
	}

	// Peer counts survive a pool change (they are kept by address)…
	s.SetEndpoints(eps("a:1", "b:1"))
	a = s.Pool().Pointers()[0]
	if got := a.InFlight(); got != 3 {
		t.Errorf("a:1 in flight after a new pool %d, want 3", got)
	}
	// … and an endpoint reported by a peer before discovery found it gets
	// its counters when it joins.
	s.AddPeerLoad("c:1", 5, 0)
	s.SetEndpoints(eps("a:1", "b:1", "c:1"))
	if got := s.Pool().Pointers()[2].InFlight(); got != 5 {
		t.Errorf("c:1 in flight %d, want the peer's 5", got)
	}
	// Expiring the peer (subtracting what it added) brings it back to 0.
	s.AddPeerLoad("a:1", -3, -400)
	if got, p := s.Pool().Pointers()[0].InFlight(), s.Pool().Pointers()[0].PendingPrefill(); got != 0 || p != 0 {
		t.Errorf("a:1 after expiry: %d in flight, %d pending; want 0, 0", got, p)
	}
}

func TestPeerLoadSteersTheGuard(t *testing.T) {
	// Guard factor 2, slack 1, three pods: a peer's 5 requests on a:1 make
	// the mean μ = (5 + 1) / 3 = 2 and a:1's load with this pick 6 >
	// max(2·2, 2 + 1) = 4, so a pick that affinity sends to a:1 goes
	// elsewhere.
	entries := []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1, "b:1": 0, "c:1": 0}}, Weight: 1}}
	s := newTestScheduler(t, entries)
	s.SetEndpoints(eps("a:1", "b:1", "c:1"))
	if err := s.Publish(&Weights{Version: 2, Values: []float64{1}, Guard: Guard{Factor: 2, Slack: 1}}); err != nil {
		t.Fatal(err)
	}
	pick := func() string {
		t.Helper()
		d, err := s.Pick(context.Background(), &Request{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Done(Outcome{})
		return d.Endpoint.Address
	}
	if got := pick(); got != "a:1" {
		t.Fatalf("without peer load picked %s, want a:1", got)
	}
	s.AddPeerLoad("a:1", 5, 0)
	if got := pick(); got == "a:1" {
		t.Errorf("picked a:1; the peer's load puts it over the guard's bound")
	}
}

func TestSetCalibration(t *testing.T) {
	entries := []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1}}, Weight: 1}}
	s := newTestScheduler(t, entries)
	s.SetEndpoints(eps("a:1", "b:1"))
	if got := s.Pool().Pointers()[0].Calibration(); got != (Calibration{}) {
		t.Errorf("a:1 before any calibration: %+v, want the zero value", got)
	}
	want := Calibration{PrefillTokensPerSecond: 12000, DecodeStepSeconds: 0.02, KVCapacityTokens: 1 << 20, Samples: 40}
	s.SetCalibration("a:1", want)
	if got := s.Pool().Pointers()[0].Calibration(); got != want {
		t.Errorf("a:1: %+v, want %+v", got, want)
	}
	// Kept by address across pools, and set before discovery finds c:1.
	s.SetCalibration("c:1", Calibration{PrefillTokensPerSecond: 5000})
	s.SetEndpoints(eps("a:1", "b:1", "c:1"))
	p := s.Pool().Pointers()
	if p[0].Calibration() != want || p[1].Calibration() != (Calibration{}) || p[2].Calibration().PrefillTokensPerSecond != 5000 {
		t.Errorf("after a new pool: a:1 %+v, b:1 %+v, c:1 %+v", p[0].Calibration(), p[1].Calibration(), p[2].Calibration())
	}
}
