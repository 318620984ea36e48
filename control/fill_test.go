package control

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/scheduler"
)

// fillScorer is an uncategorised scorer that reports a settable index
// fill (scheduler.FillReporter), for the loop's tests; the prefix
// scorer's own Fill is tested in scorers/prefix.
type fillScorer struct {
	fill    atomic.Uint64 // math.Float64bits; NaN: no endpoint known
	evicted atomic.Uint64 // entries evicted for capacity, of 1,000
}

func (*fillScorer) Category() scheduler.Category { return scheduler.CategoryNone }
func (*fillScorer) Score(_ *scheduler.CycleState, _ *scheduler.Request, _ []*scheduler.Endpoint, out []float64) {
	clear(out)
}
func (f *fillScorer) Fill([]*scheduler.Endpoint) (float64, bool) {
	v := math.Float64frombits(f.fill.Load())
	return v, !math.IsNaN(v)
}
func (f *fillScorer) Evictions() (uint64, int) { return f.evicted.Load(), 1000 }
func (f *fillScorer) set(v float64)            { f.fill.Store(math.Float64bits(v)) }

// fillProfile is profile() with its bias scorer reporting fill f.
func fillProfile(f *fillScorer) []scheduler.ScorerEntry {
	p := profile()
	p[2].Scorer = f
	return p
}

// fillConfig is adaptive mode with the fill law on (on 0.7, off 0.6,
// interval 5 s), adding 2 to queue while the caches are full.
func fillConfig() Config {
	c := DefaultConfig()
	c.Enabled = true
	c.Fill.Enabled = true
	c.Fill.Add = map[string]float64{"queue": 2}
	c.Fill.On, c.Fill.Off = 0.7, 0.6
	return c
}

func TestFillNext(t *testing.T) {
	cfg := fillConfig().Fill // on 0.7, off 0.6, window 1m, churn_off 0.01, churn_on 0.05
	calm, reb, frozen := configurator.ModeCalm, configurator.ModeRebalance, configurator.ModeFrozen
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	full := FillState{Mix: 1, Full: true, Since: at(0)}
	tests := []struct {
		name   string
		from   FillState
		in     FillInput
		want   FillState
		reason string // a substring; "" means no change
	}{
		{"room", FillState{}, FillInput{at(10), 0.5, true, 0, false, calm}, FillState{}, ""},
		// 0.65 is inside the band (0.6, 0.7): room stays room.
		{"band from room", FillState{}, FillInput{at(10), 0.65, true, 0, false, calm}, FillState{}, ""},
		// Filling: no churn yet, the fill alone decides.
		{"crosses on", FillState{}, FillInput{at(10), 0.7, true, 0, false, calm}, FillState{1, true, false, at(10)}, "index fill 0.700 (caches full: crossed on 0.70): mix 0 → 1"},
		{"band from full", full, FillInput{at(30), 0.65, true, 0, false, calm}, full, ""},
		{"crosses off", full, FillInput{at(30), 0.6, true, 0.5, true, calm}, FillState{Since: at(0)}, "index fill 0.600 (room again: crossed off 0.60): mix 1 → 0"},
		// Churning: full stays full.
		{"churning", full, FillInput{at(90), 1, true, 0.3, true, calm}, full, ""},
		// Under churn_off for a whole window: stale, the weights go.
		{"stale", full, FillInput{at(60), 1, true, 0.005, true, calm}, FillState{0, false, true, at(0)}, "index fill 1.000, 0.005 of it evicted in the last 1m0s (stale: under churn_off 0.01): mix 1 → 0"},
		// Not for a whole window yet: a just-filled index has not churned.
		{"filling, not stale", full, FillInput{at(59), 1, true, 0, true, calm}, full, ""},
		// Stale stays out while the churn is under churn_on 0.05 …
		{"stale holds", FillState{Stale: true, Since: at(0)}, FillInput{at(90), 1, true, 0.04, true, calm}, FillState{Stale: true, Since: at(0)}, ""},
		// … and comes back at it.
		{"churns again", FillState{Stale: true, Since: at(0)}, FillInput{at(90), 1, true, 0.05, true, calm}, FillState{1, true, false, at(90)}, "(caches full again: churn_on 0.05): mix 0 → 1"},
		// A fill at off (endpoints replaced, the index drained) clears stale.
		{"drained", FillState{Stale: true, Since: at(0)}, FillInput{at(90), 0.5, true, 0, true, calm}, FillState{Since: at(0)}, ""},
		// Out of calm the state follows the fill, the mix holds until calm.
		{"rebalance holds", FillState{}, FillInput{at(10), 0.9, true, 0, false, reb}, FillState{0, true, false, at(10)}, ""},
		{"frozen holds", FillState{}, FillInput{at(10), 0.9, true, 0, false, frozen}, FillState{0, true, false, at(10)}, ""},
		{"calm again", FillState{0, true, false, at(10)}, FillInput{at(20), 0.9, true, 0, false, calm}, FillState{1, true, false, at(10)}, "mix 0 → 1"},
		// Before the configurator's first step the law acts too.
		{"first tick", FillState{}, FillInput{at(0), 0.8, true, 0, false, configurator.ModeStatic}, FillState{1, true, false, at(0)}, "mix 0 → 1"},
		// No endpoint known to the index: nothing is read, nothing moves.
		{"unknown", full, FillInput{at(90), 0, false, 0, true, calm}, full, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := cfg.Next(tt.from, tt.in)
			if got != tt.want {
				t.Errorf("state %+v, want %+v", got, tt.want)
			}
			if (tt.reason == "") != (why == "") || !strings.Contains(why, tt.reason) {
				t.Errorf("reason %q, want one containing %q", why, tt.reason)
			}
		})
	}
}

