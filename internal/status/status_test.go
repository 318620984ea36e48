package status

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// t0 is slot-aligned for every resolution used here (a whole second).
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func mustNew(t *testing.T, cfg Config) *Recorder {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error; "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"zero window", func(c *Config) { c.Window = 0 }, "status.window: must be > 0"},
		{"negative resolution", func(c *Config) { c.Resolution = -time.Second }, "status.resolution: must be > 0"},
		// 10m / 1ms = 600,000 slots > 100,000.
		{"too many samples", func(c *Config) { c.Resolution = time.Millisecond }, "keeps 600000 samples"},
		// 10m / 6ms = 100,000 slots: exactly the bound.
		{"at the bound", func(c *Config) { c.Resolution = 6 * time.Millisecond }, ""},
		{"negative changes", func(c *Config) { c.Changes = -1 }, "status.changes: must be ≥ 0"},
		{"no changes kept", func(c *Config) { c.Changes = 0 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.want)
			}
			if _, nerr := New(c); (nerr == nil) != (err == nil) {
				t.Fatalf("New() error %v disagrees with Validate() %v", nerr, err)
			}
		})
	}
}

func TestRecordDownsamples(t *testing.T) {
	tests := []struct {
		name       string
		resolution time.Duration
		tick       time.Duration
		ticks      int
		wantAt     []time.Duration // offsets from t0 of the kept samples
		wantSeq    []uint64
	}{
		{
			// 40 ticks of 50 ms cover 0…1950 ms: slots of 500 ms are
			// [0,500) [500,1000) [1000,1500) [1500,2000); the latest tick of
			// each is 450, 950, 1450, 1950.
			name: "50ms ticks at 500ms", resolution: ms(500), tick: ms(50), ticks: 40,
			wantAt: []time.Duration{ms(450), ms(950), ms(1450), ms(1950)}, wantSeq: []uint64{1, 2, 3, 4},
		},
		{
			// Resolution equal to the tick keeps every tick: 0, 50, 100.
			name: "resolution equals tick", resolution: ms(50), tick: ms(50), ticks: 3,
			wantAt: []time.Duration{0, ms(50), ms(100)}, wantSeq: []uint64{1, 2, 3},
		},
		{
			// 300 ms ticks over 500 ms slots: 0,300 → slot 0 (keep 300);
			// 600,900 → slot 1 (keep 900); 1200 → slot 2.
			name: "ticks coarser than half a slot", resolution: ms(500), tick: ms(300), ticks: 5,
			wantAt: []time.Duration{ms(300), ms(900), ms(1200)}, wantSeq: []uint64{1, 2, 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, Config{Window: time.Hour, Resolution: tt.resolution, Changes: 1})
			for i := 0; i < tt.ticks; i++ {
				r.Record(Sample{At: t0.Add(time.Duration(i) * tt.tick), Signal: float64(i) / 100})
			}
			h := r.History(Query{})
			if len(h.Samples) != len(tt.wantAt) {
				t.Fatalf("kept %d samples, want %d", len(h.Samples), len(tt.wantAt))
			}
			for i, e := range h.Samples {
				if got := e.At.Sub(t0); got != tt.wantAt[i] || e.Seq != tt.wantSeq[i] {
					t.Errorf("sample %d: at +%v seq %d, want +%v seq %d", i, got, e.Seq, tt.wantAt[i], tt.wantSeq[i])
				}
				if e.AtMs != e.At.UnixMilli() {
					t.Errorf("sample %d: at_ms %d, want %d", i, e.AtMs, e.At.UnixMilli())
				}
			}
			if h.Latest == nil || h.Latest.Seq != tt.wantSeq[len(tt.wantSeq)-1] {
				t.Errorf("latest = %+v, want seq %d", h.Latest, tt.wantSeq[len(tt.wantSeq)-1])
			}
		})
	}
}

