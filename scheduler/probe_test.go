package scheduler

import (
	"context"
	"fmt"
	"strings"
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
// there against 0.01 s on a. Within wait factor 2
// that is no probe, until a's queue brings b's within it; with a share of
// 1/10, every tenth pick while b wants probes is one anyway.
func TestProbeWaitBound(t *testing.T) {
	s := probeScheduler(t, 2, 0)
	s.SetCalibration("a:1", Calibration{PrefillTokensPerSecond: 10000, Samples: 40})
	s.SetCalibration("b:1", Calibration{PrefillTokensPerSecond: 1000, Probes: 5})
	s.SetCalibration("c:1", Calibration{PrefillTokensPerSecond: 10000, Samples: 40})
	for i := range 5 {
		probePick(t, s, "b 10× slower", time.Duration(i)*3*time.Second, "a:1", "b:1,c:1", false).Done(Outcome{})
	}
	// Another replica queued 8,000 bytes (2,000 tokens) on a: 0.21 s.
	s.AddPeerLoad("a:1", 1, 8000)
	probePick(t, s, "a queued 0.21 s: b's 0.1 s is within 2 ×", 20*time.Second, "b:1", "a:1,c:1", true).Done(Outcome{})
	s.AddPeerLoad("a:1", -1, -8000)

	shared := probeScheduler(t, 2, 0.1)
	shared.SetCalibration("a:1", Calibration{PrefillTokensPerSecond: 10000, Samples: 40})
	shared.SetCalibration("b:1", Calibration{PrefillTokensPerSecond: 1000, Probes: 5})
	shared.SetCalibration("c:1", Calibration{PrefillTokensPerSecond: 10000, Samples: 40})
	at := time.Duration(0)
	for round := range 2 {
		for range 9 {
			probePick(t, shared, fmt.Sprintf("share 1/10, round %d, picks 1–9", round), at, "a:1", "b:1,c:1", false).Done(Outcome{})
			at += 3 * time.Second
		}
		probePick(t, shared, fmt.Sprintf("share 1/10, round %d, pick 10", round), at, "b:1", "a:1,c:1", true).Done(Outcome{})
		at += 3 * time.Second
	}
}

func TestProbeConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  ProbeConfig
		want string
	}{
		{ProbeConfig{}, ""},
		{ProbeConfig{Interval: 100 * time.Millisecond, WaitFactor: 1}, ""},
		{ProbeConfig{Interval: time.Hour, WaitFactor: 100, Share: 0.1}, ""},
		{ProbeConfig{Interval: 50 * time.Millisecond, WaitFactor: 1}, "probe.interval: 50ms, want 0 (off) or 100ms…1h"},
		{ProbeConfig{Interval: 2 * time.Hour, WaitFactor: 1}, "probe.interval: 2h0m0s"},
		{ProbeConfig{Interval: -time.Second}, "probe.interval: -1s"},
		{ProbeConfig{Interval: time.Second, WaitFactor: 0.5}, "probe.wait_factor: 0.5, want 1…100"},
		{ProbeConfig{Interval: time.Second, WaitFactor: 1, Share: 0.2}, "probe.share: 0.2, want 0…0.1"},
	} {
		err := c.cfg.Validate()
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}