// TestChurnWindow: the churn is the evictions since the newest read at
// least a window ago, over the capacity; none before a window has passed,
// with no capacity, or when the count went back (a new index).
func TestChurnWindow(t *testing.T) {
	var w churnWindow
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	if _, ok := w.add(at(0), 100, 1000, time.Minute); ok {
		t.Error("churn at the first read")
	}
	for s := 5; s < 60; s += 5 {
		if _, ok := w.add(at(s), 100+uint64(s), 1000, time.Minute); ok {
			t.Errorf("churn at %d s, before a window", s)
		}
	}
	// At 60 s: since the read at 0 s, 160 − 100 = 60 of 1,000.
	if c, ok := w.add(at(60), 160, 1000, time.Minute); !ok || c != 0.06 {
		t.Errorf("churn at 60 s %v, %v; want 0.06", c, ok)
	}
	// At 65 s: since 5 s (105), 200 − 105 = 95 of 1,000; the 0 s read is gone.
	if c, ok := w.add(at(65), 200, 1000, time.Minute); !ok || c != 0.095 {
		t.Errorf("churn at 65 s %v, %v; want 0.095", c, ok)
	}
	if len(w.at) > 14 {
		t.Errorf("%d reads kept, want at most a window's (13) and one", len(w.at))
	}
	if _, ok := w.add(at(70), 210, 0, time.Minute); ok {
		t.Error("churn with no capacity")
	}
	if _, ok := w.add(at(75), 3, 1000, time.Minute); ok {
		t.Error("churn from a count that went back")
	}
}

func TestFillConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*FillConfig)
		want string // "" valid
	}{
		{"off ignores the rest", func(c *FillConfig) { c.Enabled, c.On = false, -1 }, ""},
		{"valid", func(*FillConfig) {}, ""},
		{"nothing to add", func(c *FillConfig) { c.Add = nil }, "adaptive.fill.add"},
		{"negative", func(c *FillConfig) { c.Add["queue"] = -1 }, "adaptive.fill.add.queue: must be in [0, 1e+06], got -1"},
		{"NaN", func(c *FillConfig) { c.Add["queue"] = math.NaN() }, "adaptive.fill.add.queue"},
		{"too large", func(c *FillConfig) { c.Add["queue"] = 2e6 }, "adaptive.fill.add.queue"},
		{"on 0", func(c *FillConfig) { c.On = 0 }, "adaptive.fill.on"},
		{"on above 1", func(c *FillConfig) { c.On = 1.1 }, "adaptive.fill.on"},
		{"off not below on", func(c *FillConfig) { c.Off = c.On }, "adaptive.fill.off"},
		{"off negative", func(c *FillConfig) { c.Off = -0.1 }, "adaptive.fill.off"},
		{"interval", func(c *FillConfig) { c.Interval = time.Millisecond }, "adaptive.fill.interval"},
		{"window below interval", func(c *FillConfig) { c.Window = time.Second }, "adaptive.fill.window"},
		{"window above 1h", func(c *FillConfig) { c.Window = 2 * time.Hour }, "adaptive.fill.window"},
		{"churn_off negative", func(c *FillConfig) { c.ChurnOff = -0.01 }, "adaptive.fill.churn_off"},
		{"churn_off not below on", func(c *FillConfig) { c.ChurnOff = c.ChurnOn }, "adaptive.fill.churn_off"},
		{"churn_on above 100", func(c *FillConfig) { c.ChurnOn = 101 }, "adaptive.fill.churn_on"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fillConfig().Fill
			tt.edit(&c)
			err := c.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// TestFillCheckProfile: the law needs names of the profile's scorers, a
// scorer reporting the index's fill while the loop is on, and a loop that
// runs with its weights added at every trade mix. Adding 30 to queue
// makes Σd 34 of 38: calm D 0.89 ≤ d_max 0.9; adding 40 makes it 44/48 =
// 0.92 > 0.9, at trade mix 0 already.
func TestFillCheckProfile(t *testing.T) {
	f := &fillScorer{}
	if err := fillConfig().CheckProfile(fillProfile(f)); err != nil {
		t.Fatalf("valid fill law: %v", err)
	}
	off := fillConfig()
	off.Enabled = false
	if err := off.CheckProfile(profile()); err != nil {
		t.Errorf("adaptive off with the fill law on and no reporter: %v, want valid (a roll-back is one edit)", err)
	}
	unknown := fillConfig()
	unknown.Fill.Add["time-cost"] = 1
	big, fits := fillConfig(), fillConfig()
	big.Fill.Add["queue"], fits.Fill.Add["queue"] = 40, 30
	withTrade := tradeConfig()
	withTrade.Fill = fillConfig().Fill
	// Queue +25 fits at trade mix 0 (29 of 33: 0.88) and 0.25 (30 of 33.5:
	// 0.90), not at 0.5 (queue 4 + 25, kv 2 of prefix 2 + lora 1: 0.91).
	withTrade.Fill.Add = map[string]float64{"queue": 25}
	for name, tt := range map[string]struct {
		cfg     Config
		profile []scheduler.ScorerEntry
		want    string
	}{
		"unknown name":        {unknown, fillProfile(f), "adaptive.fill.add.time-cost"},
		"no reporter":         {fillConfig(), profile(), "adaptive.fill: no scorer of the profile reports"},
		"too much":            {big, fillProfile(f), "adaptive.fill: with its weights added at trade mix 0"},
		"too much with trade": {withTrade, fillProfile(f), "adaptive.fill: with its weights added at trade mix 0.5"},
	} {
		if err := tt.cfg.CheckProfile(tt.profile); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tt.want)
		}
	}
	if err := fits.CheckProfile(fillProfile(f)); err != nil {
		t.Errorf("queue +30 (D 0.89): %v, want valid", err)
	}
}

// TestFillShaped: the fill law's weights add to the trade law's blend. At
// trade mix 0.5 queue is 0.5·2 + 0.5·6 = 4, plus 2 = 6 with the fill law's
// weights in; prefix 0.5·3 + 0.5·1 = 2 either way.
func TestFillShaped(t *testing.T) {
	c := tradeConfig()
	c.Fill = fillConfig().Fill
	for _, tt := range []struct {
		m, f float64
		want []float64
	}{
		{0, 0, []float64{3, 2, 0.5, 2, 1}},
		{0, 1, []float64{3, 4, 0.5, 2, 1}},
		{0.5, 0, []float64{2, 4, 0.5, 2, 1}},
		{0.5, 1, []float64{2, 6, 0.5, 2, 1}},
	} {
		_, p := c.ShapedBy(profile(), TradeState{Mix: tt.m}, tt.f)
		if got := weightsOf(p); !slices.Equal(got, tt.want) {
			t.Errorf("mix %v, fill %v: %v, want %v", tt.m, tt.f, got, tt.want)
		}
	}
	off := c
	off.Fill.Enabled = false
	if _, p := off.ShapedBy(profile(), TradeState{Mix: 0}, 1); !slices.Equal(weightsOf(p), []float64{3, 2, 0.5, 2, 1}) {
		t.Errorf("fill law off: %v, want the profile", weightsOf(p))
	}
}

