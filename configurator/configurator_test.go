package configurator

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

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

// adaptive is adaptive mode with the parameters the tests' arithmetic is
// written for: D 0.3 … 0.9, k 25, s0 0.15, theta 0.2/0.1, dwell 2 s, slew
// 1.0/s, entry at the first step at or above theta_on (the package
// defaults differ; TestDefaults covers them, TestOnHold the hold).
func adaptive() Config {
	c := DefaultConfig()
	c.Enabled = true
	c.DMin = ptr(0.3)
	c.K, c.S0, c.ThetaOff = 25, 0.15, 0.1
	c.MinDwell, c.SlewRate, c.OnHold = 2*time.Second, 1, 0
	return c
}

func ptr(v float64) *float64 { return &v }

func mustNew(t testing.TB, cfg Config, start *scheduler.Weights) *Configurator {
	t.Helper()
	c, err := New(cfg, profile(), start)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sig(r float64) Input { return Input{Value: r} }

func closeTo(a, b, eps float64) bool { return math.Abs(a-b) <= eps }

func TestValues(t *testing.T) {
	c := mustNew(t, adaptive(), nil)
	for _, tc := range []struct {
		d    float64
		want []float64 // prefix, queue, bias, kv, lora
	}{
		{0.5, []float64{3, 2, 0.5, 2, 1}},         // the profile itself
		{0.3, []float64{4.2, 1.2, 0.5, 1.2, 1.4}}, // 6·0.7, 4·0.3, –, 4·0.3, 2·0.7
		{0.9, []float64{0.6, 3.6, 0.5, 3.6, 0.2}}, // 6·0.1, 4·0.9, –, 4·0.9, 2·0.1
		{0, []float64{6, 0, 0.5, 0, 2}},
	} {
		got := c.values(tc.d)
		for i := range got {
			if !closeTo(got[i], tc.want[i], 1e-12) {
				t.Errorf("D=%v: values %v, want %v", tc.d, got, tc.want)
				break
			}
		}
		if b := c.budget(got); !closeTo(b, tc.d, 1e-12) {
			t.Errorf("budget(values(%v)) = %v", tc.d, b)
		}
	}
}

func TestSigmoid(t *testing.T) {
	for _, tc := range []struct {
		r, k, s0, nu, want float64
	}{
		// The defaults k 25, s0 0.15.
		{0.15, 25, 0.15, 1, 0.5},                      // at the midpoint
		{0.15, 25, 0.15, 2, math.Sqrt(0.5)},           // 2^(−1/2)
		{0.15, 25, 0.15, 0.5, 0.25},                   // 2^(−2)
		{0.15 + math.Log(9)/25, 25, 0.15, 1, 0.9},     // e^(−ln 9) = 1/9 → 1/(1+1/9)
		{0.15 - math.Log(9)/25, 25, 0.15, 1, 0.1},     // 1/(1+9)
		{0.15 + math.Log(4)/25, 25, 0.15, 1, 0.8},     // e^(−ln 4) = 1/4 → 1/(1+1/4)
		{0.2, 25, 0.15, 1, 1 / (1 + math.Exp(-1.25))}, // θ_on: 25·0.05 = 1.25 → 0.77730
		{0.1, 25, 0.15, 1, 1 / (1 + math.Exp(1.25))},  // θ_off: 0.22270
		{-1e6, 25, 0.15, 1, 0},                        // e^huge = +Inf → 0
		{1e6, 25, 0.15, 1, 1},
		// Other parameters: k 12, s0 0.35 (the former defaults).
		{0.3, 12, 0.35, 1, 1 / (1 + math.Exp(0.6))}, // 12·0.05 = 0.6 → 0.35434
		{0.35, 12, 0.35, 2, math.Sqrt(0.5)},         // 2^(−1/2)
	} {
		if got := Sigmoid(tc.r, tc.k, tc.s0, tc.nu); !closeTo(got, tc.want, 1e-12) {
			t.Errorf("σ(%v; k %v s0 %v ν %v) = %v, want %v", tc.r, tc.k, tc.s0, tc.nu, got, tc.want)
		}
	}
}

func TestTarget(t *testing.T) {
	cfg := adaptive()
	cfg.PressureCut = 0.5
	c := mustNew(t, cfg, nil)
	// Defaults k 25, s0 0.15, D 0.3 … 0.9 (span 0.6).
	s25 := 1 / (1 + math.Exp(-2.5))   // σ(0.25) = 1/(1+e^(−25·0.1)) = 0.92414
	s80 := 1 / (1 + math.Exp(-16.25)) // σ(0.8) = 1/(1+e^(−25·0.65)) = 0.99999991
	for _, tc := range []struct {
		mode string
		r, p float64
		want float64
	}{
		{ModeCalm, 0.9, 0, 0.3},                                      // DMin whatever r
		{ModeRebalance, 0.15, 0, 0.3 + 0.5*0.6},                      // σ(s0) = 0.5 → 0.6
		{ModeRebalance, 0.15 + math.Log(4)/25, 0, 0.78},              // σ = 0.8 → 0.3 + 0.48
		{ModeRebalance, 0.25, 0, 0.3 + s25*0.6},                      // 0.85449
		{ModeRebalance, 0.25, 1, 0.3 + s25*0.6*0.5},                  // pressure 1 halves the span: 0.57724
		{ModeRebalance, 0.8, 0, 0.3 + s80*0.6},                       // saturated: 0.89999995
		{ModeRebalance, 0.15, 0.4, 0.3 + 0.5*0.6*0.8},                // 1 − 0.5·0.4 = 0.8 → 0.54
		{ModeFrozen, 0.25, 0, 0.5},                                   // the profile's share, whatever r
		{ModeStatic, 0.8, 0, 0.5},                                    // profile budget
		{ModeRebalance, math.NaN(), 0, 0.3 + 0.6/(1+math.Exp(3.75))}, // NaN reads as 0: σ(0) = 1/(1+e^3.75) = 0.02298 → 0.31379
	} {
		if got := c.Target(tc.mode, tc.r, tc.p); !closeTo(got, tc.want, 1e-12) {
			t.Errorf("%s r=%v p=%v: %v, want %v", tc.mode, tc.r, tc.p, got, tc.want)
		}
	}
	// The affinity floor caps every target: floor 0.2 → D ≤ 0.8.
	cfg.AffinityFloor, cfg.PressureCut = 0.2, 0
	c = mustNew(t, cfg, nil)
	if got := c.Target(ModeRebalance, 1, 0); got != 0.8 {
		t.Errorf("capped target %v, want 0.8", got)
	}
}

func TestStaticMode(t *testing.T) {
	c := mustNew(t, DefaultConfig(), nil)
	w0 := c.Weights()
	if w0.Version != 1 || w0.Mode != ModeStatic {
		t.Fatalf("initial weights %+v, want version 1 static", w0)
	}
	for i := 0; i < 5; i++ {
		if w := c.Step(t0.Add(time.Duration(i)*tick), sig(1)); w != w0 {
			t.Fatalf("static step %d made a new version %+v", i, w)
		}
	}
	// Started from adapted weights, static mode publishes the profile once.
	start := &scheduler.Weights{Version: 7, Values: []float64{1, 3, 0.5, 3, 0.3}, Mode: ModeRebalance}
	c = mustNew(t, DefaultConfig(), start)
	w := c.Step(t0, sig(0.9))
	if w.Version != 8 || w.Mode != ModeStatic || !slices.Equal(w.Values, []float64{3, 2, 0.5, 2, 1}) || !w.At.Equal(t0) {
		t.Errorf("got %+v, want version 8 static with the profile weights", w)
	}
	if w2 := c.Step(t0.Add(tick), sig(0.9)); w2 != w {
		t.Errorf("second static step made version %d", w2.Version)
	}
}

// TestStartAndSlew: the first step enters calm at the profile budget 0.5;
// then D slews to DMin 0.3 at 1.0/s = 0.05 per 50 ms tick, one version per
// tick, landing exactly on 0.3 after 4 ticks.
func TestStartAndSlew(t *testing.T) {
	c := mustNew(t, adaptive(), nil)
	w := c.Step(t0, sig(0))
	if w.Version != 2 || w.Mode != ModeCalm || !closeTo(c.Budget(w), 0.5, 1e-12) {
		t.Fatalf("first step %+v (D %v), want version 2 calm D 0.5", w, c.Budget(w))
	}
	for i, want := range []float64{0.45, 0.40, 0.35, 0.30} {
		w = c.Step(t0.Add(time.Duration(i+1)*tick), sig(0))
		if w.Version != uint64(3+i) || !closeTo(c.Budget(w), want, 1e-9) {
			t.Errorf("tick %d: version %d D %v, want %d %v", i+1, w.Version, c.Budget(w), 3+i, want)
		}
	}
	if got := c.Budget(w); got != 0.3 {
		t.Errorf("landed at %v, want exactly 0.3", got)
	}
	if w2 := c.Step(t0.Add(5*tick), sig(0.1)); w2 != w {
		t.Errorf("settled calm step made version %d", w2.Version)
	}
}

// TestHysteresis walks the mode machine through a table of signals, one
// per second (dwell 2 s; the slew reaches any target within a second).
// TestOnHold: calm → rebalance needs the signal at or above theta_on at
// every step for on_hold. A spike of a few steps (chance opening the
// detector's gate) and a run broken by one step below theta_on both stay
// calm; a run that holds enters at the step on_hold after its first, with
// the hold in the reason. After a return to calm the hold starts afresh.
func TestOnHold(t *testing.T) {
	cfg := adaptive()
	cfg.OnHold = time.Second
	cfg.FlapMaxTransitions = 0
	c := mustNew(t, cfg, nil)
	now := t0
	step := func(r float64) *scheduler.Weights {
		now = now.Add(tick)
		return c.Step(now, sig(r))
	}
	c.Step(now, sig(0))
	for range 5 { // a 250 ms spike
		if w := step(0.9); w.Mode != ModeCalm {
			t.Fatalf("spike: %s at %v", w.Mode, now.Sub(t0))
		}
	}
	step(0)
	for range 20 { // the run's first step and 950 ms more at r ≥ theta_on …
		step(0.5)
	}
	if w := step(0.1); w.Mode != ModeCalm { // … broken by one step below
		t.Fatalf("broken run: %s", w.Mode)
	}
	start := now.Add(tick)
	for i := 0; ; i++ {
		w := step(0.3)
		if held := now.Sub(start); w.Mode == ModeRebalance {
			if held != cfg.OnHold {
				t.Fatalf("entered rebalance after %v at r ≥ theta_on, want %v", held, cfg.OnHold)
			}
			if !strings.Contains(w.Reason, "≥ theta_on 0.200 for 1s") {
				t.Errorf("reason %q does not give the hold", w.Reason)
			}
			break
		}
		if i > 40 {
			t.Fatal("never entered rebalance")
		}
	}
	for range 100 { // back to calm, and min_dwell past that
		step(0)
	}
	if c.Step(now, sig(0)).Mode != ModeCalm {
		t.Fatal("did not return to calm")
	}
	for range 20 { // the run's first step and 950 ms more
		if w := step(0.9); w.Mode != ModeCalm {
			t.Fatalf("after calm again: %s %v into a new run", w.Mode, now.Sub(t0))
		}
	}
	if w := step(0.9); w.Mode != ModeRebalance {
		t.Errorf("after calm again: %s after the hold", w.Mode)
	}
}

func TestHysteresis(t *testing.T) {
	cfg := adaptive()
	cfg.FlapMaxTransitions = 0
	c := mustNew(t, cfg, nil)
	for i, tc := range []struct {
		r    float64
		mode string
	}{
		{0.0, ModeCalm},       // t=0 start
		{0.19, ModeCalm},      // below theta_on 0.2
		{0.20, ModeRebalance}, // ≥ theta_on, first transition needs no dwell (t=2)
		{0.05, ModeRebalance}, // ≤ theta_off 0.1 but only 1 s in rebalance
		{0.15, ModeRebalance}, // between the thresholds: stays
		{0.11, ModeRebalance}, // above theta_off
		{0.10, ModeCalm},      // ≤ theta_off, 4 s in rebalance (t=6)
		{0.19, ModeCalm},      // between: stays
		{0.9, ModeRebalance},  // t=8, 2 s in calm
	} {
		w := c.Step(t0.Add(time.Duration(i)*time.Second), sig(tc.r))
		if w.Mode != tc.mode {
			t.Errorf("t=%ds r=%v: mode %s, want %s", i, tc.r, w.Mode, tc.mode)
		}
	}
	if w := c.Step(t0.Add(9*time.Second), sig(0)); w.Mode != ModeRebalance {
		t.Errorf("t=9s: left rebalance after 1 s (mode %s)", w.Mode)
	}
	if w := c.Step(t0.Add(10*time.Second), sig(0)); w.Mode != ModeCalm {
		t.Errorf("t=10s: mode %s, want calm after 2 s", w.Mode)
	}
}

// TestStepSettles: a step of the signal from 0 to the half-herd reading
// r = √(1/15) = 0.25820 (8 of 16 pods loaded) in a settled calm
// configurator enters rebalance on the same tick
// (r ≥ theta_on 0.2) and lands on the target 0.3 + 0.6·σ(0.25820) =
// 0.86239 (σ = 1/(1+e^(−25·0.10820)) = 1/(1+e^(−2.70497)) = 0.93732) after
// ceil(0.56239 / 0.05) = 12 ticks (0.6 s); a step back to 0 after the dwell
// returns to calm and lands on 0.3 after another 12 ticks.
func TestStepSettles(t *testing.T) {
	c := mustNew(t, adaptive(), nil)
	now := t0
	for i := 0; i < 10; i++ { // settle calm at 0.3
		c.Step(now, sig(0))
		now = now.Add(tick)
	}
	half := math.Sqrt(1.0 / 15)
	target := 0.3 + 0.6/(1+math.Exp(-25*(half-0.15))) // 0.86239
	settle := func(r float64, mode string, want float64) int {
		for n := 1; n <= 100; n++ {
			w := c.Step(now, sig(r))
			now = now.Add(tick)
			if w.Mode != mode {
				t.Fatalf("tick %d: mode %s, want %s", n, w.Mode, mode)
			}
			if closeTo(c.Budget(w), want, 1e-12) {
				return n
			}
		}
		t.Fatalf("D did not land on %v within 100 ticks", want)
		return 0
	}
	if n := settle(half, ModeRebalance, target); n != 12 {
		t.Errorf("up: landed after %d ticks, want 12", n)
	}
	for i := 0; i < 40; i++ { // the dwell: 2 s at the half-herd signal
		c.Step(now, sig(half))
		now = now.Add(tick)
	}
	if n := settle(0, ModeCalm, 0.3); n != 12 {
		t.Errorf("down: landed after %d ticks, want 12", n)
	}
}

// TestWatchdog: the signal swaps between 0.5 and 0.05 every 2 s (the
// dwell), crossing theta_on 0.2 and theta_off 0.1. Transitions at 0, 2, 4,
// 6 s are the 4 allowed within the minute; the one due at 8 s freezes the
// configurator on the profile's weights (D 0.5, the safe state) until
// 68 s, whatever the signal; then the mode follows the signal again.
func TestWatchdog(t *testing.T) {
	c := mustNew(t, adaptive(), nil)
	var modes []string
	for s := 0; s <= 72; s++ {
		r := 0.5
		if (s/2)%2 == 1 {
			r = 0.05
		}
		for k := 0; k < 20; k++ { // 20 ticks per second
			w := c.Step(t0.Add(time.Duration(s)*time.Second+time.Duration(k)*tick), sig(r))
			// At most 0.4 to slew at 1.0/s: by 9 s D has landed on 0.5.
			if w.Mode == ModeFrozen && s >= 9 && !slices.Equal(w.Values, []float64{3, 2, 0.5, 2, 1}) {
				t.Fatalf("t=%ds: frozen at %v (D %v), want the profile's weights", s, w.Values, c.Budget(w))
			}
			if k == 0 {
				modes = append(modes, w.Mode)
			}
		}
	}
	want := func(s int) string {
		switch {
		case s < 8:
			return []string{ModeRebalance, ModeCalm}[(s/2)%2]
		case s < 68:
			return ModeFrozen
		}
		return map[bool]string{true: ModeRebalance, false: ModeCalm}[(s/2)%2 == 0]
	}
	for s, m := range modes {
		if m != want(s) {
			t.Errorf("t=%ds: mode %s, want %s", s, m, want(s))
		}
	}
}

// TestFloorAtStart: a start beyond the affinity floor is cut at once.
func TestFloorAtStart(t *testing.T) {
	start := &scheduler.Weights{Version: 3, Values: []float64{0, 4, 0.5, 4, 0}} // D = 1
	c := mustNew(t, adaptive(), start)
	if w := c.Step(t0, sig(0)); c.Budget(w) != 0.9 {
		t.Errorf("first D %v, want 0.9 (1 − floor 0.1)", c.Budget(w))
	}
}

func TestNew(t *testing.T) {
	onlyDist := []scheduler.ScorerEntry{{Name: "queue", Scorer: catScorer(scheduler.CategoryDistribution), Weight: 1}}
	if _, err := New(adaptive(), onlyDist, nil); err == nil || !strings.HasPrefix(err.Error(), "adaptive.enabled:") {
		t.Errorf("adaptive profile without affinity: %v", err)
	}
	if _, err := New(DefaultConfig(), onlyDist, nil); err != nil {
		t.Errorf("static profile without affinity: %v", err)
	}
	if _, err := New(adaptive(), nil, nil); err == nil {
		t.Error("empty profile accepted")
	}
	bad := profile()
	bad[0].Weight = math.NaN()
	if _, err := New(adaptive(), bad, nil); err == nil {
		t.Error("NaN weight accepted")
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.DMin = ptr(-0.1) }, "adaptive.d_min:"},
		{func(c *Config) { c.DMax = 0.3 }, "adaptive.d_max: must be > d_min"},
		{func(c *Config) { c.DMax = 1.1 }, "adaptive.d_max:"},
		{func(c *Config) { c.AffinityFloor = 0 }, "adaptive.affinity_floor:"},
		{func(c *Config) { c.AffinityFloor = 0.8 }, "adaptive.affinity_floor: must be > 0 and ≤ 1 − d_min"},
		{func(c *Config) { c.K = 0 }, "adaptive.k:"},
		{func(c *Config) { c.K = math.Inf(1) }, "adaptive.k:"},
		{func(c *Config) { c.S0 = 2 }, "adaptive.s0:"},
		{func(c *Config) { c.Nu = 0 }, "adaptive.nu:"},
		{func(c *Config) { c.ThetaOn = 0 }, "adaptive.theta_on:"},
		{func(c *Config) { c.ThetaOff = 0.3 }, "adaptive.theta_off: must be < theta_on"},
		{func(c *Config) { c.ThetaOff = math.NaN() }, "adaptive.theta_off:"},
		{func(c *Config) { c.MinDwell = -time.Second }, "adaptive.min_dwell:"},
		{func(c *Config) { c.SlewRate = 0 }, "adaptive.slew_rate:"},
		{func(c *Config) { c.MinChange = 0.7 }, "adaptive.min_change:"},
		{func(c *Config) { c.GuardFactor = 0.5 }, "adaptive.guard_factor:"},
		{func(c *Config) { c.GuardSlack = -1 }, "adaptive.guard_slack:"},
		{func(c *Config) { c.CrowdFactor = 0.9 }, "adaptive.crowd_factor:"},
		{func(c *Config) { c.CrowdFactor = math.Inf(1) }, "adaptive.crowd_factor:"},
		{func(c *Config) { c.CrowdSlack = math.NaN() }, "adaptive.crowd_slack:"},
		{func(c *Config) { c.FlapMaxTransitions = -1 }, "adaptive.flap_max_transitions:"},
		{func(c *Config) { c.FlapWindow = 0 }, "adaptive.flap_window:"},
		{func(c *Config) { c.FlapCooldown = time.Second }, "adaptive.flap_cooldown: must be > 0 and ≥ min_dwell"},
		{func(c *Config) { c.PressureCut = 1.5 }, "adaptive.pressure_cut:"},
	} {
		c := adaptive()
		tc.mut(&c)
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("got %v, want prefix %q", err, tc.want)
		}
		if _, err := New(c, profile(), nil); err == nil {
			t.Errorf("New accepted config failing %q", tc.want)
		}
	}
	// The watchdog's window and cool-down are not checked when it is off.
	c := adaptive()
	c.FlapMaxTransitions, c.FlapWindow, c.FlapCooldown = 0, 0, 0
	if err := c.Validate(); err != nil {
		t.Errorf("watchdog off: %v", err)
	}
}

