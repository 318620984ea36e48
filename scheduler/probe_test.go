package scheduler

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// probeScheduler has pods a, b and c, ranked a > b > c by a fixed score,
// prefill 1,000 tokens/s at capacity 1 with no calibration, probe
// interval 2 s and the given wait factor and share.
func probeScheduler(t *testing.T, factor, share float64) *Scheduler {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Guard.PrefillTokensPerSecond = 1000
	cfg.Probe = ProbeConfig{Interval: 2 * time.Second, WaitFactor: factor, Share: share}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	entries := []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1, "b:1": 0.5, "c:1": 0}}, Weight: 1}}
	s, err := New(cfg, entries, nil, MaxScore{}, Deps{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(eps("a:1", "b:1", "c:1"))
	return s
}

var probeT0 = time.Unix(1000, 0)

// probePick picks a 400-byte request arriving at probeT0 + at and checks
// where it went, its fallbacks and whether it was a probe.
func probePick(t *testing.T, s *Scheduler, step string, at time.Duration, want, wantFallbacks string, probe bool) *Decision {
	t.Helper()
	d, err := s.Pick(context.Background(), &Request{Arrival: probeT0.Add(at), Prompt: make([]byte, 400)})
	if err != nil {
		t.Fatal(err)
	}
	x := d.Explain()
	if d.Endpoint.Address != want || strings.Join(x.Fallbacks, ",") != wantFallbacks || d.Probed() != probe || x.Probe != probe {
		t.Errorf("%s: went to %s (fallbacks %v, probe %v), want %s (%s, probe %v)", step, d.Endpoint.Address, x.Fallbacks, d.Probed(), want, wantFallbacks, probe)
	}
	return d
}

// TestProbe: a is calibrated; b and c want probes. Each request goes
// where the step says; a request's wait is the same everywhere (no queue,
// the same rate), so every probe is within the wait factor.
func TestProbe(t *testing.T) {
	s := probeScheduler(t, 1, 0)
	probePick(t, s, "nothing calibrated: no probe", 0, "a:1", "b:1,c:1", false).Done(Outcome{})

	s.SetCalibration("a:1", Calibration{Samples: 40})
	s.SetCalibration("b:1", Calibration{Probes: 2})
	s.SetCalibration("c:1", Calibration{Probes: 1})
	d1 := probePick(t, s, "b wants probes and is idle: probed", 0, "b:1", "a:1,c:1", true)
	d2 := probePick(t, s, "b in flight, c wants probes: c probed", 100*time.Millisecond, "c:1", "a:1,b:1", true)
	d1.Done(Outcome{})
	d2.Done(Outcome{})
	probePick(t, s, "b and c probed under 2 s ago", 1900*time.Millisecond, "a:1", "b:1,c:1", false).Done(Outcome{})
	probePick(t, s, "2 s after b's probe; c's one probe spent", 2*time.Second, "b:1", "a:1,c:1", true).Done(Outcome{})
	probePick(t, s, "b's two probes spent", 10*time.Second, "a:1", "b:1,c:1", false).Done(Outcome{})
	if got := testutil.ToFloat64(s.m.probes); got != 3 {
		t.Errorf("%v probes counted, want 3", got)
	}

	// A new publication replaces the count.
	s.SetCalibration("b:1", Calibration{Probes: 1})
	s.SetCalibration("a:1", Calibration{Probes: 1})
	probePick(t, s, "the choice wants probes itself: no probe", 20*time.Second, "a:1", "b:1,c:1", false).Done(Outcome{})
	s.SetCalibration("a:1", Calibration{Samples: 40})
	s.AddPeerLoad("b:1", 1, 0)
	probePick(t, s, "b busy on a peer", 30*time.Second, "a:1", "b:1,c:1", false).Done(Outcome{})
	s.AddPeerLoad("b:1", -1, 0)
	probePick(t, s, "b idle again", 31*time.Second, "b:1", "a:1,c:1", true).Done(Outcome{})

	s.SetCalibration("b:1", Calibration{Samples: 20})
	s.SetCalibration("c:1", Calibration{Samples: 20})
	if n := s.wanting.Load(); n != 0 {
		t.Errorf("%d endpoints counted as wanting probes, want 0", n)
	}
	probePick(t, s, "every endpoint calibrated", 40*time.Second, "a:1", "b:1,c:1", false).Done(Outcome{})

	// Probing off (interval 0, the default): a pick never moves.
	off, err := New(DefaultConfig(), []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: map[string]float64{"a:1": 1}}, Weight: 1}}, nil, MaxScore{}, Deps{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	off.SetEndpoints(eps("a:1", "b:1"))
	off.SetCalibration("a:1", Calibration{Samples: 40})
	off.SetCalibration("b:1", Calibration{Probes: 5})
	probePick(t, off, "probing off", 0, "a:1", "b:1", false).Done(Outcome{})
}

