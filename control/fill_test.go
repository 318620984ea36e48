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
	fill atomic.Uint64 // math.Float64bits; NaN: no endpoint known
}

func (*fillScorer) Category() scheduler.Category { return scheduler.CategoryNone }
func (*fillScorer) Score(_ *scheduler.CycleState, _ *scheduler.Request, _ []*scheduler.Endpoint, out []float64) {
	clear(out)
}
func (f *fillScorer) Fill([]*scheduler.Endpoint) (float64, bool) {
	v := math.Float64frombits(f.fill.Load())
	return v, !math.IsNaN(v)
}
func (f *fillScorer) set(v float64) { f.fill.Store(math.Float64bits(v)) }

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
	cfg := fillConfig().Fill // on 0.7, off 0.6
	calm, reb := configurator.ModeCalm, configurator.ModeRebalance
	tests := []struct {
		name   string
		from   FillState
		in     FillInput
		want   FillState
		reason string // a substring; "" means no change
	}{
		{"room", FillState{}, FillInput{0.5, true, calm}, FillState{}, ""},
		// 0.65 is inside the band (0.6, 0.7): room stays room.
		{"band from room", FillState{}, FillInput{0.65, true, calm}, FillState{}, ""},
		{"crosses on", FillState{}, FillInput{0.7, true, calm}, FillState{1, true}, "index fill 0.700 (caches full: crossed on 0.70): mix 0 → 1"},
		{"band from full", FillState{1, true}, FillInput{0.65, true, calm}, FillState{1, true}, ""},
		{"crosses off", FillState{1, true}, FillInput{0.6, true, calm}, FillState{0, false}, "index fill 0.600 (room again: crossed off 0.60): mix 1 → 0"},
		// Out of calm the state follows the fill, the mix holds until calm.
		{"rebalance holds", FillState{}, FillInput{0.9, true, reb}, FillState{0, true}, ""},
		{"calm again", FillState{0, true}, FillInput{0.9, true, calm}, FillState{1, true}, "mix 0 → 1"},
		// Before the configurator's first step the law acts too.
		{"first tick", FillState{}, FillInput{0.8, true, configurator.ModeStatic}, FillState{1, true}, "mix 0 → 1"},
		// No endpoint known to the index: nothing is read, nothing moves.
		{"unknown", FillState{1, true}, FillInput{0, false, calm}, FillState{1, true}, ""},
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

func TestFillConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*FillConfig)
		want string // "" valid
	}{
		{"off ignores the rest", func(c *FillConfig) { c.Enabled, c.On = false, -1 }, ""},
		{"valid", func(*FillConfig) {}, ""},
		{"nothing to add", func(c *FillConfig) { c.Add = nil }, "adaptive.fill.add"},
		{"negative", func(c *FillConfig) { c.Add["queue"] = -1 }, "adaptive.fill.add.queue"},
		{"NaN", func(c *FillConfig) { c.Add["queue"] = math.NaN() }, "adaptive.fill.add.queue"},
		{"too large", func(c *FillConfig) { c.Add["queue"] = 2e6 }, "adaptive.fill.add.queue"},
		{"on 0", func(c *FillConfig) { c.On = 0 }, "adaptive.fill.on"},
		{"on above 1", func(c *FillConfig) { c.On = 1.1 }, "adaptive.fill.on"},
		{"off not below on", func(c *FillConfig) { c.Off = c.On }, "adaptive.fill.off"},
		{"off negative", func(c *FillConfig) { c.Off = -0.1 }, "adaptive.fill.off"},
		{"interval", func(c *FillConfig) { c.Interval = time.Millisecond }, "adaptive.fill.interval"},
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
		_, p := c.Shaped(profile(), tt.m, tt.f)
		if got := weightsOf(p); !slices.Equal(got, tt.want) {
			t.Errorf("mix %v, fill %v: %v, want %v", tt.m, tt.f, got, tt.want)
		}
	}
	off := c
	off.Fill.Enabled = false
	if _, p := off.Shaped(profile(), 0, 1); !slices.Equal(weightsOf(p), []float64{3, 2, 0.5, 2, 1}) {
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
			if st := a.Fill(); st != (FillState{1, true}) {
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