func TestRecordEvictsByAge(t *testing.T) {
	// Window 2 s at 500 ms: 20 samples at 0, 0.5, …, 9.5 s. The newest is
	// 9.5 s, so the cut is 7.5 s and 7.5, 8, 8.5, 9, 9.5 stay: 5 samples,
	// which is also the ring's capacity (2 s / 0.5 s + 1).
	r := mustNew(t, Config{Window: 2 * time.Second, Resolution: ms(500), Changes: 1})
	for i := 0; i < 20; i++ {
		r.Record(Sample{At: t0.Add(time.Duration(i) * ms(500))})
	}
	h := r.History(Query{})
	if len(h.Samples) != 5 {
		t.Fatalf("kept %d samples, want 5", len(h.Samples))
	}
	if got := h.Samples[0].At.Sub(t0); got != ms(7500) {
		t.Errorf("oldest kept at +%v, want +7.5s", got)
	}
	// Seq keeps counting across evictions: samples 16…20.
	if h.Samples[0].Seq != 16 || h.Samples[4].Seq != 20 {
		t.Errorf("seqs %d…%d, want 16…20", h.Samples[0].Seq, h.Samples[4].Seq)
	}

	// A gap longer than the window empties the history but the newest.
	r.Record(Sample{At: t0.Add(time.Minute)})
	if n, _ := r.Len(); n != 1 {
		t.Errorf("after a 50 s gap kept %d samples, want 1", n)
	}
}

func TestRecordOrderAndValues(t *testing.T) {
	r := mustNew(t, DefaultConfig())
	r.Record(Sample{At: t0.Add(time.Second), Signal: 0.5, Mode: "calm"})
	r.Record(Sample{At: t0, Signal: 0.9})                                                 // older: dropped
	r.Record(Sample{At: t0.Add(time.Second + ms(100)), Signal: math.NaN()})               // same slot: replaces, NaN → 0
	r.Record(Sample{At: t0.Add(2 * time.Second), Signal: math.Inf(1)})                    // new slot, +Inf → 0
	r.Record(Sample{At: t0.Add(2*time.Second + ms(499)), Signal: 0.25, Gate: "low_load"}) // same slot
	h := r.History(Query{})
	if h.Dropped != 1 {
		t.Errorf("dropped %d, want 1", h.Dropped)
	}
	want := []struct {
		seq    uint64
		signal float64
		gate   string
	}{{1, 0, ""}, {2, 0.25, "low_load"}}
	if len(h.Samples) != len(want) {
		t.Fatalf("kept %d samples, want %d", len(h.Samples), len(want))
	}
	for i, w := range want {
		e := h.Samples[i]
		if e.Seq != w.seq || e.Signal != w.signal || e.Gate != w.gate {
			t.Errorf("sample %d = seq %d signal %v gate %q, want %d %v %q", i, e.Seq, e.Signal, e.Gate, w.seq, w.signal, w.gate)
		}
	}
}

func TestHistoryQuery(t *testing.T) {
	r := mustNew(t, DefaultConfig())
	for i := 0; i < 10; i++ { // seq 1…10 at 0, 1, …, 9 s
		r.Record(Sample{At: t0.Add(time.Duration(i) * time.Second)})
	}
	tests := []struct {
		q        Query
		from, to uint64 // expected first and last seq
		n        int
	}{
		{Query{}, 1, 10, 10},
		{Query{From: 7}, 7, 10, 4},               // seq ≥ 7: 7, 8, 9, 10
		{Query{From: 11}, 0, 0, 0},               // nothing newer
		{Query{Last: 3 * time.Second}, 7, 10, 4}, // at ≥ 9 s − 3 s = 6 s: seq 7…10
		{Query{From: 9, Last: 5 * time.Second}, 9, 10, 2},
	}
	for _, tt := range tests {
		h := r.History(tt.q)
		if len(h.Samples) != tt.n {
			t.Errorf("%+v: %d samples, want %d", tt.q, len(h.Samples), tt.n)
			continue
		}
		if tt.n > 0 && (h.Samples[0].Seq != tt.from || h.Samples[tt.n-1].Seq != tt.to) {
			t.Errorf("%+v: seq %d…%d, want %d…%d", tt.q, h.Samples[0].Seq, h.Samples[tt.n-1].Seq, tt.from, tt.to)
		}
		if h.Latest == nil || h.Latest.Seq != 10 {
			t.Errorf("%+v: latest %+v, want seq 10", tt.q, h.Latest)
		}
	}
}