// FuzzWeights: for any valid config, profile and signal sequence, every
// version is valid, finite and ≥ 0, affinity keeps its floor, ratios inside
// each category are the profile's, uncategorised weights are untouched,
// the categorised sum is the profile's, and a second instance agrees.
func FuzzWeights(f *testing.F) {
	f.Add(25.0, 0.15, 1.0, 0.3, 0.9, 0.1, 1.0, []byte{3, 2, 2, 1, 0, 5}, []byte{0, 10, 200, 250, 30, 0, 255, 128}) // the defaults
	f.Add(12.0, 0.35, 1.0, 0.3, 0.9, 0.1, 1.0, []byte{3, 2, 2, 1, 0, 5}, []byte{0, 10, 200, 250, 30, 0, 255, 128}) // the former defaults
	f.Add(50.0, 0.1, 0.2, 0.0, 1.0, 0.05, 20.0, []byte{1, 1, 1}, []byte{255, 0, 255, 0, 255, 0, 255, 0, 255})
	f.Add(0.5, 0.9, 5.0, 0.6, 0.7, 0.3, 0.01, []byte{9, 0, 4, 7, 7}, []byte{100, 100, 101, 99})
	f.Fuzz(func(t *testing.T, k, s0, nu, dmin, dmax, floor, slew float64, weights, signals []byte) {
		cfg := adaptive()
		cfg.K, cfg.S0, cfg.Nu, cfg.DMin, cfg.DMax, cfg.AffinityFloor, cfg.SlewRate = k, s0, nu, ptr(dmin), dmax, floor, slew
		cfg.MinChange = 0
		cfg.MinDwell = 3 * tick
		cfg.FlapCooldown = time.Second
		if cfg.Validate() != nil || len(weights) > 32 || len(signals) > 1024 {
			t.Skip()
		}
		var prof []scheduler.ScorerEntry
		for i, b := range weights {
			prof = append(prof, scheduler.ScorerEntry{Name: fmt.Sprint("s", i), Scorer: catScorer(scheduler.Category(i % 3)), Weight: float64(b)})
		}
		a, err := New(cfg, prof, nil)
		if err != nil {
			t.Skip() // no affinity or no distribution weight
		}
		b, _ := New(cfg, prof, nil)
		for n, s := range signals {
			now := t0.Add(time.Duration(n) * tick)
			sg := Input{Value: float64(s) / 255, Pressure: float64(s%7) / 7}
			w := a.Step(now, sg)
			if w2 := b.Step(now, sg); !reflect.DeepEqual(*w, *w2) {
				t.Fatalf("step %d: instances disagree: %+v vs %+v", n, *w, *w2)
			}
			if err := w.Validate(len(prof)); err != nil {
				t.Fatalf("step %d: %v", n, err)
			}
			var sa, sd float64
			for i, v := range w.Values {
				switch prof[i].Scorer.Category() {
				case scheduler.CategoryAffinity:
					sa += v
				case scheduler.CategoryDistribution:
					sd += v
				default:
					if v != prof[i].Weight {
						t.Fatalf("uncategorised %s moved: %v → %v", prof[i].Name, prof[i].Weight, v)
					}
				}
			}
			T := a.total
			if !closeTo(sa+sd, T, 1e-9*T) {
				t.Fatalf("categorised sum %v, want %v", sa+sd, T)
			}
			if sa < cfg.AffinityFloor*T*(1-1e-9) {
				t.Fatalf("affinity %v below floor %v·%v", sa, cfg.AffinityFloor, T)
			}
			for i := range w.Values {
				for j := range w.Values {
					ci, cj := prof[i].Scorer.Category(), prof[j].Scorer.Category()
					if ci != cj || ci == scheduler.CategoryNone {
						continue
					}
					// w_i / w_j = base_i / base_j ⇔ w_i·base_j = w_j·base_i
					if l, r := w.Values[i]*prof[j].Weight, w.Values[j]*prof[i].Weight; !closeTo(l, r, 1e-9*max(math.Abs(l), math.Abs(r), 1e-300)) {
						t.Fatalf("ratio of %s/%s broken: %v vs profile %v/%v", prof[i].Name, prof[j].Name, w.Values, prof[i].Weight, prof[j].Weight)
					}
				}
			}
		}
	})
}

