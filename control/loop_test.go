package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/scheduler"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const tick = 50 * time.Millisecond

// catScorer is a scorer that only declares a category.
type catScorer scheduler.Category

func (s catScorer) Category() scheduler.Category { return scheduler.Category(s) }
func (catScorer) Score(_ *scheduler.CycleState, _ *scheduler.Request, _ []*scheduler.Endpoint, out []float64) {
	clear(out)
}

// profile: affinity prefix 3 + lora 1 (Σa 4), distribution queue 2 + kv 2
// (Σd 4), uncategorised bias 0.5. T = 8, profile D = 4/8 = 0.5. At budget
// D: prefix 6(1−D), lora 2(1−D), queue 4D, kv 4D, bias 0.5.
func profile() []scheduler.ScorerEntry {
	return []scheduler.ScorerEntry{
		{Name: "prefix", Scorer: catScorer(scheduler.CategoryAffinity), Weight: 3},
		{Name: "queue", Scorer: catScorer(scheduler.CategoryDistribution), Weight: 2},
		{Name: "bias", Scorer: catScorer(scheduler.CategoryNone), Weight: 0.5},
		{Name: "kv", Scorer: catScorer(scheduler.CategoryDistribution), Weight: 2},
		{Name: "lora", Scorer: catScorer(scheduler.CategoryAffinity), Weight: 1},
	}
}

// adaptive is adaptive mode on the CV signal (which these tests drive
// through scraped load) with the parameters their arithmetic is written
// for: D 0.3 … 0.9, k 25, s0 0.15, theta 0.2/0.1, dwell 2 s, slew 1.0/s,
// entry at the first step at or above theta_on. TestHerdSignal covers the
// default herd signal and hold.
func adaptive() Config {
	c := DefaultConfig()
	c.Enabled = true
	c.Detector.Signal = detector.SignalCV
	dmin := 0.3
	c.DMin = &dmin
	c.K, c.S0, c.ThetaOff = 25, 0.15, 0.1
	c.MinDwell, c.SlewRate, c.OnHold = 2*time.Second, 1, 0
	return c
}