func TestRecordChange(t *testing.T) {
	r := mustNew(t, Config{Window: time.Minute, Resolution: time.Second, Changes: 2})
	names := []string{"prefix", "queue"}
	w1 := &scheduler.Weights{Version: 1, Values: []float64{3, 2}, Mode: "static", Reason: "profile weights"}
	w2 := &scheduler.Weights{Version: 2, Values: []float64{1, 4, 5}, Mode: "rebalance", Reason: "signal 0.62 ≥ theta_on 0.5", Signal: 0.62, At: t0.Add(time.Second)}
	w3 := &scheduler.Weights{Version: 3, Values: []float64{2, 3}, Mode: "calm", Reason: "signal below theta_off", Signal: math.NaN()}

	r.Record(Sample{At: t0.Add(5 * time.Second)})
	r.RecordChange(nil, w1, names)
	r.RecordChange(w1, w1, names)  // same version: ignored
	r.RecordChange(w1, nil, names) // nil: ignored
	r.RecordChange(w1, w2, names)
	r.RecordChange(w2, w3, names)

	h := r.History(Query{})
	// Three changes recorded, ring of 2 keeps the last two (seq 2 and 3).
	if len(h.Changes) != 2 {
		t.Fatalf("kept %d changes, want 2", len(h.Changes))
	}
	c2, c3 := h.Changes[0], h.Changes[1]
	if c2.Seq != 2 || c2.FromVersion != 1 || c2.ToVersion != 2 || c2.FromMode != "static" || c2.ToMode != "rebalance" {
		t.Errorf("change 2 = %+v", c2)
	}
	// Values beyond names are named by index: w2 has 3 values, 2 names.
	if c2.New["prefix"] != 1 || c2.New["queue"] != 4 || c2.New["#2"] != 5 || c2.Old["prefix"] != 3 {
		t.Errorf("change 2 weights old %v new %v", c2.Old, c2.New)
	}
	if !c2.At.Equal(t0.Add(time.Second)) || c2.AtMs != t0.Add(time.Second).UnixMilli() || c2.Signal != 0.62 {
		t.Errorf("change 2 at %v (%d ms) signal %v", c2.At, c2.AtMs, c2.Signal)
	}
	// w3 has no At: the newest sample's time (+5 s) stands in; NaN → 0.
	if !c3.At.Equal(t0.Add(5*time.Second)) || c3.Signal != 0 || c3.Reason != "signal below theta_off" {
		t.Errorf("change 3 = at %v signal %v reason %q", c3.At, c3.Signal, c3.Reason)
	}

	none := mustNew(t, Config{Window: time.Minute, Resolution: time.Second, Changes: 0})
	none.RecordChange(nil, w1, names)
	if _, n := none.Len(); n != 0 {
		t.Errorf("Changes 0 kept %d changes", n)
	}
}

func TestRecordChangeMergesSteps(t *testing.T) {
	r := mustNew(t, Config{Window: time.Minute, Resolution: time.Second, Changes: 10})
	names := []string{"prefix", "queue"}
	w := func(v uint64, mode string, p float64) *scheduler.Weights {
		return &scheduler.Weights{Version: v, Values: []float64{p, 7 - p}, Mode: mode,
			Reason: fmt.Sprintf("v%d", v), At: t0.Add(time.Duration(v) * 50 * time.Millisecond)}
	}
	pairs := [][2]*scheduler.Weights{
		{w(1, "static", 3), w(2, "calm", 3)},         // static → calm: a transition
		{w(2, "calm", 3), w(3, "calm", 4)},           // slew in calm …
		{w(3, "calm", 4), w(4, "calm", 4.9)},         // … v2 → v4 in one entry
		{w(4, "calm", 4.9), w(5, "rebalance", 4)},    // calm → rebalance
		{w(5, "rebalance", 4), w(6, "rebalance", 3)}, // slew …
		{w(6, "rebalance", 3), w(7, "rebalance", 2)}, // … v5 → v7
		{w(8, "rebalance", 2), w(9, "rebalance", 1)}, // v8 was not recorded: a new entry
	}
	for _, p := range pairs {
		r.RecordChange(p[0], p[1], names)
	}
	want := []struct {
		from, to   uint64
		fromM, toM string
		steps      int
		oldP, newP float64
		reason     string
	}{
		{1, 2, "static", "calm", 1, 3, 3, "v2"},
		{2, 4, "calm", "calm", 2, 3, 4.9, "v4"},
		{4, 5, "calm", "rebalance", 1, 4.9, 4, "v5"},
		{5, 7, "rebalance", "rebalance", 2, 4, 2, "v7"},
		{8, 9, "rebalance", "rebalance", 1, 2, 1, "v9"},
	}
	h := r.History(Query{})
	if len(h.Changes) != len(want) {
		t.Fatalf("%d changes, want %d: %+v", len(h.Changes), len(want), h.Changes)
	}
	for i, wc := range want {
		c := h.Changes[i]
		if c.FromVersion != wc.from || c.ToVersion != wc.to || c.FromMode != wc.fromM || c.ToMode != wc.toM ||
			c.Steps != wc.steps || c.Old["prefix"] != wc.oldP || c.New["prefix"] != wc.newP || c.Reason != wc.reason {
			t.Errorf("change %d = v%d→v%d %s→%s steps %d prefix %v→%v %q; want v%d→v%d %s→%s steps %d prefix %v→%v %q",
				i, c.FromVersion, c.ToVersion, c.FromMode, c.ToMode, c.Steps, c.Old["prefix"], c.New["prefix"], c.Reason,
				wc.from, wc.to, wc.fromM, wc.toM, wc.steps, wc.oldP, wc.newP, wc.reason)
		}
		// A merged entry carries the time of its last step: v × 50 ms.
		if want := t0.Add(time.Duration(wc.to) * 50 * time.Millisecond); !c.At.Equal(want) || c.AtMs != want.UnixMilli() {
			t.Errorf("change %d at %v (%d), want %v", i, c.At, c.AtMs, want)
		}
	}
}