// BenchmarkStep: a configurator step that changes nothing (settled calm)
// and one that publishes (alternating targets inside rebalance).
func BenchmarkStep(b *testing.B) {
	b.Run("settled", func(b *testing.B) {
		c := mustNew(b, adaptive(), nil)
		now := t0
		for i := 0; i < 10; i++ {
			c.Step(now, sig(0))
			now = now.Add(tick)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			now = now.Add(tick)
			c.Step(now, sig(0.1))
		}
	})
	b.Run("publishing", func(b *testing.B) {
		cfg := adaptive()
		cfg.FlapMaxTransitions = 0
		c := mustNew(b, cfg, nil)
		now := t0
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			now = now.Add(tick)
			// r 0.2 / 0.22 (≥ theta_on 0.2): targets 0.3 + 0.6·σ = 0.76638 /
			// 0.81117, 0.045 apart — above min_change 0.01 and within one
			// slew step of 0.05, so every step lands and publishes.
			c.Step(now, sig(0.2+0.02*float64(i%2)))
		}
	})
}

// TestDefaults: with the package defaults calm is the profile itself
// (d_min unset → the profile's share, D 0.5 here), so adaptive mode with
// no signal routes exactly as the profile in static mode; every adaptive
// version carries the load guard and the calm weights it measures herding
// against.
func TestDefaults(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Enabled = true
	c := mustNew(t, cfg, nil)
	if got := c.CalmBudget(); got != 0.5 {
		t.Fatalf("calm budget %v, want the profile's share 0.5", got)
	}
	w := c.Step(t0, sig(0))
	if w.Mode != ModeCalm || !slices.Equal(w.Values, []float64{3, 2, 0.5, 2, 1}) {
		t.Errorf("first version %s %v, want calm at the profile's weights", w.Mode, w.Values)
	}
	if w.Guard != (scheduler.Guard{Factor: 2.5, Slack: 6}) {
		t.Errorf("guard %+v, want factor 2.5 slack 6", w.Guard)
	}
	if w.Crowd != (scheduler.Guard{Factor: 1.5, Slack: 3}) {
		t.Errorf("crowd %+v, want factor 1.5 slack 3", w.Crowd)
	}
	if !slices.Equal(w.Calm, w.Values) {
		t.Errorf("calm weights %v, want %v", w.Calm, w.Values)
	}
	// A herd signal moves D up; the calm weights stay the profile's.
	now := t0
	for i := 0; i < 40; i++ {
		now = now.Add(tick)
		w = c.Step(now, sig(0.5))
	}
	if w.Mode != ModeRebalance || c.Budget(w) < 0.89 || !slices.Equal(w.Calm, []float64{3, 2, 0.5, 2, 1}) {
		t.Errorf("after 2 s at r 0.5: %s D %v calm %v", w.Mode, c.Budget(w), w.Calm)
	}
	// Static mode publishes neither.
	s := mustNew(t, DefaultConfig(), nil).Step(t0, sig(0))
	if s.Guard != (scheduler.Guard{}) || s.Crowd != (scheduler.Guard{}) || s.Calm != nil {
		t.Errorf("static version has guard %+v crowd %+v calm %v", s.Guard, s.Crowd, s.Calm)
	}
	// crowd_factor 0 turns the crowd bound off; guard_factor 0 the guard and
	// with it all herd accounting.
	cfg.CrowdFactor = 0
	if w := mustNew(t, cfg, nil).Step(t0, sig(0)); w.Crowd != (scheduler.Guard{}) || w.Guard.Factor != 2.5 {
		t.Errorf("crowd_factor 0: guard %+v crowd %+v", w.Guard, w.Crowd)
	}
	cfg.CrowdFactor, cfg.GuardFactor = 1.5, 0
	if w := mustNew(t, cfg, nil).Step(t0, sig(0)); w.Guard != (scheduler.Guard{}) || w.Crowd != (scheduler.Guard{}) {
		t.Errorf("guard_factor 0: guard %+v crowd %+v", w.Guard, w.Crowd)
	}
}