// target is a real scheduler over the test profile.
func target(t testing.TB) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(scheduler.DefaultConfig(), profile(), nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustNew(t testing.TB, cfg Config, tg Target, deps Deps) *Loop {
	t.Helper()
	l, err := New(cfg, tg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// twoPods returns two fresh endpoints carrying 20 requests whose
// normalised CV is r: for N = 2 it is |p1 − p2|, so loads 10(1+r), 10(1−r).
func twoPods(r float64) []*scheduler.Endpoint {
	return []*scheduler.Endpoint{
		{Address: "a:1", Running: 10 * (1 + r)},
		{Address: "b:1", Running: 10 * (1 - r)},
	}
}

func closeTo(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// refusing wraps a scheduler and refuses every Publish.
type refusing struct{ *scheduler.Scheduler }

func (refusing) Publish(*scheduler.Weights) error { return errors.New("refused") }

// TestTickPublishes: a tick that makes a new version publishes it to the
// target, continuing the target's version sequence; a tick that changes
// nothing returns the same pointer.
func TestTickPublishes(t *testing.T) {
	s := target(t)
	l := mustNew(t, adaptive(), s, Deps{})
	// r = 0.15 + ln 4/25 = 0.20545 ≥ theta_on 0.2 (smoothing 0.2 makes the
	// first signal 0.2·r, so feed the configurator through a detector with
	// no smoothing): rebalance, σ = 1/(1 + e^(−ln 4)) = 0.8, target
	// 0.3 + 0.8·0.6 = 0.78; from the profile's D 0.5 that is the start
	// version (2) and six slew steps of at most 0.05: versions 3…8.
	cfg := adaptive()
	cfg.Detector.Smoothing = 1
	l = mustNew(t, cfg, s, Deps{})
	r := 0.15 + math.Log(4)/25
	var last *Tick
	for i := 0; i < 30; i++ {
		last = l.Tick(t0.Add(time.Duration(i)*tick), twoPods(r))
		if last.Err != nil {
			t.Fatal(last.Err)
		}
	}
	w := s.Weights()
	if w != last.Weights || w.Mode != configurator.ModeRebalance || w.Version != 8 {
		t.Fatalf("scheduler has %+v, last tick %+v", w, last.Weights)
	}
	// prefix 6·0.22 = 1.32, queue = kv = 4·0.78 = 3.12, lora 2·0.22 = 0.44.
	want := []float64{1.32, 3.12, 0.5, 3.12, 0.44}
	for i := range want {
		if !closeTo(w.Values[i], want[i], 1e-9) {
			t.Fatalf("weights %v, want %v", w.Values, want)
		}
	}
	if last.Changed() {
		t.Error("a settled tick reports a change")
	}
	if l.Last() != last {
		t.Error("Last is not the latest tick")
	}
}

// TestTickPublishRefused: a refused version is counted and the target's
// weights stay; the loop keeps ticking.
func TestTickPublishRefused(t *testing.T) {
	s := target(t)
	l := mustNew(t, adaptive(), refusing{s}, Deps{})
	tk := l.Tick(t0, twoPods(0))
	if tk.Err == nil || tk.Weights != tk.Previous || s.Weights().Version != 1 {
		t.Fatalf("tick %+v: want a refused version and version 1 in force", tk)
	}
	l.Tick(t0.Add(tick), twoPods(0))
	if got := testutil.ToFloat64(l.m.publishErrs); got != 2 {
		t.Errorf("publish errors %v, want 2 (the start and one slew step)", got)
	}
}

// runLoop runs the loop through Run on a fake clock, as serve does, and
// steps the clock tick by tick for d. signal(n) is the imbalance of the
// pool installed before tick n. It returns every version published.
func runLoop(t *testing.T, cfg Config, d time.Duration, signal func(n int) float64) []*scheduler.Weights {
	t.Helper()
	fc := clocktesting.NewFakeClock(t0)
	s := target(t)
	var (
		mu   sync.Mutex
		got  []*scheduler.Weights
		seen int
	)
	l := mustNew(t, cfg, s, Deps{Clock: fc, Observe: func(tk *Tick) {
		mu.Lock()
		defer mu.Unlock()
		seen++
		if tk.Changed() {
			got = append(got, tk.Weights)
		}
	}})
	setPool := func(n int) {
		eps := twoPods(signal(n))
		s.SetEndpoints([]scheduler.Endpoint{*eps[0], *eps[1]})
	}
	ticked := func(n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return seen == n }
	}
	setPool(0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	waitFor(t, ticked(1)) // the tick Run takes at once
	for n := 1; n <= int(d/tick); n++ {
		setPool(n)
		waitFor(t, fc.HasWaiters)
		fc.Step(tick)
		waitFor(t, ticked(n+1))
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return got
}

// modeChanges returns the times at which the published mode changed.
func modeChanges(ws []*scheduler.Weights) []time.Time {
	var at []time.Time
	mode := configurator.ModeStatic
	for _, w := range ws {
		if w.Mode != mode {
			if mode != configurator.ModeStatic {
				at = append(at, w.At)
			}
			mode = w.Mode
		}
	}
	return at
}

// TestRunDwell runs the loop through Run on a fake clock with a signal
// oscillating every tick.
func TestRunDwell(t *testing.T) {
	cfg := adaptive()
	cfg.Detector.Smoothing = 1 // the configurator sees the pattern as is
	cfg.FlapMaxTransitions = 0 // watch the dwell alone
	t.Run("around theta_on", func(t *testing.T) {
		// 0.25 / 0.15 around theta_on 0.2 (tick 0, the one Run takes at
		// once, sees 0.25: rebalance), then the signal never reaches
		// theta_off 0.1 — hysteresis, no chatter.
		ws := runLoop(t, cfg, 10*time.Second, func(n int) float64 { return []float64{0.25, 0.15}[n%2] })
		if tr := modeChanges(ws); len(tr) != 0 {
			t.Errorf("%d transitions %v after entering rebalance, want 0", len(tr), tr)
		}
		if ws[0].Mode != configurator.ModeRebalance {
			t.Errorf("first version in mode %s, want rebalance", ws[0].Mode)
		}
	})
	t.Run("across both thresholds", func(t *testing.T) {
		// 0.5 / 0.05 every tick crosses both thresholds (0.2, 0.1) all the
		// time. Tick 0 (t0, 0.5) enters rebalance; each later switch is due
		// as soon as the dwell (2 s) has passed and the signal is on the
		// other side: 2.05, 4.1, 6.15, 8.2 s — never two within 2 s.
		ws := runLoop(t, cfg, 10*time.Second, func(n int) float64 { return []float64{0.5, 0.05}[n%2] })
		tr := modeChanges(ws)
		want := []time.Duration{2050, 4100, 6150, 8200}
		if len(tr) != len(want) {
			t.Fatalf("%d transitions at %v, want %v ms", len(tr), tr, want)
		}
		for i, at := range tr {
			if got := at.Sub(t0); got != want[i]*time.Millisecond {
				t.Errorf("transition %d at %v, want %vms", i, got, want[i])
			}
		}
	})
}

// TestRunStatic: in static mode the first tick, taken as Run starts,
// installs the profile weights.
func TestRunStatic(t *testing.T) {
	s := target(t)
	if err := s.Publish(&scheduler.Weights{Version: 5, Values: []float64{1, 1, 1, 1, 1}, Mode: configurator.ModeCalm}); err != nil {
		t.Fatal(err)
	}
	fc := clocktesting.NewFakeClock(t0)
	ticked := make(chan struct{}, 1)
	l := mustNew(t, DefaultConfig(), s, Deps{Clock: fc, Observe: func(*Tick) {
		select {
		case ticked <- struct{}{}:
		default:
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	<-ticked
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w := s.Weights()
	if w.Version != 6 || w.Mode != configurator.ModeStatic || !w.At.Equal(t0) || !slices.Equal(w.Values, []float64{3, 2, 0.5, 2, 1}) {
		t.Errorf("weights %+v, want static version 6 at t0 with the profile weights", w)
	}
}

// TestReload: a reload takes effect at the next tick, versions continue,
// and a bad reload is refused with nothing changed.
func TestReload(t *testing.T) {
	s := target(t)
	l := mustNew(t, adaptive(), s, Deps{})
	for i := 0; i < 40; i++ { // settle calm at D 0.3
		l.Tick(t0.Add(time.Duration(i)*tick), twoPods(0))
	}
	v := s.Weights().Version
	bad := adaptive()
	two := 2.0
	bad.DMin = &two
	if err := l.Reload(bad, []float64{3, 2, 0.5, 2, 1}); err == nil || !strings.Contains(err.Error(), "d_min") {
		t.Errorf("bad reload: %v, want an error naming d_min", err)
	}
	if err := l.Reload(adaptive(), []float64{3, 2}); err == nil {
		t.Error("reload with two weights for five scorers accepted")
	}
	// Static again, with new base weights: the next tick installs them.
	if err := l.Reload(DefaultConfig(), []float64{1, 1, 1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	if !l.Config().Enabled {
		t.Error("Config reports the reloaded config before the tick applied it")
	}
	if base := l.BaseWeights(); slices.Equal(base, []float64{1, 1, 1, 1, 1}) {
		t.Errorf("BaseWeights %v before the tick applied the reload", base)
	}
	tk := l.Tick(t0.Add(41*tick), twoPods(0))
	if base := l.BaseWeights(); !slices.Equal(base, []float64{1, 1, 1, 1, 1}) {
		t.Errorf("BaseWeights %v after the reload's tick, want 1, 1, 1, 1, 1", base)
	}
	if v, at, ok := l.Signal(); !ok || !at.Equal(t0.Add(41*tick)) || v != tk.Signal.Value {
		t.Errorf("Signal() = %v, %v, %v; want the latest tick's", v, at, ok)
	}
	if !tk.Changed() || tk.Weights.Version != v+1 || tk.Weights.Mode != configurator.ModeStatic || !slices.Equal(tk.Weights.Values, []float64{1, 1, 1, 1, 1}) {
		t.Errorf("after reload: %+v, want static version %d with the new base weights", tk.Weights, v+1)
	}
}

// TestReplicasAgree: two loops fed the same endpoint views compute
// identical weights and modes, tick by tick, through calm, rebalance and a
// watchdog freeze.
//
// The views: 8 pods with noisy loads 8…10 running + 0…1 waiting (mean 9.5,
// σ = √(2/3 + 1/4) = 0.957, CV 0.10) and KV 0.3…0.4: calm, normalised CV
// ≈ 0.10/√7 ≈ 0.04 < theta_off 0.1. In cycles of 15 s: 5 s calm; 5 s with
// pod 0 also queueing 40 (49.5 of 116: Σp² = 0.4267² + 7·0.0819² = 0.2290,
// r = √((8·0.2290 − 1)/7) = 0.345 ≥ theta_on 0.2: rebalance); 5 s with pod
// 1 queueing 60 for 0.5 s out of every 1 s (the EWMA swings across both
// thresholds), a switch every dwell, more than flap_max_transitions 4 per
// minute: frozen.
func TestReplicasAgree(t *testing.T) {
	a, b := mustNew(t, adaptive(), target(t), Deps{}), mustNew(t, adaptive(), target(t), Deps{})
	rnd := rand.New(rand.NewPCG(1, 2))
	modes := map[string]bool{}
	for n := 0; n < 4000; n++ { // 200 s
		eps := make([]*scheduler.Endpoint, 8)
		hot := (n / 100) % 3
		for i := range eps {
			eps[i] = &scheduler.Endpoint{Address: fmt.Sprint(i), Running: float64(8 + rnd.IntN(3)), Waiting: float64(rnd.IntN(2)), KVUtil: 0.3 + rnd.Float64()/10}
			if hot == 1 && i == 0 {
				eps[i].Waiting += 40
			}
			if hot == 2 && (n/10)%2 == 0 && i == 1 {
				eps[i].Waiting += 60
			}
		}
		now := t0.Add(time.Duration(n) * tick)
		wa, wb := a.Tick(now, eps).Weights, b.Tick(now, eps).Weights
		if !reflect.DeepEqual(*wa, *wb) {
			t.Fatalf("tick %d: replicas disagree:\n%+v\n%+v", n, *wa, *wb)
		}
		modes[wa.Mode] = true
	}
	if !modes[configurator.ModeCalm] || !modes[configurator.ModeRebalance] || !modes[configurator.ModeFrozen] {
		t.Errorf("the input visited modes %v; it should exercise calm, rebalance and frozen", modes)
	}
}

// TestLogLine: one "weights" line per new version, with old and new
// weights, the budget, the signal components, the mode and the reason.
// With no smoothing the signal is the raw r = 0.15 + ln 4/25 = 0.20545 (≥
// theta_on 0.2); σ(r) = 1/(1 + e^(−ln 4)) = 0.8, so the rebalance target is
// 0.3 + 0.8·0.6 = 0.78: from the profile's D 0.5 that is the start's line,
// then 5 slew steps of 0.05 and a landing on 0.78: 7 in all.
func TestLogLine(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := adaptive()
	cfg.Detector.Smoothing = 1
	l := mustNew(t, cfg, target(t), Deps{Logger: log})
	r := 0.15 + math.Log(4)/25
	for i := 0; i <= 7; i++ { // the 8th tick changes nothing: no line
		l.Tick(t0.Add(time.Duration(i)*tick), twoPods(r))
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 7 {
		t.Fatalf("%d log lines, want 7:\n%s", len(lines), buf.String())
	}
	var first struct {
		Level, Msg, Mode, Reason string
		Version                  uint64
		FromMode                 string             `json:"from_mode"`
		Budget                   float64            `json:"distribution_budget"`
		Old, New                 map[string]float64 // per scorer
		Signal                   map[string]any
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first.Level != "INFO" || first.Msg != "weights" || first.Version != 2 || first.Mode != configurator.ModeRebalance || first.FromMode != configurator.ModeStatic ||
		first.Budget != 0.5 || first.Old["prefix"] != 3 || first.New["prefix"] != 3 || !closeTo(first.Signal["request_cv"].(float64), r, 1e-12) ||
		first.Signal["endpoints"] != 2.0 || !strings.Contains(first.Reason, "signal 0.205 ≥ theta_on 0.200: rebalance") {
		t.Errorf("first line %s", lines[0])
	}
	if !strings.Contains(lines[1], `"level":"DEBUG"`) || !strings.Contains(lines[1], `"reason":"rebalance: signal 0.205, D 0.500 → 0.550 (target 0.780)"`) {
		t.Errorf("second line %s", lines[1])
	}
	// The landing: 0.75 → 0.78; prefix 6·(1 − 0.78) = 1.32, queue 4·0.78 = 3.12.
	var last struct {
		Reason string
		New    map[string]float64
	}
	if err := json.Unmarshal([]byte(lines[6]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Reason != "rebalance: signal 0.205, D 0.750 → 0.780 (target 0.780)" || !closeTo(last.New["prefix"], 1.32, 1e-9) || !closeTo(last.New["queue"], 3.12, 1e-9) {
		t.Errorf("last line %s", lines[6])
	}
}

// waitFor polls cond with a bounded deadline.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-deadline:
			t.Fatal("condition not reached within 10s")
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// TestSignalHelpSaysWhatItMeasures: the signal gauge's help text names
// both signals the detector can hand over — the default herd share and
// the CV of load — not only the CV's "0 even, 1 all on one endpoint".
func TestSignalHelpSaysWhatItMeasures(t *testing.T) {
	reg := prometheus.NewRegistry()
	newMetrics(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "trimtab_detector_signal_ratio" {
			continue
		}
		for _, want := range []string{"herd", "load guard", "signal: cv"} {
			if !strings.Contains(mf.GetHelp(), want) {
				t.Errorf("help %q lacks %q", mf.GetHelp(), want)
			}
		}
		return
	}
	t.Fatal("trimtab_detector_signal_ratio is not registered")
}