// TestLoopFill runs the loop with the fill law on a calm pool: fill 0.5
// for 30 s changes nothing; 0.75 from then on adds queue 2 at the next
// evaluation (35 s; evaluations fall at 5k s from the first tick) and the
// calm weights settle at prefix 3, queue 4; 0.65 from 60 s is inside the
// band and holds; 0.55 from 90 s removes it at 95 s. Two changes, each
// logged with its reason and counted; a second loop fed the same fills
// publishes the same weights at every tick.
func TestLoopFill(t *testing.T) {
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	fa, fb := &fillScorer{}, &fillScorer{}
	sa, sb := fillTarget(t, fa), fillTarget(t, fb)
	a := mustNew(t, fillConfig(), sa, Deps{Registerer: reg, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	b := mustNew(t, fillConfig(), sb, Deps{})
	pool := []*scheduler.Endpoint{{Address: "a:1"}, {Address: "b:1"}}
	var changes []time.Duration
	for n := 0; n <= 2400; n++ { // 120 s of 50 ms ticks
		at := time.Duration(n) * tick
		fill := 0.5
		switch {
		case at > 90*time.Second:
			fill = 0.55
		case at > 60*time.Second:
			fill = 0.65
		case at > 30*time.Second:
			fill = 0.75
		}
		fa.set(fill)
		fb.set(fill)
		ta, tb := a.Tick(t0.Add(at), pool), b.Tick(t0.Add(at), pool)
		if !reflect.DeepEqual(*ta.Weights, *tb.Weights) {
			t.Fatalf("%v: replicas disagree:\n%+v\n%+v", at, *ta.Weights, *tb.Weights)
		}
		if ta.Fill != "" {
			changes = append(changes, at)
		}
		if at == 90*time.Second {
			if w := sa.Weights(); w.Mode != configurator.ModeCalm || !slices.Equal(w.Values, []float64{3, 4, 0.5, 2, 1}) {
				t.Errorf("at 90 s: %+v, want calm prefix 3, queue 4, bias 0.5, kv 2, lora 1", w)
			}
			if base := a.BaseWeights(); !slices.Equal(base, []float64{3, 4, 0.5, 2, 1}) {
				t.Errorf("BaseWeights at 90 s %v, want queue 4", base)
			}
			if st := a.Fill(); st != (FillState{Mix: 1, Full: true, Since: t0.Add(35 * time.Second)}) {
				t.Errorf("state at 90 s %+v, want full at mix 1", st)
			}
		}
	}
	if want := []time.Duration{35 * time.Second, 95 * time.Second}; !slices.Equal(changes, want) {
		t.Errorf("fill law changed the weights at %v, want %v", changes, want)
	}
	if w := sa.Weights(); !slices.Equal(w.Values, []float64{3, 2, 0.5, 2, 1}) {
		t.Errorf("weights at the end %v, want the profile's", w.Values)
	}
	if got := testutil.ToFloat64(a.m.fillChanges); got != 2 {
		t.Errorf("trimtab_control_fill_changes_total %v, want 2", got)
	}
	if got := testutil.ToFloat64(a.m.fill); got != 0.55 {
		t.Errorf("fill gauge %v, want 0.55", got)
	}
	if got := testutil.ToFloat64(a.m.fillMix); got != 0 {
		t.Errorf("fill mix gauge %v, want 0", got)
	}
	var lines []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatal(err)
		}
		if m["msg"] == "fill" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d fill lines, want 2:\n%s", len(lines), buf.String())
	}
	if r, _ := lines[0]["reason"].(string); !strings.Contains(r, "index fill 0.750 (caches full: crossed on 0.70): mix 0 → 1") {
		t.Errorf("first fill line %v", lines[0])
	}
	if base, _ := lines[0]["base"].(map[string]any); base["queue"] != 4.0 {
		t.Errorf("first fill line's base %v, want queue 4", base)
	}
}

