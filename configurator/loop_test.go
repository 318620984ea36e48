package configurator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/scheduler"
)

// recorder is a Publisher that keeps every version it is given.
type recorder struct {
	mu  sync.Mutex
	got []*scheduler.Weights
	err error
}

func (r *recorder) Publish(w *scheduler.Weights) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.got = append(r.got, w)
	return nil
}

func (r *recorder) all() []*scheduler.Weights {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*scheduler.Weights(nil), r.got...)
}

// twoPods returns two fresh endpoints carrying 20 requests whose
// normalised CV is r: for N = 2 it is |p1 − p2|, so loads 10(1+r), 10(1−r).
func twoPods(r float64) []*scheduler.Endpoint {
	return []*scheduler.Endpoint{
		{Address: "a:1", Running: 10 * (1 + r)},
		{Address: "b:1", Running: 10 * (1 - r)},
	}
}

// runLoop wires a detector and a configurator through their Run shells on
// a fake clock, like cmd does, and advances the clock tick by tick for d.
// signal(n) is the imbalance the pool shows at tick n. It returns every
// version published.
func runLoop(t *testing.T, cfg Config, d time.Duration, signal func(n int) float64) []*scheduler.Weights {
	t.Helper()
	fc := clocktesting.NewFakeClock(t0)
	var mu sync.Mutex
	calls := 0
	source := func() []*scheduler.Endpoint {
		mu.Lock()
		calls++
		mu.Unlock()
		return twoPods(signal(int(fc.Now().Sub(t0) / tick)))
	}
	dcfg := detector.DefaultConfig()
	dcfg.Smoothing = 1 // the configurator sees the pattern as is
	ch := make(chan detector.Signal)
	det, err := detector.New(dcfg, detector.Deps{Clock: fc, Source: source, Signals: ch})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	conf := mustNew(t, cfg, Deps{Publisher: rec})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { errs <- det.Run(ctx) }()
	go func() { errs <- conf.Run(ctx, ch) }()
	waitFor(t, fc.HasWaiters) // the detector's ticker exists
	for n := 1; n <= int(d/tick); n++ {
		fc.Step(tick)
		waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return calls == n })
	}
	// Let the last signal through: the next Source call happens only after
	// the configurator took the previous signal.
	fc.Step(tick)
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return calls == int(d/tick)+1 })
	cancel()
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Errorf("Run returned %v", err)
		}
	}
	return rec.all()
}

// modeChanges returns the times at which the published mode changed.
func modeChanges(ws []*scheduler.Weights) []time.Time {
	var at []time.Time
	mode := ModeStatic
	for _, w := range ws {
		if w.Mode != mode {
			if mode != ModeStatic {
				at = append(at, w.At)
			}
			mode = w.Mode
		}
	}
	return at
}

// TestLoopDwell runs the real detector → configurator loop on a fake
// clock with a signal oscillating every tick.
func TestLoopDwell(t *testing.T) {
	cfg := adaptive()
	cfg.FlapMaxTransitions = 0 // watch the dwell alone
	t.Run("around theta_on", func(t *testing.T) {
		// 0.15 / 0.25 around theta_on 0.2 (the first signal, tick 1, is
		// 0.15: calm): one switch to rebalance, then the signal never
		// reaches theta_off 0.1 — hysteresis, no chatter.
		ws := runLoop(t, cfg, 10*time.Second, func(n int) float64 { return []float64{0.25, 0.15}[n%2] })
		if tr := modeChanges(ws); len(tr) != 1 {
			t.Errorf("%d transitions %v, want 1", len(tr), tr)
		}
	})
	t.Run("across both thresholds", func(t *testing.T) {
		// 0.05 / 0.5 every tick crosses both thresholds (0.1, 0.2) all the
		// time. A switch is due as soon as the dwell has passed and the
		// signal is on the other side: 0.1 s (tick 2, 0.5), then 2.05 s
		// later each time (the tick at exactly +2 s carries the wrong
		// value): 0.1, 2.15, 4.2, 6.25, 8.3 s — five in 10 s, never two
		// within 2 s.
		ws := runLoop(t, cfg, 10*time.Second, func(n int) float64 { return []float64{0.5, 0.05}[n%2] })
		tr := modeChanges(ws)
		if len(tr) != 5 {
			t.Errorf("%d transitions at %v, want 5", len(tr), tr)
		}
		for i := 1; i < len(tr); i++ {
			if gap := tr[i].Sub(tr[i-1]); gap < cfg.MinDwell {
				t.Errorf("transitions %v and %v only %v apart", tr[i-1], tr[i], gap)
			}
		}
	})
}

// TestRunPublishErrors: a rejected publish is logged and the loop goes on.
func TestRunPublishErrors(t *testing.T) {
	rec := &recorder{err: errors.New("rejected")}
	c := mustNew(t, adaptive(), Deps{Publisher: rec})
	ch := make(chan detector.Signal, 3)
	ch <- detector.Signal{At: t0}
	ch <- detector.Signal{At: t0.Add(tick)}
	ch <- detector.Signal{At: t0.Add(2 * tick)}
	close(ch)
	if err := c.Run(context.Background(), ch); err != nil {
		t.Fatal(err)
	}
	if w := c.Weights(); w.Version != 4 { // start, 0.45, 0.40
		t.Errorf("version %d after three signals, want 4", w.Version)
	}
}

