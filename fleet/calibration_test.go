package fleet

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.yaml.in/yaml/v3"

	"github.com/trimtab/trimtab/scheduler"
)

// calTarget is a hand-written CalibrationTarget: a fixed pool that
// remembers what was published.
type calTarget struct {
	pool *scheduler.Pool
	got  map[string]scheduler.Calibration
}

func newCalTarget(eps ...scheduler.Endpoint) *calTarget {
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{{Name: "x", Scorer: nopScorer{}, Weight: 1}}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		panic(err)
	}
	s.SetEndpoints(eps)
	return &calTarget{pool: s.Pool(), got: map[string]scheduler.Calibration{}}
}

func (t *calTarget) Pool() *scheduler.Pool { return t.pool }
func (t *calTarget) SetCalibration(addr string, c scheduler.Calibration) {
	t.got[addr] = c
}

type nopScorer struct{}

func (nopScorer) Category() scheduler.Category { return scheduler.CategoryNone }
func (nopScorer) Score(_ *scheduler.CycleState, _ *scheduler.Request, _ []*scheduler.Endpoint, out []float64) {
	clear(out)
}

// obs is a successful observation on addr of x uncached tokens (nothing
// queued) whose first byte took 20 ms + x/10,000 s, with out output tokens
// 13 ms + 0.1 ms·batch apart at batch inflight+1.
func obs(addr string, x int64, inflight int64, out int64) scheduler.Observation {
	ttft := 0.02 + float64(x)/10000
	itl := 0.013 + 0.0001*float64(inflight+1)
	return scheduler.Observation{
		Endpoint: addr, Kind: scheduler.OutcomeSuccess, PromptTokens: x, UncachedTokens: x, Matched: true, InFlight: inflight,
		TTFT:    time.Duration(ttft * float64(time.Second)),
		Latency: time.Duration((ttft + itl*float64(out-1)) * float64(time.Second)),
		Usage:   scheduler.Usage{OutputTokens: out},
	}
}