// fillTarget is a real scheduler over fillProfile(f).
func fillTarget(t testing.TB, f *fillScorer) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(scheduler.DefaultConfig(), fillProfile(f), nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLoopFillStale: caches full and churning (20 evictions a second of
// 1,000: 1.2 a minute) take the weights at the first tick; the evictions
// stop at 100 s, the last minute's churn falls under churn_off 0.01 at the
// evaluation of 160 s (none since 100 s), and the weights go although the
// fill stays 0.9; evictions again from 200 s give 0.1 at 205 s ≥ churn_on
// 0.05, and they come back.
func TestLoopFillStale(t *testing.T) {
	f := &fillScorer{}
	f.set(0.9)
	s := fillTarget(t, f)
	l := mustNew(t, fillConfig(), s, Deps{})
	pool := []*scheduler.Endpoint{{Address: "a:1"}, {Address: "b:1"}}
	var changes []time.Duration
	var why []string
	for n := 0; n <= 6000; n++ { // 300 s
		at := time.Duration(n) * tick
		if at < 100*time.Second || at >= 200*time.Second {
			f.evicted.Add(1)
		}
		if tk := l.Tick(t0.Add(at), pool); tk.Fill != "" {
			changes, why = append(changes, at), append(why, tk.Fill)
		}
		if at == 180*time.Second {
			if w := s.Weights(); !slices.Equal(w.Values, []float64{3, 2, 0.5, 2, 1}) || l.Fill() != (FillState{Stale: true, Since: t0}) {
				t.Errorf("at 180 s weights %v, state %+v; want the profile's, stale", w.Values, l.Fill())
			}
		}
	}
	if want := []time.Duration{0, 160 * time.Second, 205 * time.Second}; !slices.Equal(changes, want) {
		t.Fatalf("fill law changed the weights at %v (%q), want %v", changes, why, want)
	}
	if !strings.Contains(why[1], "stale: under churn_off 0.01") || !strings.Contains(why[2], "caches full again: churn_on 0.05") {
		t.Errorf("reasons %q", why)
	}
	if w := s.Weights(); !slices.Equal(w.Values, []float64{3, 4, 0.5, 2, 1}) {
		t.Errorf("weights at the end %v, want queue 4", w.Values)
	}
}

// TestLoopFillRollBack: with the caches full (queue 4 in force), reloading
// the profile with adaptive.enabled false publishes the profile's own
// weights and clears the law and its gauge; the law does not run with the
// loop off.
func TestLoopFillRollBack(t *testing.T) {
	f := &fillScorer{}
	f.set(0.9)
	reg := prometheus.NewRegistry()
	s := fillTarget(t, f)
	l := mustNew(t, fillConfig(), s, Deps{Registerer: reg})
	pool := []*scheduler.Endpoint{{Address: "a:1"}, {Address: "b:1"}}
	n := 0
	for ; n <= 600; n++ { // 30 s
		f.evicted.Add(1)
		l.Tick(t0.Add(time.Duration(n)*tick), pool)
	}
	if w := s.Weights(); !slices.Equal(w.Values, []float64{3, 4, 0.5, 2, 1}) {
		t.Fatalf("weights %v, want queue 4 while full", w.Values)
	}
	off := fillConfig()
	off.Enabled = false
	if err := l.Reload(off, weightsOf(fillProfile(f))); err != nil {
		t.Fatal(err)
	}
	for ; n <= 1200; n++ {
		f.evicted.Add(1)
		if tk := l.Tick(t0.Add(time.Duration(n)*tick), pool); tk.Fill != "" {
			t.Fatalf("the fill law ran with the loop off: %q", tk.Fill)
		}
	}
	if w := s.Weights(); !slices.Equal(w.Values, []float64{3, 2, 0.5, 2, 1}) {
		t.Errorf("weights after the roll-back %v, want the profile's", w.Values)
	}
	if l.Fill() != (FillState{}) || testutil.ToFloat64(l.m.fillMix) != 0 {
		t.Errorf("state %+v, mix gauge %v after the roll-back; want cleared", l.Fill(), testutil.ToFloat64(l.m.fillMix))
	}
}

// TestLoopFillWithTrade: when the trade law and the fill law move at the
// same evaluation in calm (65 s: the pool's spread reaches 3 and the fill
// 0.9), the new calm weights are reached through the slew limit, not in
// one tick: the second law's reshape is not a first step. At 90 s they
// have settled at the trade shape with queue 6 + 2.
func TestLoopFillWithTrade(t *testing.T) {
	cfg := tradeConfig()
	cfg.Trade.Step = 1
	cfg.Fill = fillConfig().Fill
	f := &fillScorer{}
	s := fillTarget(t, f)
	l := mustNew(t, cfg, s, Deps{})
	var both time.Duration
	for n := 0; n <= 1800; n++ { // 90 s
		at := time.Duration(n) * tick
		rate, fill := 14410.0, 0.5
		if at > 60*time.Second {
			rate, fill = 39300, 0.9
		}
		f.set(fill)
		f.evicted.Add(1)
		tk := l.Tick(t0.Add(at), tradePool(t, s, rate))
		if tk.Trade != "" && tk.Fill != "" {
			both = at
			if w := tk.Weights.Values; closeTo(w[1], 8, 1e-9) {
				t.Errorf("at %v both laws moved and queue jumped to 8 in one tick: %v", at, w)
			}
		}
	}
	if both != 65*time.Second {
		t.Errorf("both laws moved at %v, want 65 s", both)
	}
	if w := s.Weights(); !closeTo(w.Values[0], 1, 1e-9) || !closeTo(w.Values[1], 8, 1e-9) {
		t.Errorf("weights at 90 s %v, want prefix 1, queue 8", w.Values)
	}
}