// TestProbeWaitBound: b's prefill is ten times slower than a's, so the
// request (400 bytes: 100 tokens without a prefix index) waits 0.1 s
// there against 0.01 s on a. Another replica's 1,600 queued bytes on a
// (400 tokens) make a's wait 0.05 s: b's 0.1 s is then within wait
// factor 2 but not 1. With a share of 1/10, every tenth pick that had b
// to probe but for the wait is a probe anyway; picks while b is busy do
// not count towards it.
func TestProbeWaitBound(t *testing.T) {
	for _, c := range []struct {
		factor float64
		probe  bool
	}{{1, false}, {2, true}} {
		s := probeScheduler(t, c.factor, 0)
		s.SetCalibration("a:1", Calibration{PrefillTokensPerSecond: 10000, Samples: 40})
		s.SetCalibration("b:1", Calibration{PrefillTokensPerSecond: 1000, Probes: 5})
		s.SetCalibration("c:1", Calibration{PrefillTokensPerSecond: 10000, Samples: 40})
		for i := range 3 {
			probePick(t, s, fmt.Sprintf("factor %g, b 10× slower", c.factor), time.Duration(i)*3*time.Second, "a:1", "b:1,c:1", false).Done(Outcome{})
		}
		s.AddPeerLoad("a:1", 1, 1600)
		want, fb := "a:1", "b:1,c:1"
		if c.probe {
			want, fb = "b:1", "a:1,c:1"
		}
		probePick(t, s, fmt.Sprintf("factor %g, a queued 0.05 s", c.factor), 20*time.Second, want, fb, c.probe).Done(Outcome{})
		s.AddPeerLoad("a:1", -1, -1600)
	}

	shared := probeScheduler(t, 1, 0.1)
	shared.SetCalibration("a:1", Calibration{PrefillTokensPerSecond: 10000, Samples: 40})
	shared.SetCalibration("b:1", Calibration{PrefillTokensPerSecond: 1000, Probes: 5})
	shared.SetCalibration("c:1", Calibration{PrefillTokensPerSecond: 10000, Samples: 40})
	at := time.Duration(0)
	for round := range 2 {
		for k := range 9 {
			probePick(t, shared, fmt.Sprintf("share 1/10, round %d, pick %d", round, k+1), at, "a:1", "b:1,c:1", false).Done(Outcome{})
			at += 3 * time.Second
			if k == 4 {
				// b busy on another replica: picks that cannot probe it
				// do not count.
				shared.AddPeerLoad("b:1", 1, 0)
				for range 20 {
					probePick(t, shared, "b busy", at, "a:1", "b:1,c:1", false).Done(Outcome{})
				}
				shared.AddPeerLoad("b:1", -1, 0)
			}
		}
		probePick(t, shared, fmt.Sprintf("share 1/10, round %d, pick 10", round), at, "b:1", "a:1,c:1", true).Done(Outcome{})
		at += 3 * time.Second
	}
}

// TestProbeRanking: the probed endpoint goes first and the ranking it
// displaced follows, as far as max_fallbacks allows — also when the probe
// was not among the ranked, and with no fallbacks at all.
func TestProbeRanking(t *testing.T) {
	scores := map[string]float64{"a:1": 1, "b:1": 0.8, "c:1": 0.6, "d:1": 0.4, "e:1": 0}
	for _, c := range []struct {
		fallbacks int
		want      string
	}{{2, "a:1,b:1"}, {0, ""}, {4, "a:1,b:1,c:1,d:1"}} {
		cfg := DefaultConfig()
		cfg.MaxFallbacks = c.fallbacks
		cfg.Probe = ProbeConfig{Interval: time.Second, WaitFactor: 1}
		s, err := New(cfg, []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity, scores: scores}, Weight: 1}}, nil, MaxScore{}, Deps{Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		s.SetEndpoints(eps("a:1", "b:1", "c:1", "d:1", "e:1"))
		for a := range scores {
			s.SetCalibration(a, Calibration{Samples: 40})
		}
		s.SetCalibration("e:1", Calibration{Probes: 1})
		probePick(t, s, fmt.Sprintf("%d fallbacks, e:1 ranked last", c.fallbacks), 0, "e:1", c.want, true).Done(Outcome{})
	}
}