func TestCalibratorEstimates(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prior := DefaultCalibrationPrior().PrefillTokensPerSecond() // 2,048 / (0.013 + 2,048·70 µs) = 13,097.98
	if math.Abs(prior-13097.98) > 0.01 {
		t.Fatalf("prior %.2f tokens/s, want 13,097.98", prior)
	}
	cases := []struct {
		name    string
		n       int     // observations, x = 100·(i+1) tokens, in flight i%8
		wantR   float64 // published prefill tokens/s
		source  string
		samples int
	}{
		// Nothing observed: the prior.
		{"none", 0, 13097.98, "prior", 0},
		// 10 of N = 20: weight 0.5 in seconds per token:
		// 1 / (0.5/13,097.98 + 0.5/10,000) = 1 / 88.174 µs = 11,341.2.
		{"half", 10, 11341.2, "blended", 10},
		// 40 ≥ N: the estimate alone, exactly 10,000 (the lower-quartile
		// line of points on a line is that line).
		{"learned", 40, 10000, "learned", 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tg := newCalTarget(scheduler.Endpoint{Address: "a:1", CacheBlockSize: 16, CacheBlocks: 1000})
			c, err := NewCalibrator(DefaultCalibrationConfig(), tg, CalibrationDeps{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.n {
				c.Ring().Record(obs("a:1", int64(100*(i+1)), int64(i%8), int64(11+10*(i%2))))
			}
			c.Ring().Record(obs("gone:1", 5000, 0, 11)) // not in the pool: ignored
			c.Tick(t0)
			got := tg.got["a:1"]
			e := c.Snapshot().Endpoints[0]
			if math.Abs(got.PrefillTokensPerSecond-tc.wantR) > 0.1 || e.Source != tc.source || got.Samples != tc.samples {
				t.Errorf("published %.1f tokens/s, %s, %d samples; want %.1f, %s, %d", got.PrefillTokensPerSecond, e.Source, got.Samples, tc.wantR, tc.source, tc.samples)
			}
			if learned := c.Learned(); (learned == 1) != (tc.source == "learned") {
				t.Errorf("Learned() %d with the endpoint %s", learned, e.Source)
			}
			// KV from the scraped cache config: 1,000 blocks × 16 = 16,000.
			if got.KVCapacityTokens != 16000 || e.KVSource != "scraped" {
				t.Errorf("KV %v tokens (%s), want 16,000 scraped", got.KVCapacityTokens, e.KVSource)
			}
			// Output 11 and 21 tokens in turn: mean 16; none reported: 0.
			if wantOut := map[bool]float64{true: 16, false: 0}[tc.n > 0]; got.OutputTokens != wantOut || e.MeanOutputTokens != wantOut {
				t.Errorf("output %v tokens (snapshot %v), want %v", got.OutputTokens, e.MeanOutputTokens, wantOut)
			}
			if tc.n == 0 && math.Abs(got.DecodeSecondsPerSeq-70e-6) > 1e-12 {
				t.Errorf("per-sequence step %v with nothing observed, want the prior's 70 µs", got.DecodeSecondsPerSeq)
			}
			if tc.n >= 20 && math.Abs(got.DecodeSecondsPerSeq-0.0001) > 1e-7 {
				t.Errorf("published per-sequence step %v, want the fitted 0.1 ms", got.DecodeSecondsPerSeq)
			}
			if tc.n >= 20 {
				// Decode: 13 ms + 0.1 ms per sequence fitted exactly;
				// at the median batch, in flight 0…7 → batch 1…8,
				// median 4.5: 13 + 0.45 = 13.45 ms.
				if math.Abs(e.DecodeStepFixedSeconds-0.013) > 1e-6 || math.Abs(e.DecodeStepPerSeqSeconds-0.0001) > 1e-7 || math.Abs(got.DecodeStepSeconds-0.01345) > 1e-6 {
					t.Errorf("decode fixed %v per seq %v step %v; want 0.013, 0.0001, 0.01345", e.DecodeStepFixedSeconds, e.DecodeStepPerSeqSeconds, got.DecodeStepSeconds)
				}
			}
		})
	}
}

func TestDecodeBatch(t *testing.T) {
	spans := []span{{from: 0, to: 10}, {from: 5, to: 15}, {from: 10, to: 20}, {from: 30, to: 40}}
	for _, tc := range []struct {
		d    span
		want float64
	}{
		{span{from: 0, to: 10}, 1.5},   // itself, and half of it beside {5, 15}
		{span{from: 5, to: 15}, 2},     // itself, half beside each neighbour
		{span{from: 30, to: 40}, 1},    // alone
		{span{from: 12, to: 12}, 1},    // no length: 1
		{span{from: 50, to: 60}, 1},    // beside nothing it was not in: at least 1
		{span{from: 0, to: 20}, 1.5},   // 10 + 10 + 10 over 20 (a span not in the list)
		{span{from: 9, to: 11}, 2},     // 1 + 2 + 1 over 2
		{span{from: 15, to: 35}, 0.75}, // 5 + 5 + 5 over 20, floored
	} {
		want := max(tc.want, 1)
		if got, _, _ := decodeBeside(spans, tc.d); math.Abs(got-want) > 1e-12 {
			t.Errorf("decodeBeside(%v) batch %v, want %v", tc.d, got, want)
		}
	}
}

// TestCalibratorDecodeBatchOverTime: requests arrive in groups of k = 1…8
// at once (the router's in-flight count at each pick says 0: the group's
// others were not yet picked), and their inter-token times follow
// 13 ms + 0.1 ms × k. The batch a request decoded in is what its group
// shared, so the line is fitted exactly where the in-flight count at the
// pick would see no batch at all.
func TestCalibratorDecodeBatchOverTime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tg := newCalTarget(scheduler.Endpoint{Address: "a:1"})
	c, err := NewCalibrator(DefaultCalibrationConfig(), tg, CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	at := t0
	var itls []float64 // as the calibrator computes them, in order
	for range 4 {
		for k := 1; k <= 8; k++ {
			itl := 0.013 + 0.0001*float64(k)
			for range k {
				o := obs("a:1", 1000, 0, 21)
				o.Arrival = at
				o.Latency = o.TTFT + time.Duration(itl*20*float64(time.Second))
				c.Ring().Record(o)
				itls = append(itls, (o.Latency-o.TTFT).Seconds()/20)
			}
			at = at.Add(2 * time.Second) // groups never overlap (each decodes < 0.3 s)
		}
	}
	c.Tick(at)
	got := tg.got["a:1"]
	e := c.Snapshot().Endpoints[0]
	if math.Abs(got.DecodeSecondsPerSeq-0.0001) > 1e-7 || math.Abs(e.DecodeStepFixedSeconds-0.013) > 1e-6 {
		t.Errorf("decode line %v s + %v s per sequence, want 0.013 + 0.0001", e.DecodeStepFixedSeconds, got.DecodeSecondsPerSeq)
	}
	// The published step is still the pick-time line's: every pick saw
	// nothing in flight (batch 1), so no slope, and the step is the median
	// of the newest decodeWindow inter-token times.
	recent := append([]float64(nil), itls[len(itls)-decodeWindow:]...)
	if want := medianOf(recent); got.DecodeStepSeconds != want || e.Batch != 1 {
		t.Errorf("published step %v at batch %v, want the pick-time line's %v at 1", got.DecodeStepSeconds, e.Batch, want)
	}
}

func TestCalibratorIgnoresOutliers(t *testing.T) {
	// 200 observations on the 10,000 tokens/s line, 10 % of them garbage:
	// a first byte 20× too slow or 20× too fast, or the work ×50 (more
	// uncached tokens than the prompt has, which counts as the prompt).
	tg := newCalTarget(scheduler.Endpoint{Address: "a:1"})
	cfg := DefaultCalibrationConfig()
	cfg.Window = 200
	c, err := NewCalibrator(cfg, tg, CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		o := obs("a:1", int64(50+rng.IntN(4000)), 0, 2)
		if i%10 == 3 {
			switch rng.IntN(3) {
			case 0:
				o.TTFT *= 20
			case 1:
				o.TTFT /= 20
			default:
				o.UncachedTokens *= 50
			}
			o.Latency = o.TTFT + time.Millisecond
		}
		c.Ring().Record(o)
	}
	c.Tick(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if got := tg.got["a:1"].PrefillTokensPerSecond; math.Abs(got/10000-1) > 0.03 {
		t.Errorf("with 10 %% garbage: %.0f tokens/s, want 10,000 ± 3 %%", got)
	}
}

func TestCalibratorForgetsOldObservations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tg := newCalTarget(scheduler.Endpoint{Address: "a:1"})
	c, err := NewCalibrator(DefaultCalibrationConfig(), tg, CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		c.Ring().Record(obs("a:1", int64(100*(i+1)), 0, 2))
	}
	c.Tick(t0)
	// MaxAge (10m) later, with nothing new: back to the prior.
	c.Tick(t0.Add(10*time.Minute + time.Second))
	if e := c.Snapshot().Endpoints[0]; e.Source != "prior" || e.Calibration.Samples != 0 || c.Learned() != 0 {
		t.Errorf("after max_age: %s with %d samples (%d learned), want the prior", e.Source, e.Calibration.Samples, c.Learned())
	}
}

func TestCalibratorPoolsAClass(t *testing.T) {
	// Three endpoints of one class run the same 10,000 tokens/s engine:
	// a:1 and b:1 with 30 points each (x = 100…3,000 tokens), c:1 with 5
	// (x = 100…500), too few to learn from alone. Fitted together, the
	// 65 points give 10,000 for each of them, learned on 65 samples. A
	// fourth of capacity 2 (its own class) learns its own 25,000 from 30.
	tg := newCalTarget(scheduler.Endpoint{Address: "a:1"}, scheduler.Endpoint{Address: "b:1"}, scheduler.Endpoint{Address: "c:1"}, scheduler.Endpoint{Address: "d:1", Capacity: 2})
	c, err := NewCalibrator(DefaultCalibrationConfig(), tg, CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []struct {
		addr string
		n    int
		r    float64
	}{{"a:1", 30, 10000}, {"b:1", 30, 10000}, {"c:1", 5, 10000}, {"d:1", 30, 25000}} {
		for i := range ep.n {
			o := obs(ep.addr, int64(100*(i+1)), 0, 2)
			o.TTFT = time.Duration((0.02 + float64(o.UncachedTokens)/ep.r) * float64(time.Second))
			c.Ring().Record(o)
		}
	}
	c.Tick(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, want := range []struct {
		addr    string
		r       float64
		samples int
		pooled  bool
	}{{"a:1", 10000, 65, true}, {"b:1", 10000, 65, true}, {"c:1", 10000, 65, true}, {"d:1", 25000, 30, false}} {
		var e EndpointCalibration
		for _, x := range c.Snapshot().Endpoints {
			if x.Address == want.addr {
				e = x
			}
		}
		if got := e.Calibration.PrefillTokensPerSecond; math.Abs(got/want.r-1) > 1e-6 || e.Calibration.Samples != want.samples || e.Pooled != want.pooled || e.Source != "learned" {
			t.Errorf("%s: %.0f tokens/s on %d samples, pooled %v, %s; want %.0f on %d, pooled %v, learned",
				want.addr, got, e.Calibration.Samples, e.Pooled, e.Source, want.r, want.samples, want.pooled)
		}
	}
}

// TestCalibratorAsksForProbes: an estimate resting on fewer than
// min_samples (20) prefill points asks for the rest as probes — a class
// fit's shortfall split over the class, rounded up — until the window
// holds 2 × min_samples requests. a:1 and b:1 share a class fit of 15
// points each (30): none. c:1 and f:1 of capacity 2 share a class, 13
// points on c:1 and none on f:1: one member with points makes no class
// fit, so c:1 asks for its 7 and f:1, the member a learned class would
// never send anything, for 20. h:1 of capacity 16 has 30 points alone:
// none. d:1 of capacity 4 was sent nothing: 20. e:1 of capacity 8 has 25
// requests of one length, which fit no prefill line (it publishes its
// prior): 15 more, to 40.
func TestCalibratorAsksForProbes(t *testing.T) {
	tg := newCalTarget(scheduler.Endpoint{Address: "a:1"}, scheduler.Endpoint{Address: "b:1"},
		scheduler.Endpoint{Address: "c:1", Capacity: 2}, scheduler.Endpoint{Address: "f:1", Capacity: 2},
		scheduler.Endpoint{Address: "d:1", Capacity: 4}, scheduler.Endpoint{Address: "e:1", Capacity: 8}, scheduler.Endpoint{Address: "h:1", Capacity: 16})
	c, err := NewCalibrator(DefaultCalibrationConfig(), tg, CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	for range 25 {
		o := obs("e:1", 1000, 0, 2)
		o.TTFT = 120 * time.Millisecond
		c.Ring().Record(o)
	}
	for _, ep := range []struct {
		addr string
		n    int
	}{{"a:1", 15}, {"b:1", 15}, {"c:1", 13}, {"h:1", 30}} {
		for i := range ep.n {
			o := obs(ep.addr, int64(100*(i+1)), 0, 2)
			o.TTFT = time.Duration((0.02 + float64(o.UncachedTokens)/10000) * float64(time.Second))
			c.Ring().Record(o)
		}
	}
	c.Tick(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	want := map[string]int{"a:1": 0, "b:1": 0, "c:1": 7, "f:1": 20, "d:1": 20, "e:1": 15, "h:1": 0}
	for _, e := range c.Snapshot().Endpoints {
		if e.Address == "e:1" && (e.Source != "prior" || e.Observed != 25) {
			t.Errorf("e:1: %s on %d observations, want the prior on 25", e.Source, e.Observed)
		}
		if e.Calibration.Probes != want[e.Address] || tg.got[e.Address].Probes != want[e.Address] {
			t.Errorf("%s (%s, %d samples, %d observed): asks for %d probes (published %d), want %d", e.Address, e.Source, e.Calibration.Samples, e.Observed, e.Calibration.Probes, tg.got[e.Address].Probes, want[e.Address])
		}
	}
}

// TestCalibratorPoolsTheDecodeSlope: a class publishes the median of its
// members' decode step lines. a:1, b:1 and c:1 (capacity 1) decode at
// 13 ms + s per sequence with s = 0.1, 0.3 and 0.2 ms, but c:1 always at
// the same batch, which identifies no slope (its own line keeps the
// prior's 70 µs and reads 13.13 ms + 70 µs); e:1 was sent nothing. The
// class publishes median(0.1, 0.3, 0.07) = 0.1 ms per sequence and
// median(13, 13, 13.13) = 13 ms for all four; d:1,
// of capacity 2, alone in its class, publishes its own 13 ms + 0.4 ms.
func TestCalibratorPoolsTheDecodeSlope(t *testing.T) {
	tg := newCalTarget(scheduler.Endpoint{Address: "a:1"}, scheduler.Endpoint{Address: "b:1"}, scheduler.Endpoint{Address: "c:1"}, scheduler.Endpoint{Address: "e:1"}, scheduler.Endpoint{Address: "d:1", Capacity: 2})
	c, err := NewCalibrator(DefaultCalibrationConfig(), tg, CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []struct {
		addr    string
		perSeq  float64
		batches int // in flight at the pick: i % batches (1: always 0)
	}{{"a:1", 0.0001, 8}, {"b:1", 0.0003, 8}, {"c:1", 0.0002, 1}, {"d:1", 0.0004, 8}} {
		for i := range 30 {
			o := obs(ep.addr, 1000, int64(i%ep.batches), 11)
			itl := 0.013 + ep.perSeq*float64(i%ep.batches+1)
			o.Latency = o.TTFT + time.Duration(itl*10*float64(time.Second))
			c.Ring().Record(o)
		}
	}
	c.Tick(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, want := range []struct {
		addr     string
		own, pub float64
	}{{"a:1", 0.0001, 0.0001}, {"b:1", 0.0003, 0.0001}, {"c:1", 70e-6, 0.0001}, {"e:1", 70e-6, 0.0001}, {"d:1", 0.0004, 0.0004}} {
		var e EndpointCalibration
		for _, x := range c.Snapshot().Endpoints {
			if x.Address == want.addr {
				e = x
			}
		}
		if math.Abs(e.Calibration.DecodeFixedSeconds-0.013) > 1e-9 {
			t.Errorf("%s: published fixed step %v, want 0.013", want.addr, e.Calibration.DecodeFixedSeconds)
		}
		if math.Abs(e.DecodeStepPerSeqSeconds-want.own) > 1e-9 || math.Abs(e.Calibration.DecodeSecondsPerSeq-want.pub) > 1e-9 || tg.got[want.addr].DecodeSecondsPerSeq != e.Calibration.DecodeSecondsPerSeq {
			t.Errorf("%s: own %v s per sequence, published %v (target got %v); want %v, %v",
				want.addr, e.DecodeStepPerSeqSeconds, e.Calibration.DecodeSecondsPerSeq, tg.got[want.addr].DecodeSecondsPerSeq, want.own, want.pub)
		}
	}
}

// TestCalibratorKeepsAnIdentifiedSlope: an endpoint whose batches
// differed learns its decode slope (0.45 ms per sequence over 1.6 ms);
// once routing evens its batches (every request alone) the window
// identifies none, and the slope it learned holds, the fixed part the
// median of what is left — not 0 per sequence and the whole step fixed,
// which would read a decode-bound engine as one whose batch costs nothing.
func TestCalibratorKeepsAnIdentifiedSlope(t *testing.T) {
	tg := newCalTarget(scheduler.Endpoint{Address: "a:1"})
	cfg := DefaultCalibrationConfig()
	c, err := NewCalibrator(cfg, tg, CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	const fixed, perSeq = 0.0016, 0.00045
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	feed := func(batches int) {
		for i := range cfg.Window {
			b := i % batches
			itl := fixed + perSeq*float64(b+1)
			o := obs("a:1", 1000, int64(b), 11)
			o.Latency = o.TTFT + time.Duration(itl*10*float64(time.Second))
			c.Ring().Record(o)
		}
		at = at.Add(cfg.MaxAge + time.Second) // the window holds only these
		c.Tick(at)
	}
	check := func(when string) {
		t.Helper()
		e := c.Snapshot().Endpoints[0]
		if math.Abs(e.Calibration.DecodeSecondsPerSeq-perSeq) > 1e-9 || math.Abs(e.Calibration.DecodeFixedSeconds-fixed) > 1e-9 {
			t.Errorf("%s: published %v s + %v s per sequence, want %v + %v", when, e.Calibration.DecodeFixedSeconds, e.Calibration.DecodeSecondsPerSeq, fixed, perSeq)
		}
	}
	feed(8)
	check("batches 1 to 8")
	feed(1)
	check("then every request alone")

}

// feedGroups records on c, from start, 60 groups of 1–4 requests a second
// apart, each group with the same arrival, prompt(g) and 11 output tokens,
// decoding together on "a:1" with nothing beside them, at the engine
// step fixed + perSeq·n + perCtx·n·(prompt + 5.5) (5.5: half the output,
// the context's mean over the decode), then ticks once the window holds
// only these and returns the next start.
func feedGroups(c *Calibrator, start time.Time, fixed, perSeq, perCtx float64, prompt func(g int) int64) time.Time {
	return feedSized(c, start, fixed, perSeq, perCtx, func(g int) int { return 1 + g%4 }, prompt)
}

// feedSized is feedGroups with group g of size(g) requests.
func feedSized(c *Calibrator, start time.Time, fixed, perSeq, perCtx float64, size func(g int) int, prompt func(g int) int64) time.Time {
	for g := range 60 {
		n := size(g)
		p := prompt(g)
		itl := fixed + perSeq*float64(n) + perCtx*float64(n)*(float64(p)+5.5)
		for range n {
			o := obs("a:1", p, int64(n-1), 11)
			o.Arrival = start.Add(time.Duration(g) * time.Second)
			o.Latency = o.TTFT + time.Duration(itl*10*float64(time.Second))
			c.Ring().Record(o)
		}
	}
	max := c.cfg.MaxAge
	c.Tick(start.Add(max - time.Second))
	return start.Add(2*max + time.Minute)
}

// TestCalibratorKeepsAnIdentifiedContextTerm: before any window
// identifies the engine's cost per context token, the context is charged
// to the sequence — and the batch cost's per-sequence seconds take the
// prior's cost per context token at that context out of it; a window
// whose contexts spread identifies it; a later one whose requests all
// carry the same context keeps it (and so reads the per-sequence term
// right, and the batch cost's seconds are that term).
func TestCalibratorKeepsAnIdentifiedContextTerm(t *testing.T) {
	cfg := DefaultCalibrationConfig()
	c, err := NewCalibrator(cfg, newCalTarget(scheduler.Endpoint{Address: "a:1"}), CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	const fixed, perSeq, perCtx = 0.0016, 0.00045, 17e-9
	check := func(when string, identified bool, wantSeq, wantCtx, wantBatch float64) {
		t.Helper()
		e := c.Snapshot().Endpoints[0]
		got := e.Calibration
		if e.ContextIdentified != identified || math.Abs(got.EngineDecodeSecondsPerContextToken-wantCtx) > 0.01*perCtx ||
			math.Abs(got.EngineDecodeSecondsPerSeq/wantSeq-1) > 0.01 || math.Abs(got.EngineDecodeFixedSeconds/fixed-1) > 0.01 {
			t.Errorf("%s: identified %v, published %v s + %v s per sequence + %v s per context token; want %v, %v + %v + %v",
				when, e.ContextIdentified, got.EngineDecodeFixedSeconds, got.EngineDecodeSecondsPerSeq, got.EngineDecodeSecondsPerContextToken,
				identified, fixed, wantSeq, wantCtx)
		}
		if math.Abs(got.EngineDecodeBatchSeconds/wantBatch-1) > 0.01 || e.EngineStepBatchSeconds != got.EngineDecodeBatchSeconds {
			t.Errorf("%s: batch cost's seconds per sequence %v (endpoint's %v), want %v", when, got.EngineDecodeBatchSeconds, e.EngineStepBatchSeconds, wantBatch)
		}
	}
	alike := func(int) int64 { return 2000 }
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at = feedGroups(c, at, fixed, perSeq, perCtx, alike)
	// 450 µs + 17 ns × 2,005.5 = 484 µs per sequence; less the prior's
	// 80 ns × 2,005.5 for the batch cost: 323.6 µs.
	prior := cfg.Prior.StepPerContextToken.Seconds()
	check("one context, none identified before: charged to the sequence", false, perSeq+perCtx*2005.5, 0, perSeq+(perCtx-prior)*2005.5)
	at = feedGroups(c, at, fixed, perSeq, perCtx, func(g int) int64 { return 500 + int64((g*7)%29)*120 })
	check("contexts that spread", true, perSeq, perCtx, perSeq)
	feedGroups(c, at, fixed, perSeq, perCtx, alike)
	check("then one context again", false, perSeq, perCtx, perSeq)

	// Batches that never differ identify no slope: the per-sequence term
	// is the prior's and holds no context (the fixed term took it), and
	// the batch cost reads it as it is.
	c, err = NewCalibrator(cfg, newCalTarget(scheduler.Endpoint{Address: "a:1"}), CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	feedSized(c, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), fixed, perSeq, perCtx, func(int) int { return 2 }, alike)
	e := c.Snapshot().Endpoints[0]
	if want := cfg.Prior.StepPerDecodeSeq.Seconds(); math.Abs(e.Calibration.EngineDecodeSecondsPerSeq/want-1) > 1e-6 || e.Calibration.EngineDecodeBatchSeconds != e.Calibration.EngineDecodeSecondsPerSeq {
		t.Errorf("alike batches: %v s per sequence (want the prior's %v), batch cost's %v (want the same)", e.Calibration.EngineDecodeSecondsPerSeq, want, e.Calibration.EngineDecodeBatchSeconds)
	}
}

func TestCalibrationConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(*CalibrationConfig)
		want string
	}{
		{func(c *CalibrationConfig) { c.Interval = 0 }, "calibration.interval"},
		{func(c *CalibrationConfig) { c.Window = 8 }, "calibration.window"},
		{func(c *CalibrationConfig) { c.MinSamples = 2000 }, "calibration.min_samples"},
		{func(c *CalibrationConfig) { c.Buffer = 1 }, "calibration.buffer"},
		{func(c *CalibrationConfig) { c.Prior.StepFixed = 0 }, "calibration.prior.step_fixed"},
	} {
		c := DefaultCalibrationConfig()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one naming %s", err, tc.want)
		}
	}
	if err := DefaultCalibrationConfig().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestCalibrationMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	tg := newCalTarget(scheduler.Endpoint{Address: "a:1", CacheBlockSize: 16, CacheBlocks: 1000}, scheduler.Endpoint{Address: "b:1", Capacity: 2, CacheBlockSize: 16, CacheBlocks: 2000})
	c, err := NewCalibrator(DefaultCalibrationConfig(), tg, CalibrationDeps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		c.Ring().Record(obs("a:1", int64(100*(i+1)), 0, 2))
	}
	c.Tick(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	want := `
# HELP trimtab_fleet_calibration_kv_capacity_tokens KV cache capacity the calibrator publishes for the endpoint, in tokens (scraped cache_config_info, else the prior).
# TYPE trimtab_fleet_calibration_kv_capacity_tokens gauge
trimtab_fleet_calibration_kv_capacity_tokens{endpoint="a:1"} 16000
trimtab_fleet_calibration_kv_capacity_tokens{endpoint="b:1"} 32000
# HELP trimtab_fleet_calibration_samples Observations the endpoint's prefill estimate rests on (0: the prior alone).
# TYPE trimtab_fleet_calibration_samples gauge
trimtab_fleet_calibration_samples{endpoint="a:1"} 40
trimtab_fleet_calibration_samples{endpoint="b:1"} 0
# HELP trimtab_fleet_calibration_probes_wanted Requests the calibrator last asked the scheduler to send the endpoint as probes (scheduler.probe): its share of what its class lacks of min_samples prefill points (0: none).
# TYPE trimtab_fleet_calibration_probes_wanted gauge
trimtab_fleet_calibration_probes_wanted{endpoint="a:1"} 0
trimtab_fleet_calibration_probes_wanted{endpoint="b:1"} 20
# HELP trimtab_fleet_calibration_observations_total Finished requests the request path recorded for the calibrator.
# TYPE trimtab_fleet_calibration_observations_total counter
trimtab_fleet_calibration_observations_total 40
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "trimtab_fleet_calibration_kv_capacity_tokens", "trimtab_fleet_calibration_samples", "trimtab_fleet_calibration_probes_wanted", "trimtab_fleet_calibration_observations_total"); err != nil {
		t.Error(err)
	}
	// The prefill throughput: 10,000 up to the nanosecond rounding of the
	// observed times.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "trimtab_fleet_calibration_prefill_tokens_per_second" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() != "a:1" {
					continue
				}
				found = true
				if v := m.GetGauge().GetValue(); math.Abs(v/10000-1) > 1e-9 {
					t.Errorf("prefill_tokens_per_second %v, want 10,000", v)
				}
			}
		}
	}
	if !found {
		t.Error("no trimtab_fleet_calibration_prefill_tokens_per_second")
	}
}

func TestEngineFileReproducesTheLearnedThroughput(t *testing.T) {
	tg := newCalTarget(scheduler.Endpoint{Address: "a:1", CacheBlockSize: 16, CacheBlocks: 1000})
	c, err := NewCalibrator(DefaultCalibrationConfig(), tg, CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		c.Ring().Record(obs("a:1", int64(100*(i+1)), int64(i%8), 11))
	}
	c.Tick(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var f map[string]string
	if err := yaml.Unmarshal(c.EngineFile(), &f); err != nil {
		t.Fatalf("%v\n%s", err, c.EngineFile())
	}
	d := func(k string) float64 {
		v, err := time.ParseDuration(f[k])
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		return v.Seconds()
	}
	keys := []string{"block_size", "num_blocks", "max_num_seqs", "max_batched_tokens", "step_fixed", "step_per_prefill_token", "step_per_decode_seq", "step_per_context_token", "prefill_attention_per_1k"}
	if len(f) != len(keys) {
		t.Errorf("keys %v, want exactly %v", f, keys)
	}
	// num_blocks 1,000 scraped; prefill at the mean prompt (100…4,000,
	// mean 2,050): B / (fixed + B·(per_token + attention·(2,050−1)/2,000))
	// must give back the learned 10,000 tokens/s.
	if f["num_blocks"] != "1000" || f["block_size"] != "16" {
		t.Errorf("blocks %s × %s, want 1000 × 16", f["num_blocks"], f["block_size"])
	}
	b := 2048.0
	r := b / (d("step_fixed") + b*(d("step_per_prefill_token")+d("prefill_attention_per_1k")*(2050-1)/2000))
	if math.Abs(r/10000-1) > 1e-3 {
		t.Errorf("the file's engine prefills %.0f tokens/s, want the learned 10,000\n%s", r, c.EngineFile())
	}
	// Decode: these observations carry no arrival time, so no decode
	// span and no engine line: the prior's 13 ms, 70 µs, 80 ns.
	if f["step_fixed"] != "13000000ns" || f["step_per_decode_seq"] != "70000ns" || f["step_per_context_token"] != "80ns" {
		t.Errorf("step_fixed %s, step_per_decode_seq %s, step_per_context_token %s; want the prior's 13 ms, 70 µs, 80 ns",
			f["step_fixed"], f["step_per_decode_seq"], f["step_per_context_token"])
	}
	// With an engine line, the file carries it.
	c2, err := NewCalibrator(DefaultCalibrationConfig(), newCalTarget(scheduler.Endpoint{Address: "a:1"}), CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	feedGroups(c2, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 0.002, 0.0004, 17e-9, func(g int) int64 { return 500 + int64((g*7)%29)*120 })
	if err := yaml.Unmarshal(c2.EngineFile(), &f); err != nil {
		t.Fatal(err)
	}
	if math.Abs(d("step_fixed")/0.002-1) > 0.01 || math.Abs(d("step_per_decode_seq")/0.0004-1) > 0.01 || math.Abs(d("step_per_context_token")/17e-9-1) > 0.1 {
		t.Errorf("step_fixed %s, step_per_decode_seq %s, step_per_context_token %s; want the engine line's 2 ms, 400 µs, 17 ns",
			f["step_fixed"], f["step_per_decode_seq"], f["step_per_context_token"])
	}
}

// TestDecodeBeside: the batch, the context it attended to and the prefill
// beside a decode, by hand.
func TestDecodeBeside(t *testing.T) {
	a := span{from: 0, to: 10, prompt: 100, out: 11, pick: -2, own: 100}
	b := span{from: 5, to: 15, prompt: 200, out: 11, pick: 3, own: 50}
	c := span{from: 12, to: 20, prompt: 300, out: 9, pick: 8, own: 40}
	all := []span{a, b, c}
	batch, ctx, pre := decodeBeside(all, a)
	// Batch: 10 + 5 over 10 (c decodes after a). Context: a over [0, 10]
	// at its midpoint (100 + 11·5/10) for 10 s, b over [5, 10] at
	// (200 + 11·2.5/10) for 5 s, over 10 s. Prefill: b's 50 tokens over
	// [3, 5], all in a's decode; c's 40 over [8, 12], half in it.
	if want := 1.5; math.Abs(batch-want) > 1e-12 {
		t.Errorf("batch %v, want %v", batch, want)
	}
	if want := (105.5*10 + 202.75*5) / 10; math.Abs(ctx-want) > 1e-9 {
		t.Errorf("context %v, want %v", ctx, want)
	}
	if want := 70.0; math.Abs(pre-want) > 1e-12 {
		t.Errorf("prefill beside a %v, want %v", pre, want)
	}
	// b's decode [5, 15]: all of c's prefill; a's ended before it.
	if _, _, pre := decodeBeside(all, b); math.Abs(pre-40) > 1e-12 {
		t.Errorf("prefill beside b %v, want 40", pre)
	}
	// A decode of no length: alone, at its prompt, nothing beside.
	if batch, ctx, pre := decodeBeside(all, span{from: 3, to: 3, prompt: 7}); batch != 1 || ctx != 7 || pre != 0 {
		t.Errorf("empty decode: %v, %v, %v; want 1, 7, 0", batch, ctx, pre)
	}
}

// TestEngineLine: the engine's three terms from decodes whose context per
// sequence spreads, through a tenth of outliers; with contexts alike, the
// known context term and the line of the rest.
func TestEngineLine(t *testing.T) {
	c, err := NewCalibrator(DefaultCalibrationConfig(), newCalTarget(), CalibrationDeps{})
	if err != nil {
		t.Fatal(err)
	}
	truth := engineTerms{fixed: 0.0016, perSeq: 453e-6, perCtx: 17e-9}
	known := engineTerms{fixed: 0.013, perSeq: 70e-6, perCtx: 80e-9}
	gen := func(spreads bool) (bd, cx, y []float64) {
		for i := range 96 {
			b := 1 + float64(i%17)
			k := 2000.0
			if spreads {
				k = 500 + float64((i*7)%29)*120
			}
			v := truth.fixed + truth.perSeq*b + truth.perCtx*b*k
			if i%10 == 3 {
				v += 0.05 // a step shared with a long prefill
			}
			bd, cx, y = append(bd, b), append(cx, b*k), append(y, v)
		}
		return
	}
	bd, cx, y := gen(true)
	got, ok, _ := c.engineLine(bd, cx, y, known, 10)
	if !ok {
		t.Fatal("contexts spread, but the context term was not identified")
	}
	for _, p := range []struct {
		name      string
		got, want float64
	}{{"fixed", got.fixed, truth.fixed}, {"per sequence", got.perSeq, truth.perSeq}, {"per context token", got.perCtx, truth.perCtx}} {
		if math.Abs(p.got/p.want-1) > 0.01 {
			t.Errorf("%s %g, want %g within 1 %%", p.name, p.got, p.want)
		}
	}
	// Alike contexts: the known 80 ns per token, and per sequence what
	// the rest leaves, 453 µs + (17 − 80) ns × 2,000.
	bd, cx, y = gen(false)
	got, ok, seqOK := c.engineLine(bd, cx, y, known, 10)
	if ok || got.perCtx != known.perCtx || !seqOK {
		t.Errorf("alike contexts: context identified %v, per context token %g, slope identified %v; want the known %g and the batches' slope", ok, got.perCtx, seqOK, known.perCtx)
	}
	if want := truth.perSeq + (truth.perCtx-known.perCtx)*2000; math.Abs(got.perSeq/want-1) > 0.01 || math.Abs(got.fixed/truth.fixed-1) > 0.01 {
		t.Errorf("alike contexts: %g + %g per sequence, want %g + %g", got.fixed, got.perSeq, truth.fixed, want)
	}
}
