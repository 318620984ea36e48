package detector

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pool builds fresh endpoints with the given loads (all running) and KV.
func pool(loads, kv []float64) []*scheduler.Endpoint {
	eps := make([]*scheduler.Endpoint, len(loads))
	for i, l := range loads {
		eps[i] = &scheduler.Endpoint{Address: fmt.Sprintf("10.0.0.%d:8000", i), Running: l}
		if kv != nil {
			eps[i].KVUtil = kv[i]
		}
	}
	return eps
}

// raw returns a config without smoothing, so Value == Raw.
// cvConfig is the defaults with the CV signal, which most tests here
// exercise.
func cvConfig() Config {
	c := DefaultConfig()
	c.Signal = SignalCV
	return c
}

func raw() Config {
	c := cvConfig()
	c.Smoothing = 1
	c.MinLoad = 0
	return c
}

func mustNew(t testing.TB, c Config) *Detector {
	t.Helper()
	d, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }

// TestExtremesEveryN: even load gives exactly 0 and all load on one
// endpoint gives 1 for every N = 2 … 256, for both the request and the KV
// series.
func TestExtremesEveryN(t *testing.T) {
	d := mustNew(t, raw())
	for n := 2; n <= 256; n++ {
		even, one := make([]float64, n), make([]float64, n)
		kvEven, kvOne := make([]float64, n), make([]float64, n)
		for i := range even {
			even[i], kvEven[i] = 7, 0.4
		}
		// One endpoint's KV full, the others empty: the KV CV (1) times the
		// fullest utilisation (1).
		one[n-1], kvOne[0] = 7*float64(n), 1
		if s := d.Step(t0, pool(even, kvEven)); s.Value != 0 || s.RequestCV != 0 || s.KVCV != 0 {
			t.Errorf("N=%d even: value %v request %v kv %v, want exactly 0", n, s.Value, s.RequestCV, s.KVCV)
		}
		if s := d.Step(t0, pool(one, kvOne)); !near(s.Value, 1) || !near(s.RequestCV, 1) || !near(s.KVCV, 1) || s.KVMax != 1 {
			t.Errorf("N=%d all on one: value %v request %v kv %v (max %v), want 1", n, s.Value, s.RequestCV, s.KVCV, s.KVMax)
		}
		// The same shape at 90 % reads 0.9: nothing is full yet.
		kvOne[0] = 0.9
		if s := d.Step(t0, pool(one, kvOne)); !near(s.KVCV, 0.9) {
			t.Errorf("N=%d one endpoint's KV at 0.9: kv %v, want 0.9", n, s.KVCV)
		}
	}
}