// TestProbeConcurrent: 64 picks at once arriving at the same time, one
// endpoint asking for one probe, or for five (which the interval allows
// one of): exactly one goes there. Under -race it checks the probe
// state's accesses; the interleaving where two picks read the same probe
// time, which the compare-and-swap settles, is rare on few cores, so a
// plain store in its place seldom fails it.
func TestProbeConcurrent(t *testing.T) {
	for round := range 40 {
		s := probeScheduler(t, 1, 0)
		s.SetCalibration("a:1", Calibration{Samples: 40})
		s.SetCalibration("b:1", Calibration{Samples: 40})
		s.SetCalibration("c:1", Calibration{Probes: 1 + 4*(round%2)})
		var wg sync.WaitGroup
		var probed atomic.Int32
		for range 64 {
			wg.Go(func() {
				d, err := s.Pick(context.Background(), &Request{Arrival: probeT0, Prompt: make([]byte, 400)})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Probed() {
					probed.Add(1)
				}
				d.Done(Outcome{})
			})
		}
		wg.Wait()
		if n := probed.Load(); n != 1 {
			t.Errorf("round %d: %d of 64 concurrent picks probed c:1, which asked for %d, want 1", round, n, 1+4*(round%2))
		}
	}
}

// TestProbeWantingFollowsThePool: an endpoint that leaves the pool while
// asking for probes is no longer counted, so picks stop looking; back in
// the pool, it is counted again.
func TestProbeWantingFollowsThePool(t *testing.T) {
	s := probeScheduler(t, 1, 0)
	s.SetCalibration("c:1", Calibration{Probes: 3})
	if n := s.wanting.Load(); n != 1 {
		t.Fatalf("%d endpoints counted as asking, want 1", n)
	}
	s.SetEndpoints(eps("a:1", "b:1"))
	if n := s.wanting.Load(); n != 0 {
		t.Errorf("c:1 left the pool: %d counted as asking, want 0", n)
	}
	s.SetCalibration("d:1", Calibration{Probes: 3}) // not in the pool
	if n := s.wanting.Load(); n != 0 {
		t.Errorf("d:1 is not in the pool: %d counted as asking, want 0", n)
	}
	s.SetEndpoints(eps("a:1", "b:1", "c:1", "d:1"))
	if n := s.wanting.Load(); n != 1 {
		t.Errorf("d:1 joined the pool: %d counted as asking, want 1", n)
	}
	s.SetCalibration("d:1", Calibration{Samples: 20})
	if n := s.wanting.Load(); n != 0 {
		t.Errorf("d:1 learned: %d counted as asking, want 0", n)
	}
}

func TestProbeConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  ProbeConfig
		want string
	}{
		{ProbeConfig{}, ""},
		{ProbeConfig{WaitFactor: 1}, ""},
		{ProbeConfig{Interval: 100 * time.Millisecond, WaitFactor: 1}, ""},
		{ProbeConfig{Interval: time.Hour, WaitFactor: 100, Share: 0.1}, ""},
		{ProbeConfig{Interval: time.Second, WaitFactor: 1, Share: 1e-6}, ""},
		{ProbeConfig{Interval: 50 * time.Millisecond, WaitFactor: 1}, "probe.interval: 50ms, want 0 (off) or 100ms…1h"},
		{ProbeConfig{Interval: 2 * time.Hour, WaitFactor: 1}, "probe.interval: 2h0m0s"},
		{ProbeConfig{Interval: -time.Second}, "probe.interval: -1s"},
		{ProbeConfig{Interval: time.Second, WaitFactor: 0.5}, "probe.wait_factor: 0.5, want 1…100"},
		{ProbeConfig{WaitFactor: -1}, "probe.wait_factor: -1, want 1…100"},
		{ProbeConfig{WaitFactor: math.NaN()}, "probe.wait_factor: NaN"},
		{ProbeConfig{Interval: time.Second}, "probe.wait_factor: 0 with probing on"},
		{ProbeConfig{Interval: time.Second, WaitFactor: 1, Share: 0.2}, "probe.share: 0.2, want 0 or 0.000001…0.1"},
		{ProbeConfig{Interval: time.Second, WaitFactor: 1, Share: 1e-300}, "probe.share: 1e-300"},
		{ProbeConfig{Interval: time.Second, WaitFactor: 1, Share: math.NaN()}, "probe.share: NaN"},
		{ProbeConfig{WaitFactor: 1, Share: 0.01}, "probe.share: set while probe.interval is 0"},
	} {
		err := c.cfg.Validate()
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}
