package scheduler

import (
	"context"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestWaitBoundPeersRatesAndUnits: the wait bound sees the prefill another
// replica queued (its pending bytes, synced as peer load), reads each
// pod's learned prefill rate, and runs the same under either guard unit.
// Pods a:1 and b:1, affinity a 1, b 0, prior 1,000 tokens/s, no prefix
// index (tokens are bytes ÷ 4), a count or seconds guard that never
// fires (slack 100). A peer's 40,000 pending bytes on a:1 make a
// 400-byte request's wait there (40,000 + 400) ÷ 4 ÷ 1,000 = 10.1 s
// against 0.1 s on b:1, over max(4 × 0.1, 0.1 + 3) = 3.1 s: it goes to
// b:1. With a:1's learned rate at 100,000 tokens/s the same queue is
// 0.101 s and the request follows its affinity; so it does once the
// peer's bytes are gone.
func TestWaitBoundPeersRatesAndUnits(t *testing.T) {
	for _, unit := range []string{GuardRequests, GuardSeconds} {
		cfg := DefaultConfig()
		cfg.Guard = GuardConfig{Factor: 2, Slack: 100, CrowdFactor: 1.5, CrowdSlack: 100, Unit: unit, PrefillTokensPerSecond: 1000, WaitFactor: 4, WaitSlack: 3}
		if err := cfg.Guard.Validate(); err != nil {
			t.Fatal(err)
		}
		entries := []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1, "b:1": 0}}, Weight: 1}}
		s, err := New(cfg, entries, nil, MaxScore{}, Deps{Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		s.SetEndpoints(eps("a:1", "b:1"))
		pick := func(step string, want string, wantWait float64, bounded float64) {
			t.Helper()
			d, err := s.Pick(context.Background(), &Request{Prompt: make([]byte, 400)})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Done(Outcome{})
			if d.Endpoint.Address != want {
				t.Errorf("%s, %s: went to %s, want %s", unit, step, d.Endpoint.Address, want)
			}
			a := d.Explain().Candidates[0]
			if a.Address != "a:1" || a.GuardWaitSeconds == nil || math.Abs(*a.GuardWaitSeconds-wantWait) > 1e-9 {
				t.Errorf("%s, %s: a:1 explained as %s waiting %v, want a:1 waiting %v s", unit, step, a.Address, a.GuardWaitSeconds, wantWait)
			}
			if got := testutil.ToFloat64(s.m.waitBounded); got != bounded {
				t.Errorf("%s, %s: %v wait-bounded picks, want %v", unit, step, got, bounded)
			}
		}
		pick("idle", "a:1", 0.1, 0)
		s.AddPeerLoad("a:1", 1, 40000)
		pick("a peer's 40,000 bytes queued on a:1", "b:1", 10.1, 1)
		s.SetCalibration("a:1", Calibration{PrefillTokensPerSecond: 100000})
		pick("a:1 learned at 100,000 tokens/s", "a:1", 0.101, 1)
		s.SetCalibration("a:1", Calibration{})
		s.AddPeerLoad("a:1", -1, -40000)
		pick("the peer's bytes gone", "a:1", 0.1, 1)
		if h := s.Pool().Pointers()[0].HerdPicks(); h != 0 {
			t.Errorf("%s: a:1 charged %d herd picks, want 0", unit, h)
		}
	}
}