func TestNormalisedCV(t *testing.T) {
	for _, tc := range []struct {
		x    []float64
		want float64
	}{
		{[]float64{3, 1}, 0.5},                                          // μ 2, σ 1, CV 0.5, ÷ sqrt(1)
		{[]float64{2, 1, 0}, math.Sqrt(2.0/3) / math.Sqrt2},             // μ 1, σ² (1+0+1)/3, CV 0.8165, ÷ sqrt(2) = 0.5774
		{[]float64{4, 0, 0, 0}, 1},                                      // all on one
		{[]float64{1, 1, 0, 0}, math.Sqrt(1.0 / 3)},                     // k=2 of N=4: sqrt((4/2 − 1)/(4 − 1)) = 0.5774
		{[]float64{5, 5, 5, 5, 5}, 0},                                   // even
		{[]float64{3, 0, 1, 0}, math.Sqrt((4*(0.5625+0.0625) - 1) / 3)}, // p = .75,0,.25,0: N·Σp² − 1 = 4·0.625 − 1 = 1.5; sqrt(1.5/3) = 0.7071
		{[]float64{0, 0}, 0},                                            // μ 0: undefined → 0
		{[]float64{9}, 0},                                               // N 1 → 0
		{nil, 0},
	} {
		if got := NormalisedCV(tc.x); !near(got, tc.want) {
			t.Errorf("NormalisedCV(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
}

// TestKOfNClosedForm: k of N endpoints sharing all load evenly give
// sqrt((N/k − 1)/(N − 1)) — the signal depends on N only through this
// formula, which is 1 at k = 1 and 0 at k = N for every N.
func TestKOfNClosedForm(t *testing.T) {
	for _, n := range []int{2, 3, 8, 16, 64, 256} {
		for _, k := range []int{1, 2, n / 2, n - 1, n} {
			if k < 1 {
				continue
			}
			x := make([]float64, n)
			for i := 0; i < k; i++ {
				x[i] = 3
			}
			want := math.Sqrt((float64(n)/float64(k) - 1) / float64(n-1))
			if got := NormalisedCV(x); math.Abs(got-want) > 1e-12 {
				t.Errorf("N=%d k=%d: %v, want %v", n, k, got, want)
			}
		}
	}
}

// TestScaleAndOrderInvariance: multiplying every load (and capacity-divided
// load) by c, or permuting the endpoints, leaves the signal unchanged.
func TestScaleAndOrderInvariance(t *testing.T) {
	base := []float64{12, 3, 0, 7, 1, 1, 30, 5}
	want := NormalisedCV(base)
	if want <= 0 || want >= 1 {
		t.Fatalf("base pattern gives %v; pick one strictly inside (0,1)", want)
	}
	for _, c := range []float64{1e-3, 0.5, 3, 1e6} {
		x := make([]float64, len(base))
		for i, v := range base {
			x[i] = v * c
		}
		d := mustNew(t, raw())
		if got := d.Step(t0, pool(x, nil)).Value; math.Abs(got-want) > 1e-12 {
			t.Errorf("scale %v: %v, want %v", c, got, want)
		}
	}
	rev := make([]float64, len(base))
	for i, v := range base {
		rev[len(base)-1-i] = v
	}
	if got := NormalisedCV(rev); math.Abs(got-want) > 1e-12 {
		t.Errorf("reversed: %v, want %v", got, want)
	}
}

// TestCapacity: load is divided by the capacity weight, so a pod twice as
// large carrying twice the load is balanced.
func TestCapacity(t *testing.T) {
	eps := pool([]float64{10, 5, 5}, nil)
	eps[0].Capacity = 2 // 10/2 = 5: loads 5,5,5 → 0
	d := mustNew(t, raw())
	if s := d.Step(t0, eps); s.Value != 0 || s.TotalLoad != 15 {
		t.Errorf("got value %v total %v, want 0 and 15 (5+5+5)", s.Value, s.TotalLoad)
	}
	eps[0].Capacity = 0 // 0 means 1: loads 10,5,5: μ 6.667, σ 2.357, CV 0.3536, ÷ sqrt 2 = 0.25
	if s := d.Step(t0, eps); !near(s.Value, 0.25) {
		t.Errorf("capacity 0: %v, want 0.25", s.Value)
	}
}

func TestGates(t *testing.T) {
	stale := func(eps []*scheduler.Endpoint, idx ...int) []*scheduler.Endpoint {
		for _, i := range idx {
			eps[i].State = scheduler.StateStale
		}
		return eps
	}
	unhealthy := pool([]float64{50, 1, 1}, nil)
	unhealthy[2].State = scheduler.StateUnhealthy
	for _, tc := range []struct {
		name  string
		cfg   func(*Config)
		eps   []*scheduler.Endpoint
		gate  Gate
		n     int
		total float64
		value float64
	}{
		{"empty pool", nil, nil, GateTooFewEndpoints, 0, 0, 0},
		{"one endpoint", nil, pool([]float64{40}, nil), GateTooFewEndpoints, 1, 40, 0},
		{"stale left out", nil, stale(pool([]float64{40, 0, 0}, nil), 1, 2), GateTooFewEndpoints, 1, 40, 0},
		{"nil endpoint left out", nil, append(pool([]float64{40}, nil), nil), GateTooFewEndpoints, 1, 40, 0},
		{"min_endpoints 3", func(c *Config) { c.MinEndpoints = 3 }, pool([]float64{40, 0}, nil), GateTooFewEndpoints, 2, 40, 0},
		{"low load", nil, pool([]float64{4, 0, 0}, nil), GateLowLoad, 3, 4, 0},                          // 4 < 5
		{"load at min passes", nil, pool([]float64{5, 0, 0}, nil), GateNone, 3, 5, 1},                   // 5 ≥ 5, all on one
		{"low load after capacity", nil, capacity(pool([]float64{8, 0}, nil), 2), GateLowLoad, 2, 4, 0}, // 8/2 = 4 < 5
		{"zero mean", func(c *Config) { c.MinLoad = 0 }, pool([]float64{0, 0, 0}, nil), GateZeroMean, 3, 0, 0},
		{"unhealthy left out", nil, unhealthy, GateNone, 2, 51, 49.0 / 51}, // loads 50,1: |p1−p2| = 49/51
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cvConfig()
			c.Smoothing = 1
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			d := mustNew(t, c)
			s := d.Step(t0, tc.eps)
			if s.Gate != tc.gate || s.Endpoints != tc.n || s.TotalLoad != tc.total || !near(s.Value, tc.value) {
				t.Errorf("gate %q endpoints %d total %v value %v; want %q %d %v %v", s.Gate, s.Endpoints, s.TotalLoad, s.Value, tc.gate, tc.n, tc.total, tc.value)
			}
			if tc.gate != GateNone && (s.RequestCV != 0 || s.Raw != 0) {
				t.Errorf("gated signal has components request %v raw %v, want 0", s.RequestCV, s.Raw)
			}
		})
	}
}

func capacity(eps []*scheduler.Endpoint, c float64) []*scheduler.Endpoint {
	for _, e := range eps {
		e.Capacity = c
	}
	return eps
}

// TestGarbageInput: negative, NaN and infinite scraped values are read as
// 0 (KV clamped to [0,1]), never producing a value outside [0,1].
func TestGarbageInput(t *testing.T) {
	eps := pool([]float64{math.NaN(), -3, math.Inf(1), 10}, []float64{math.NaN(), 2, -1, 0.5})
	eps[1].Capacity = math.NaN()
	d := mustNew(t, raw())
	s := d.Step(t0, eps)
	// loads 0,0,0,10 → all on one → 1; kv 0,1,0,0.5.
	if !near(s.RequestCV, 1) || s.TotalLoad != 10 {
		t.Errorf("request %v total %v, want 1 and 10", s.RequestCV, s.TotalLoad)
	}
	// kv 0,1,0,0.5: μ 0.375, σ² = (0.140625+0.390625+0.140625+0.015625)/4 = 0.171875, CV 1.1055, ÷ sqrt 3 = 0.6383, × KVMax 1
	if want := math.Sqrt(0.171875) / 0.375 / math.Sqrt(3); !near(s.KVCV, want) {
		t.Errorf("kv %v, want %v", s.KVCV, want)
	}
}

func TestCombine(t *testing.T) {
	// Request loads 3,1 → μ 2, σ 1, CV 0.5. KV 0.1,0.7 → μ 0.4, σ 0.3,
	// CV 0.75, times the fullest utilisation 0.7 = 0.525.
	loads, kv := []float64{3, 1}, []float64{0.1, 0.7}
	for _, tc := range []struct {
		rule string
		w    float64
		want float64
	}{
		{CombineMax, 0.5, 0.525},
		{CombineMin, 0.5, 0.5},
		{CombineWeighted, 0.5, 0.5125}, // 0.5·0.5 + 0.5·0.525
		{CombineWeighted, 0.2, 0.505},  // 0.8·0.5 + 0.2·0.525
		{CombineWeighted, 1, 0.525},    // KV only
	} {
		c := raw()
		c.Combine, c.KVWeight = tc.rule, tc.w
		s := mustNew(t, c).Step(t0, pool(loads, kv))
		if !near(s.RequestCV, 0.5) || !near(s.KVCV, 0.525) || s.KVMax != 0.7 || !s.KVUsed || !near(s.Value, tc.want) {
			t.Errorf("%s w=%v: request %v kv %v (max %v) used %v value %v, want 0.5 0.525 (0.7) true %v", tc.rule, tc.w, s.RequestCV, s.KVCV, s.KVMax, s.KVUsed, s.Value, tc.want)
		}
	}
	// The same relative spread at low utilisation, 1 % against 7 %, is no
	// hot spot: 0.75 × 0.07 = 0.0525.
	s := mustNew(t, raw()).Step(t0, pool([]float64{2, 2}, []float64{0.01, 0.07}))
	if !near(s.KVCV, 0.0525) || !near(s.Value, 0.0525) {
		t.Errorf("kv 0.01,0.07: kv %v value %v, want 0.0525", s.KVCV, s.Value)
	}
	// No KV reported: every rule uses the request CV alone.
	for _, rule := range []string{CombineMax, CombineMin, CombineWeighted} {
		c := raw()
		c.Combine = rule
		s := mustNew(t, c).Step(t0, pool(loads, nil))
		if s.KVUsed || s.KVCV != 0 || !near(s.Value, 0.5) {
			t.Errorf("%s without KV: used %v kv %v value %v, want false 0 0.5", rule, s.KVUsed, s.KVCV, s.Value)
		}
	}
}

// TestSmoothing: the EWMA with α = 0.2 on a step from even to all-on-one,
// then a gate: Value is 0 while gated and the state decays.
func TestSmoothing(t *testing.T) {
	d := mustNew(t, cvConfig()) // α 0.2, min_load 5
	hot := pool([]float64{20, 0, 0, 0}, nil)
	idle := pool([]float64{1, 0, 0, 0}, nil) // total 1 < 5: low_load
	for i, tc := range []struct {
		eps   []*scheduler.Endpoint
		value float64
		sm    float64
	}{
		{hot, 0.2, 0.2},         // 0.2·1
		{hot, 0.36, 0.36},       // 0.2 + 0.8·0.2
		{hot, 0.488, 0.488},     // 0.2 + 0.8·0.36
		{idle, 0, 0.3904},       // gated: 0.8·0.488
		{hot, 0.51232, 0.51232}, // 0.2 + 0.8·0.3904
	} {
		s := d.Step(t0.Add(time.Duration(i)*50*time.Millisecond), tc.eps)
		if !near(s.Value, tc.value) || !near(s.Smoothed, tc.sm) {
			t.Errorf("step %d: value %v smoothed %v, want %v %v", i, s.Value, s.Smoothed, tc.value, tc.sm)
		}
	}
	// Settling: from 0, α = 0.2 reaches 95% of a step after
	// ceil(ln 0.05 / ln 0.8) = 14 steps (1 − 0.8^14 = 0.956).
	d = mustNew(t, cvConfig())
	n := 0
	for ; d.Step(t0, hot).Value < 0.95; n++ {
	}
	if n+1 != 14 {
		t.Errorf("reached 0.95 after %d steps, want 14", n+1)
	}
}

func TestPressure(t *testing.T) {
	eps := pool([]float64{4, 2}, nil)
	eps[0].Waiting, eps[1].Waiting = 6, 0 // Σw 6, Σ(r+w) 12 → 0.5
	eps[1].Capacity = 4                   // capacity does not enter pressure
	if s := mustNew(t, raw()).Step(t0, eps); !near(s.Pressure, 0.5) {
		t.Errorf("pressure %v, want 0.5", s.Pressure)
	}
	// Reported even when gated.
	if s := mustNew(t, cvConfig()).Step(t0, eps[:1]); s.Gate != GateTooFewEndpoints || !near(s.Pressure, 0.6) { // 6/10
		t.Errorf("gated: gate %q pressure %v, want too_few_endpoints 0.6", s.Gate, s.Pressure)
	}
}

// TestInFlight uses a real scheduler so the endpoints carry router-local
// in-flight counters.
func TestInFlight(t *testing.T) {
	s, err := scheduler.New(scheduler.DefaultConfig(),
		[]scheduler.ScorerEntry{{Name: "first", Scorer: firstScorer{}, Weight: 1}}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints([]scheduler.Endpoint{{Address: "a:1", Running: 3}, {Address: "b:1", Running: 3}})
	for i := 0; i < 6; i++ { // all six picks go to a:1 (the only one scoring 1)
		if _, err := s.Pick(context.Background(), &scheduler.Request{ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	eps := s.Pool().Pointers()
	if s := mustNew(t, raw()).Step(t0, eps); s.Value != 0 || s.Requests != 6 { // 3,3 → 0; 3 + 3 requests
		t.Errorf("without in-flight: value %v requests %v, want 0 and 6", s.Value, s.Requests)
	}
	c := raw()
	c.IncludeInFlight = true
	// 3+6, 3 → |9−3|/12 = 0.5; 9 + 3 requests
	if s := mustNew(t, c).Step(t0, eps); !near(s.Value, 0.5) || s.Requests != 12 {
		t.Errorf("with in-flight: value %v requests %v, want 0.5 and 12", s.Value, s.Requests)
	}
}

// TestPicksScaledToPool: a router that sees a third of the pool's
// in-flight requests (its peers report the rest through replica sync)
// counts its picks three times for the min_picks gate, so three replicas
// gate as one router would; alone it counts them once.
func TestPicksScaledToPool(t *testing.T) {
	s, err := scheduler.New(scheduler.DefaultConfig(),
		[]scheduler.ScorerEntry{{Name: "first", Scorer: firstScorer{}, Weight: 1}}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints([]scheduler.Endpoint{{Address: "a:1"}, {Address: "b:1"}})
	for i := 0; i < 12; i++ { // 12 picks, all on a:1 and kept in flight
		if _, err := s.Pick(context.Background(), &scheduler.Request{ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	c := DefaultConfig()
	c.MinPicks = 20
	d := mustNew(t, c)
	sig := d.Step(t0, s.Pool().Pointers())
	if sig.Gate != GateLowLoad || !near(sig.Picks, 12) {
		t.Fatalf("alone: picks %v gate %q, want 12 and low_load", sig.Picks, sig.Gate)
	}
	s.AddPeerLoad("a:1", 12, 0) // peers: 24 more in flight, 36 in all
	s.AddPeerLoad("b:1", 12, 0)
	d = mustNew(t, c)
	sig = d.Step(t0, s.Pool().Pointers())
	if sig.Gate != GateNone || !near(sig.Picks, 36) {
		t.Errorf("with peers: picks %v gate %q, want 36 and no gate", sig.Picks, sig.Gate)
	}
}

type firstScorer struct{}

func (firstScorer) Category() scheduler.Category { return scheduler.CategoryNone }
func (firstScorer) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i, e := range eps {
		out[i] = 0
		if e.Address == "a:1" {
			out[i] = 1
		}
	}
}

// TestReplicasAgree: two detectors fed the same sequence give the same
// sequence of signals.
func TestReplicasAgree(t *testing.T) {
	a, b := mustNew(t, cvConfig()), mustNew(t, cvConfig())
	for i := 0; i < 200; i++ {
		loads := make([]float64, 16)
		kv := make([]float64, 16)
		for j := range loads {
			loads[j] = float64((i*7 + j*j*3) % 23)
			kv[j] = float64((i+j*5)%10) / 10
		}
		now := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		if sa, sb := a.Step(now, pool(loads, kv)), b.Step(now, pool(loads, kv)); sa != sb {
			t.Fatalf("step %d: %+v != %+v", i, sa, sb)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := cvConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Interval = 0 }, "adaptive.detector.interval: must be > 0"},
		{func(c *Config) { c.MinEndpoints = 1 }, "adaptive.detector.min_endpoints: must be ≥ 2"},
		{func(c *Config) { c.MinLoad = -1 }, "adaptive.detector.min_load:"},
		{func(c *Config) { c.MinLoad = math.NaN() }, "adaptive.detector.min_load:"},
		{func(c *Config) { c.Combine = "avg" }, "adaptive.detector.combine:"},
		{func(c *Config) { c.KVWeight = 1.5 }, "adaptive.detector.kv_weight:"},
		{func(c *Config) { c.Smoothing = 0 }, "adaptive.detector.smoothing: must be in (0,1]"},
		{func(c *Config) { c.Smoothing = math.NaN() }, "adaptive.detector.smoothing:"},
	} {
		c := cvConfig()
		tc.mut(&c)
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("got %v, want prefix %q", err, tc.want)
		}
		if _, err := New(c); err == nil {
			t.Errorf("New accepted config that fails %q", tc.want)
		}
	}
}

// FuzzStep: whatever the scraped values, Value stays in [0,1] and two
// detectors agree.
func FuzzStep(f *testing.F) {
	f.Add([]byte{10, 0, 0, 0, 200, 3, 3, 3}, uint8(0))
	f.Add([]byte{1, 1, 1, 1}, uint8(1))
	f.Add([]byte{255, 0, 128, 7, 9, 0, 0, 1, 2, 3, 4, 5}, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, rule uint8) {
		c := cvConfig()
		c.Combine = []string{CombineMax, CombineMin, CombineWeighted}[rule%3]
		a, b := mustNew(t, c), mustNew(t, c)
		for step := 0; step < 3; step++ {
			var eps []*scheduler.Endpoint
			for i := 0; i+3 < len(data); i += 4 {
				eps = append(eps, &scheduler.Endpoint{
					Running:  float64(data[i]) - 20,
					Waiting:  float64(data[i+1]) * float64(step),
					KVUtil:   float64(data[i+2]) / 200,
					Capacity: float64(data[i+3] % 4),
					State:    scheduler.State(data[i+3] % 3),
				})
			}
			sa, sb := a.Step(t0, eps), b.Step(t0, eps)
			if sa != sb {
				t.Fatalf("replicas disagree: %+v vs %+v", sa, sb)
			}
			for _, v := range []float64{sa.Value, sa.RequestCV, sa.KVCV, sa.Raw, sa.Smoothed, sa.Pressure} {
				if !(v >= 0 && v <= 1) {
					t.Fatalf("component %v outside [0,1]: %+v", v, sa)
				}
			}
			if sa.Gate != GateNone && sa.Value != 0 {
				t.Fatalf("gated signal not 0: %+v", sa)
			}
		}
	})
}

func BenchmarkStep(b *testing.B) {
	for _, n := range []int{16, 128, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			loads, kv := make([]float64, n), make([]float64, n)
			for i := range loads {
				loads[i] = float64(i % 17)
				kv[i] = float64(i%10) / 10
			}
			eps := pool(loads, kv)
			d := mustNew(b, cvConfig())
			d.Step(t0, eps) // grow buffers
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d.Step(t0, eps)
			}
		})
	}
}

func TestNoiseCorrected(t *testing.T) {
	for _, tc := range []struct {
		r, n, want float64
	}{
		{1, 8, 1},                            // (1 − 1/8)/(1 − 1/8) = 1: all on one stays 1
		{0, 8, 0},                            // max(0, 0 − 1/8) = 0: even stays 0
		{0.25, 16, 0},                        // 0.0625 − 1/16 = 0: exactly the chance reading of 16 requests
		{0.2, 8, 0},                          // 0.04 − 0.125 < 0 → 0, not negative or NaN
		{0.75, 8, math.Sqrt(0.4375 / 0.875)}, // r'² = (0.5625 − 0.125)/(1 − 0.125) = 0.5 → 0.7071
		{0.3, 1000, math.Sqrt((0.09 - 0.001) / 0.999)}, // r'² = 0.0891/0.999 → 0.2985: large n barely moves it
		{1, 1, 0},            // n = 1: one request cannot be spread, no signal
		{0.5, 0, 0},          // n = 0: no requests
		{0.5, math.NaN(), 0}, // n NaN
		{math.NaN(), 8, 0},   // r NaN: no signal rather than NaN
		{1.5, 8, 1},          // r outside [0,1] (not from NormalisedCV): clamped
	} {
		if got := NoiseCorrected(tc.r, tc.n); !near(got, tc.want) {
			t.Errorf("NoiseCorrected(%v, %v) = %v, want %v", tc.r, tc.n, got, tc.want)
		}
	}
}

// TestChanceReading checks the model behind NoiseCorrected by simulation:
// n requests placed uniformly at random on N endpoints read E[r²] = 1/n,
// whatever N, and the corrected reading of such a pool is small.
func TestChanceReading(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, endpoints int }{{8, 4}, {16, 4}, {16, 16}, {125, 16}, {40, 64}} {
		const trials = 20000
		x := make([]float64, tc.endpoints)
		var sumR2, sumR, sumCorr float64
		for range trials {
			clear(x)
			for range tc.n {
				x[rng.IntN(tc.endpoints)]++
			}
			r := NormalisedCV(x)
			sumR2 += r * r
			sumR += r
			sumCorr += NoiseCorrected(r, float64(tc.n))
		}
		meanR2, meanR, meanCorr := sumR2/trials, sumR/trials, sumCorr/trials
		// The standard error of the mean of r² over 20000 trials is below
		// 1 % of 1/n for these sizes; allow 5 %.
		if want := 1 / float64(tc.n); math.Abs(meanR2-want) > 0.05*want {
			t.Errorf("n=%d N=%d: mean r² %.5f, want 1/n = %.5f", tc.n, tc.endpoints, meanR2, want)
		}
		if meanCorr > meanR/2 {
			t.Errorf("n=%d N=%d: corrected mean %.3f not well below uncorrected %.3f", tc.n, tc.endpoints, meanCorr, meanR)
		}
		t.Logf("n=%d N=%d: mean r %.3f, corrected %.3f", tc.n, tc.endpoints, meanR, meanCorr)
	}
}

func TestSubtractNoiseStep(t *testing.T) {
	c := raw()
	c.SubtractNoise = true
	d := mustNew(t, c)
	// 3,1: r 0.5, r² 0.25 = 1/4 for 4 requests: pure chance → 0, and the
	// gate is not involved (Gate "" and Value exactly 0).
	if s := d.Step(t0, pool([]float64{3, 1}, nil)); s.RequestCV != 0 || !near(s.RequestCVUncorrected, 0.5) || s.Requests != 4 || s.Value != 0 || s.Gate != GateNone {
		t.Errorf("3,1: %+v, want request 0 (uncorrected 0.5, 4 requests)", s)
	}
	// 7,1: μ 4, σ 3, r 0.75; (0.5625 − 1/8)/(1 − 1/8) = 0.5 → 0.7071.
	// The same requests on endpoints of capacity 2 (loads 3.5, 0.5): r is
	// scale-free (0.75) and n stays the raw count 8, so the same 0.7071;
	// a capacity-divided n (4) would give sqrt(0.3125/0.75) = 0.6455.
	capEps := pool([]float64{7, 1}, nil)
	capacity(capEps, 2)
	if s := d.Step(t0, capEps); !near(s.RequestCV, math.Sqrt(0.5)) || s.Requests != 8 || s.TotalLoad != 4 {
		t.Errorf("capacity 2: request %v requests %v total %v, want 0.7071, 8, 4", s.RequestCV, s.Requests, s.TotalLoad)
	}
	if s := d.Step(t0, pool([]float64{7, 1}, nil)); !near(s.RequestCV, math.Sqrt(0.5)) || !near(s.RequestCVUncorrected, 0.75) || !near(s.Value, math.Sqrt(0.5)) {
		t.Errorf("7,1: request %v uncorrected %v value %v, want 0.7071 0.75 0.7071", s.RequestCV, s.RequestCVUncorrected, s.Value)
	}
	// Off (the default), RequestCV is the uncorrected value.
	if s := mustNew(t, raw()).Step(t0, pool([]float64{7, 1}, nil)); !near(s.RequestCV, 0.75) || s.RequestCV != s.RequestCVUncorrected {
		t.Errorf("default: request %v uncorrected %v, want both 0.75", s.RequestCV, s.RequestCVUncorrected)
	}
}

// TestNoiseCorrectedUnbiased: with a preference p (not uniform), the
// uncorrected r² is biased up by (1 − r_p²)/n, and the unclamped
// correction (r² − 1/n)/(1 − 1/n) averages to r_p², the preference's own
// reading (NoiseCorrected's comment derives it).
func TestNoiseCorrectedUnbiased(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := []float64{0.5, 0.3, 0.2, 0}
	rp := NormalisedCV(p) // shares .5,.3,.2,0: N·Σp² − 1 = 4·0.38 − 1 = 0.52; ÷ 3 → r_p² 0.17333
	if !near(rp*rp, 0.52/3) {
		t.Fatalf("r_p² = %v, want 0.17333", rp*rp)
	}
	const n, trials = 12, 40000
	x := make([]float64, len(p))
	var sumR2, sumEst float64
	for range trials {
		clear(x)
		for range n {
			u, i := rng.Float64(), 0
			for u >= p[i] {
				u -= p[i]
				i++
			}
			x[i]++
		}
		r := NormalisedCV(x)
		sumR2 += r * r
		sumEst += (r*r - 1.0/n) / (1 - 1.0/n)
	}
	meanR2, meanEst := sumR2/trials, sumEst/trials
	want := rp * rp
	if biased := want + (1-want)/n; math.Abs(meanR2-biased) > 0.03*biased {
		t.Errorf("mean r² %.5f, want r_p² + (1 − r_p²)/n = %.5f", meanR2, biased)
	}
	if math.Abs(meanEst-want) > 0.03*want {
		t.Errorf("mean corrected r² %.5f, want r_p² = %.5f", meanEst, want)
	}
}

// TestKVMaxReported: the fullest endpoint's utilisation is reported even
// when the step is gated, while the KV CV then stays 0.
func TestKVMaxReported(t *testing.T) {
	c := raw()
	c.MinLoad = 100
	s := mustNew(t, c).Step(t0, pool([]float64{3, 1}, []float64{0.2, 0.6}))
	if s.Gate != GateLowLoad || s.KVMax != 0.6 || s.KVCV != 0 || s.Requests != 4 {
		t.Errorf("gated: gate %q kv max %v kv %v requests %v, want low_load 0.6 0 4", s.Gate, s.KVMax, s.KVCV, s.Requests)
	}
}
