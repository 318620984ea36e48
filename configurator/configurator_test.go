package configurator

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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

func adaptive() Config {
	c := DefaultConfig()
	c.Enabled = true
	return c
}

func mustNew(t testing.TB, cfg Config, deps Deps) *Configurator {
	t.Helper()
	c, err := New(cfg, profile(), deps)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sig(r float64) detector.Signal { return detector.Signal{Value: r} }

func closeTo(a, b, eps float64) bool { return math.Abs(a-b) <= eps }

func TestValues(t *testing.T) {
	c := mustNew(t, adaptive(), Deps{})
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
	c := mustNew(t, cfg, Deps{})
	// Defaults k 25, s0 0.15, D 0.3 … 0.9 (span 0.6).
	s25 := 1 / (1 + math.Exp(-2.5))   // σ(0.25) = 1/(1+e^(−25·0.1)) = 0.92414
	s80 := 1 / (1 + math.Exp(-16.25)) // σ(0.8) = 1/(1+e^(−25·0.65)) = 0.99999991
	for _, tc := range []struct {
		mode       string
		r, p, hold float64
		want       float64
	}{
		{ModeCalm, 0.9, 0, 0, 0.3},                                      // DMin whatever r
		{ModeRebalance, 0.15, 0, 0, 0.3 + 0.5*0.6},                      // σ(s0) = 0.5 → 0.6
		{ModeRebalance, 0.15 + math.Log(4)/25, 0, 0, 0.78},              // σ = 0.8 → 0.3 + 0.48
		{ModeRebalance, 0.25, 0, 0, 0.3 + s25*0.6},                      // 0.85449
		{ModeRebalance, 0.25, 1, 0, 0.3 + s25*0.6*0.5},                  // pressure 1 halves the span: 0.57724
		{ModeRebalance, 0.8, 0, 0, 0.3 + s80*0.6},                       // saturated: 0.89999995
		{ModeRebalance, 0.15, 0.4, 0, 0.3 + 0.5*0.6*0.8},                // 1 − 0.5·0.4 = 0.8 → 0.54
		{ModeFrozen, 0.15, 0, 0.7, 0.7},                                 // hold above the rebalance 0.6
		{ModeFrozen, 0.25, 0, 0.7, 0.3 + s25*0.6},                       // rebalance 0.85449 above the hold
		{ModeStatic, 0.8, 0, 0, 0.5},                                    // profile budget
		{ModeRebalance, math.NaN(), 0, 0, 0.3 + 0.6/(1+math.Exp(3.75))}, // NaN reads as 0: σ(0) = 1/(1+e^3.75) = 0.02298 → 0.31379
	} {
		if got := c.Target(tc.mode, tc.r, tc.p, tc.hold); !closeTo(got, tc.want, 1e-12) {
			t.Errorf("%s r=%v p=%v hold=%v: %v, want %v", tc.mode, tc.r, tc.p, tc.hold, got, tc.want)
		}
	}
	// The affinity floor caps every target: floor 0.2 → D ≤ 0.8.
	cfg.AffinityFloor, cfg.PressureCut = 0.2, 0
	c = mustNew(t, cfg, Deps{})
	if got := c.Target(ModeRebalance, 1, 0, 0); got != 0.8 {
		t.Errorf("capped target %v, want 0.8", got)
	}
}

func TestStaticMode(t *testing.T) {
	c := mustNew(t, DefaultConfig(), Deps{})
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
	c = mustNew(t, DefaultConfig(), Deps{Start: start})
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
	c := mustNew(t, adaptive(), Deps{})
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
func TestHysteresis(t *testing.T) {
	cfg := adaptive()
	cfg.FlapMaxTransitions = 0
	c := mustNew(t, cfg, Deps{})
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
// r = √(1/15) = 0.25820 (8 of 16 pods loaded, docs/benchmarks.md finding
// 2) in a settled calm configurator enters rebalance on the same tick
// (r ≥ theta_on 0.2) and lands on the target 0.3 + 0.6·σ(0.25820) =
// 0.86239 (σ = 1/(1+e^(−25·0.10820)) = 1/(1+e^(−2.70497)) = 0.93732) after
// ceil(0.56239 / 0.05) = 12 ticks (0.6 s); a step back to 0 after the dwell
// returns to calm and lands on 0.3 after another 12 ticks.
func TestStepSettles(t *testing.T) {
	c := mustNew(t, adaptive(), Deps{})
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
// configurator at D ≥ hold = max(D then = 0.3 after 2 s of calm, 0.3 +
// σ(0.2)·0.6 = 0.3 + 0.6/(1+e^(−25·0.05)) = 0.76638) until 68 s; then the
// mode follows the signal again. While frozen, D settles on max(hold, the
// rebalance target): 0.76638 at r 0.05 (σ(0.05) = 1/(1+e^2.5) = 0.07586,
// target 0.34551 < hold), 0.3 + 0.6/(1+e^(−8.75)) = 0.89990 at r 0.5.
func TestWatchdog(t *testing.T) {
	c := mustNew(t, adaptive(), Deps{})
	hold := 0.3 + 0.6/(1+math.Exp(-1.25))
	high := 0.3 + 0.6/(1+math.Exp(-8.75))
	var modes []string
	for s := 0; s <= 72; s++ {
		r, settled := 0.5, high
		if (s/2)%2 == 1 {
			r, settled = 0.05, hold
		}
		for k := 0; k < 20; k++ { // 20 ticks per second
			w := c.Step(t0.Add(time.Duration(s)*time.Second+time.Duration(k)*tick), sig(r))
			if w.Mode == ModeFrozen && s >= 9 && c.Budget(w) < hold-1e-12 { // 1 s to slew up
				t.Fatalf("t=%ds: frozen at D %v < hold %v", s, c.Budget(w), hold)
			}
			// The largest move while frozen is 0.89990 − 0.76638 = 0.134,
			// 3 ticks: by the last tick of each second D has landed.
			if w.Mode == ModeFrozen && s >= 9 && k == 19 && !closeTo(c.Budget(w), settled, 1e-9) {
				t.Errorf("t=%ds r=%v: frozen at D %v, want %v", s, r, c.Budget(w), settled)
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
	if got := testutil.ToFloat64(c.m.freezes); got != 1 {
		t.Errorf("freezes %v, want 1", got)
	}
}

// TestFloorAtStart: a start beyond the affinity floor is cut at once.
func TestFloorAtStart(t *testing.T) {
	start := &scheduler.Weights{Version: 3, Values: []float64{0, 4, 0.5, 4, 0}} // D = 1
	c := mustNew(t, adaptive(), Deps{Start: start})
	if w := c.Step(t0, sig(0)); c.Budget(w) != 0.9 {
		t.Errorf("first D %v, want 0.9 (1 − floor 0.1)", c.Budget(w))
	}
}

func TestNew(t *testing.T) {
	onlyDist := []scheduler.ScorerEntry{{Name: "queue", Scorer: catScorer(scheduler.CategoryDistribution), Weight: 1}}
	if _, err := New(adaptive(), onlyDist, Deps{}); err == nil || !strings.HasPrefix(err.Error(), "adaptive.enabled:") {
		t.Errorf("adaptive profile without affinity: %v", err)
	}
	if _, err := New(DefaultConfig(), onlyDist, Deps{}); err != nil {
		t.Errorf("static profile without affinity: %v", err)
	}
	if _, err := New(adaptive(), nil, Deps{}); err == nil {
		t.Error("empty profile accepted")
	}
	bad := profile()
	bad[0].Weight = math.NaN()
	if _, err := New(adaptive(), bad, Deps{}); err == nil {
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
		{func(c *Config) { c.DMin = -0.1 }, "adaptive.d_min:"},
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
		if _, err := New(c, profile(), Deps{}); err == nil {
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

// TestLogLine: one structured line per new version, with old → new
// weights, the budget, the signal components, the mode and the reason. The
// signal r = 0.15 + ln 4/25 = 0.20545 (≥ theta_on 0.2) has σ(r) =
// 1/(1 + e^(−ln 4)) = 0.8, so the rebalance target is 0.3 + 0.8·0.6 = 0.78:
// from the profile's D 0.5 that is 5 slew steps of 0.05 and a landing on
// 0.78, one line each after the start's: 7 in all.
func TestLogLine(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := mustNew(t, adaptive(), Deps{Logger: log})
	r := 0.15 + math.Log(4)/25
	c.Step(t0, detector.Signal{Value: r, RequestCV: 0.4, Endpoints: 4, TotalLoad: 20}) // start → rebalance
	// 0.5 → 0.55 → 0.60 → 0.65 → 0.70 → 0.75 → 0.78 = target.
	for i := 1; i <= 6; i++ {
		c.Step(t0.Add(time.Duration(i)*tick), detector.Signal{Value: r})
	}
	c.Step(t0.Add(7*tick), detector.Signal{Value: r}) // nothing changes: no line
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
	if first.Level != "INFO" || first.Msg != "weights" || first.Version != 2 || first.Mode != ModeRebalance || first.FromMode != ModeStatic ||
		first.Budget != 0.5 || first.Old["prefix"] != 3 || first.New["prefix"] != 3 || first.Signal["request_cv"] != 0.4 ||
		!strings.Contains(first.Reason, "signal 0.205 ≥ theta_on 0.200: rebalance") {
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