// TestRunStatic: in static mode Run installs the profile weights without
// waiting for a signal.
func TestRunStatic(t *testing.T) {
	rec := &recorder{}
	start := &scheduler.Weights{Version: 5, Values: []float64{1, 1, 1, 1, 1}, Mode: ModeCalm}
	c := mustNew(t, DefaultConfig(), Deps{Publisher: rec, Start: start, Clock: clocktesting.NewFakePassiveClock(t0)})
	ch := make(chan detector.Signal)
	close(ch)
	if err := c.Run(context.Background(), ch); err != nil {
		t.Fatal(err)
	}
	got := rec.all()
	if len(got) != 1 || got[0].Version != 6 || got[0].Mode != ModeStatic || !got[0].At.Equal(t0) || !slices.Equal(got[0].Values, []float64{3, 2, 0.5, 2, 1}) {
		t.Errorf("published %+v, want one static version 6 at t0 with the profile weights", got)
	}
}

// TestReplicasAgree: two replicas — detector and configurator each — fed
// the same endpoint views compute identical weights and modes, step by
// step, through calm, rebalance and a watchdog freeze.
//
// The views: 8 pods with noisy loads 8…10 running + 0…1 waiting (mean 9.5,
// σ = √(2/3 + 1/4) = 0.957, CV 0.10) and KV 0.3…0.4 (CV 0.029/0.35 =
// 0.08): calm, normalised CV ≈ 0.10/√7 ≈ 0.04 < theta_off 0.1. In cycles
// of 15 s: 5 s calm; 5 s with pod 0 also queueing 40 (49.5 of 116: Σp² =
// 0.4267² + 7·0.0819² = 0.2290, r = √((8·0.2290 − 1)/7) = 0.345 ≥
// theta_on 0.2: rebalance); 5 s with pod 1 queueing 60 for 0.5 s out of
// every 1 s (69.5 of 136: r = 0.441; the EWMA swings between ≈ 0.08 and
// ≈ 0.40 across both thresholds), a switch every dwell, more than
// flap_max_transitions 4 per minute: frozen.
func TestReplicasAgree(t *testing.T) {
	type replica struct {
		d *detector.Detector
		c *Configurator
	}
	mk := func() replica {
		d, err := detector.New(detector.DefaultConfig(), detector.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		return replica{d, mustNew(t, adaptive(), Deps{})}
	}
	a, b := mk(), mk()
	rnd := rand.New(rand.NewPCG(1, 2))
	modes := map[string]bool{}
	for n := 0; n < 4000; n++ { // 200 s
		eps := make([]*scheduler.Endpoint, 8)
		hot := (n / 100) % 3 // bursts: every 5 s one pod in three phases is hot
		for i := range eps {
			eps[i] = &scheduler.Endpoint{Address: fmt.Sprint(i), Running: float64(8 + rnd.IntN(3)), Waiting: float64(rnd.IntN(2)), KVUtil: 0.3 + rnd.Float64()/10}
			if hot == 1 && i == 0 {
				eps[i].Waiting += 40
			}
			if hot == 2 && (n/10)%2 == 0 && i == 1 { // flapping phase
				eps[i].Waiting += 60
			}
		}
		now := t0.Add(time.Duration(n) * tick)
		wa := a.c.Step(now, a.d.Step(now, eps))
		wb := b.c.Step(now, b.d.Step(now, eps))
		if !reflect.DeepEqual(*wa, *wb) {
			t.Fatalf("tick %d: replicas disagree:\n%+v\n%+v", n, *wa, *wb)
		}
		modes[wa.Mode] = true
	}
	if !modes[ModeCalm] || !modes[ModeRebalance] || !modes[ModeFrozen] {
		t.Errorf("the input visited modes %v; it should exercise calm, rebalance and frozen", modes)
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
		cfg.K, cfg.S0, cfg.Nu, cfg.DMin, cfg.DMax, cfg.AffinityFloor, cfg.SlewRate = k, s0, nu, dmin, dmax, floor, slew
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
		a, err := New(cfg, prof, Deps{})
		if err != nil {
			t.Skip() // no affinity or no distribution weight
		}
		b, _ := New(cfg, prof, Deps{})
		for n, s := range signals {
			now := t0.Add(time.Duration(n) * tick)
			sg := detector.Signal{Value: float64(s) / 255, Pressure: float64(s%7) / 7}
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

// TestPipelineSettles: detector and configurator with their defaults, 16
// pods with 8 requests each, then one pod also queues 80 (loads 88 and 15×8:
// raw r = sqrt((16·Σp² − 1)/15) = 5/13 = 0.38462). The EWMA (α 0.2)
// 0.38462·(1 − 0.8^n) crosses theta_on 0.2 on tick
// ceil(ln(1 − 0.2/0.38462)/ln 0.8) = ceil(3.29) = 4 (0.22708), which enters
// rebalance with D 0.3 → 0.35. The target 0.3 + 0.6·σ(EWMA) (k 25, s0
// 0.15) is 0.824 on tick 4 and keeps rising, so D climbs 0.05 per tick: 0.85
// on tick 14 (target 0.89741), then lands on the target 0.89762 on tick 15
// (EWMA 0.37108, σ = 1/(1+e^(−25·0.22108)) = 0.99604) — from then on within
// 0.01 of the final 0.3 + 0.6·σ(0.38462) = 0.3 + 0.6·0.99717 = 0.89830.
func TestPipelineSettles(t *testing.T) {
	det, err := detector.New(detector.DefaultConfig(), detector.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	c := mustNew(t, adaptive(), Deps{})
	pool := func(hot bool) []*scheduler.Endpoint {
		eps := make([]*scheduler.Endpoint, 16)
		for i := range eps {
			eps[i] = &scheduler.Endpoint{Running: 8}
		}
		if hot {
			eps[0].Waiting = 80
		}
		return eps
	}
	now := t0
	for i := 0; i < 20; i++ { // settle calm at D 0.3
		c.Step(now, det.Step(now, pool(false)))
		now = now.Add(tick)
	}
	final := 0.3 + 0.6/(1+math.Exp(-25*(5.0/13-0.15))) // 0.89830
	enter, settled := 0, 0
	for n := 1; n <= 100; n++ {
		w := c.Step(now, det.Step(now, pool(true)))
		now = now.Add(tick)
		if enter == 0 && w.Mode == ModeRebalance {
			enter = n
		}
		if math.Abs(c.Budget(w)-final) > 0.01 {
			settled = 0
		} else if settled == 0 {
			settled = n
		}
	}
	if enter != 4 {
		t.Errorf("entered rebalance on tick %d, want 4", enter)
	}
	if settled != 15 {
		t.Errorf("D within 0.01 of %.4f from tick %d, want 15", final, settled)
	}
	// The burst ends after 5 s (longer than the dwell). Raw r drops to 0;
	// the EWMA 0.38462·0.8^n is ≤ theta_off 0.1 from n = 7 (0.08066; n = 6
	// gives 0.10083), which returns to calm. D falls from the first step on,
	// following the rebalance target while the sigmoid is flat near its
	// top: 0.88858 (EWMA 0.30769), 0.85027 (0.24615), then the target drops
	// faster than the slew and D falls 0.05 per step: 0.80027 on step 3 …
	// 0.65027 on step 6, calm on step 7 (0.60027), 0.30027 on step 13,
	// D_min 0.3 on step 14.
	calm, back := 0, 0
	for n := 1; n <= 40; n++ {
		w := c.Step(now, det.Step(now, pool(false)))
		now = now.Add(tick)
		if calm == 0 && w.Mode == ModeCalm {
			calm = n
		}
		if back == 0 && c.Budget(w) == 0.3 {
			back = n
		}
	}
	if calm != 7 || back != 14 {
		t.Errorf("after the burst: calm on step %d, D_min on step %d; want 7 and 14", calm, back)
	}
}

// TestRunWithScheduler: Run publishes into a real scheduler, continuing
// its version sequence; the scheduler's weights are the configurator's.
func TestRunWithScheduler(t *testing.T) {
	sched, err := scheduler.New(scheduler.DefaultConfig(), profile(), nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	c := mustNew(t, adaptive(), Deps{Start: sched.Weights(), Publisher: sched})
	ch := make(chan detector.Signal, 30)
	// 1.5 s at r = 0.15 + ln 4/25 = 0.20545 ≥ theta_on 0.2: rebalance,
	// σ = 1/(1 + e^(−ln 4)) = 0.8, target 0.3 + 0.8·0.6 = 0.78.
	for i := 0; i < 30; i++ {
		ch <- detector.Signal{At: t0.Add(time.Duration(i) * tick), Value: 0.15 + math.Log(4)/25}
	}
	close(ch)
	if err := c.Run(context.Background(), ch); err != nil {
		t.Fatal(err)
	}
	w := sched.Weights()
	// Versions: 1 the profile (scheduler.New), 2 rebalance at D 0.5, 3…8
	// the six slew steps.
	if w != c.Weights() || w.Mode != ModeRebalance || w.Version != 8 {
		t.Fatalf("scheduler has %+v, configurator %+v", w, c.Weights())
	}
	// From the profile's D 0.5: ceil(0.28/0.05) = 6 steps to land on 0.78.
	// prefix 6·0.22 = 1.32, queue = kv = 4·0.78 = 3.12, lora 2·0.22 = 0.44.
	want := []float64{1.32, 3.12, 0.5, 3.12, 0.44}
	for i := range want {
		if !closeTo(w.Values[i], want[i], 1e-9) {
			t.Fatalf("weights %v, want %v", w.Values, want)
		}
	}
}

// BenchmarkStep: a configurator step that changes nothing (settled calm)
// and one that publishes (alternating targets inside rebalance).
func BenchmarkStep(b *testing.B) {
	b.Run("settled", func(b *testing.B) {
		c := mustNew(b, adaptive(), Deps{})
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
		c := mustNew(b, cfg, Deps{})
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