type catScorer scheduler.Category

func (c catScorer) Category() scheduler.Category { return scheduler.Category(c) }
func (catScorer) Score(_ *scheduler.CycleState, _ *scheduler.Request, _ []*scheduler.Endpoint, out []float64) {
	for i := range out {
		out[i] = 0.5
	}
}

func TestSetScorersAndSetWeights(t *testing.T) {
	r := mustNew(t, DefaultConfig())
	r.SetScorers([]scheduler.ScorerEntry{
		{Name: "prefix", Type: "prefix", Scorer: catScorer(scheduler.CategoryAffinity), Weight: 3},
		{Name: "queue", Type: "queue", Scorer: catScorer(scheduler.CategoryDistribution), Weight: 2},
		{Name: "odd", Type: "odd", Weight: 1}, // no implementation: category none
	})
	h := r.History(Query{})
	want := []ScorerInfo{
		{Name: "prefix", Type: "prefix", Category: "affinity", Base: 3},
		{Name: "queue", Type: "queue", Category: "distribution", Base: 2},
		{Name: "odd", Type: "odd", Category: "none", Base: 1},
	}
	if len(h.Scorers) != len(want) {
		t.Fatalf("scorers %+v", h.Scorers)
	}
	for i := range want {
		if h.Scorers[i] != want[i] {
			t.Errorf("scorer %d = %+v, want %+v", i, h.Scorers[i], want[i])
		}
	}

	var s Sample
	s.SetWeights(nil, nil) // no-op
	if s.Weights != nil || s.Mode != "" {
		t.Errorf("SetWeights(nil) changed the sample: %+v", s)
	}
	s.SetWeights(&scheduler.Weights{Version: 7, Values: []float64{1.5, 0.5}, Mode: "rebalance"}, []string{"prefix", ""})
	if s.Version != 7 || s.Mode != "rebalance" || s.Weights["prefix"] != 1.5 || s.Weights["#1"] != 0.5 {
		t.Errorf("SetWeights: %+v", s)
	}
}

func TestRecorderConcurrent(t *testing.T) {
	r := mustNew(t, Config{Window: time.Second, Resolution: ms(10), Changes: 8})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				switch g {
				case 0:
					r.Record(Sample{At: t0.Add(time.Duration(i) * ms(5)), Signal: 0.5})
				case 1:
					// Alternating modes: every change is a transition, none merge.
					modes := [2]string{"calm", "rebalance"}
					r.RecordChange(&scheduler.Weights{Version: uint64(i), Mode: modes[i%2]},
						&scheduler.Weights{Version: uint64(i + 1), Values: []float64{1}, Mode: modes[(i+1)%2]}, []string{"a"})
				default:
					h := r.History(Query{From: uint64(i)})
					if len(h.Samples) > 101 { // 1 s / 10 ms + 1
						t.Errorf("history holds %d samples, more than the 101 bound", len(h.Samples))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if n, c := r.Len(); n == 0 || n > 101 || c != 8 {
		t.Errorf("Len() = %d samples, %d changes; want 1…101 and 8", n, c)
	}
}
