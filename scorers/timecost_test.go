package scorers

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// timeRig is a real scheduler over a:1 (capacity 1), b:1 (capacity 2) and
// c:1 (capacity 1, calibrated at 4,000 tokens/s and 2 ms a step), a
// prefix scorer learning at the pick (4-token blocks of 4 bytes; weight
// 0, the index alone) and the time-cost scorer (weight 1) with round
// priors: 1,000 tokens/s, 10 ms a step, 1 ms per running request per
// 8-token chunk.
func timeRig(t *testing.T, bRunning float64) (*scheduler.Scheduler, *TimeCost) {
	t.Helper()
	pool := scorertest.Eps("a:1", "b:1", "c:1")
	pool[1].Capacity, pool[1].Running = 2, bRunning
	s, tc := timePool(t, TimeCostConfig{PrefillTokensPerSecond: 1000, StepSeconds: 0.01, DecodeSecondsPerRunning: 0.001, ChunkTokens: 8, BytesPerToken: 4}, 0, pool)
	s.SetCalibration("c:1", scheduler.Calibration{PrefillTokensPerSecond: 4000, DecodeStepSeconds: 0.002, Samples: 10})
	return s, tc
}

// timePool is a real scheduler over pool with a prefix scorer learning at
// the pick (4-token blocks of 4 bytes) at weight prefixWeight and the
// time-cost scorer of cfg at weight 1.
func timePool(t *testing.T, cfg TimeCostConfig, prefixWeight float64, pool []scheduler.Endpoint) (*scheduler.Scheduler, *TimeCost) {
	t.Helper()
	pcfg := prefix.DefaultConfig()
	pcfg.BlockSize, pcfg.Learn = 4, prefix.LearnPick
	p, err := prefix.New("prefix", pcfg, prefix.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := NewTimeCost("time-cost", cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{
		{Name: "prefix", Type: TypePrefix, Scorer: p, Weight: prefixWeight},
		{Name: "time-cost", Type: TypeTimeCost, Scorer: tc, Weight: 1},
	}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(pool)
	return s, tc
}

// TestTimeCostScores: hand-computed seconds and scores. P (16 tokens) is
// held on a:1 (16 uncached tokens pending there, its 4 blocks indexed);
// then R (shares P's first 12 tokens) is scored.
func TestTimeCostScores(t *testing.T) {
	for _, tc := range []struct {
		name     string
		running  float64 // b:1's scraped running requests
		release  bool    // P's first byte arrived before R
		seconds  map[string]float64
		scores   map[string]float64
		choosing string
	}{
		// a: 0.01 + (16 queued + 4 uncached)/1000 = 0.030.
		// b: rate 2 × 1000, step 0.01 × ½: 0.005 + 16/2000 = 0.013.
		// c: calibrated 0.002 + 16/4000 = 0.006.
		// Scores min/cost: a 0.006/0.030 = 0.2, b 0.006/0.013, c 1.
		{"held", 0, false, map[string]float64{"a:1": 0.030, "b:1": 0.013, "c:1": 0.006}, map[string]float64{"a:1": 0.2, "b:1": 0.006 / 0.013, "c:1": 1}, "c:1"},
		// b runs 3 decodes: ⌈16/8⌉ = 2 chunks × 3 × 0.001 × ½ = 0.003 more:
		// b 0.016, score 0.006/0.016 = 0.375.
		{"held, b decoding", 3, false, map[string]float64{"a:1": 0.030, "b:1": 0.016, "c:1": 0.006}, map[string]float64{"a:1": 0.2, "b:1": 0.375, "c:1": 1}, "c:1"},
		// P released: a 0.01 + 4/1000 = 0.014; its cached 12 tokens save
		// exactly 12/1000 s against holding nothing (0.026).
		{"released", 0, true, map[string]float64{"a:1": 0.014, "b:1": 0.013, "c:1": 0.006}, map[string]float64{"a:1": 0.006 / 0.014, "b:1": 0.006 / 0.013, "c:1": 1}, "c:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := timeRig(t, tc.running)
			p, err := s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(promptP), Subset: []string{"a:1"}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.release {
				p.FirstByte()
			}
			d, err := s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(promptR)})
			if err != nil {
				t.Fatal(err)
			}
			x := d.Explain()
			for i, e := range d.Candidates() {
				sec, ok := d.Seconds(1, i)
				if !ok || math.Abs(sec-tc.seconds[e.Address]) > 1e-12 {
					t.Errorf("%s: %v seconds (ok %v), want %v", e.Address, sec, ok, tc.seconds[e.Address])
				}
				if got := x.Candidates[i].Seconds["time-cost"]; math.Abs(got-tc.seconds[e.Address]) > 1e-12 {
					t.Errorf("%s: explanation says %v seconds, want %v", e.Address, got, tc.seconds[e.Address])
				}
				if got := d.Score(1, i); math.Abs(got-tc.scores[e.Address]) > 1e-9 {
					t.Errorf("%s scored %v, want %v", e.Address, got, tc.scores[e.Address])
				}
			}
			if d.Endpoint.Address != tc.choosing {
				t.Errorf("chose %s, want %s", d.Endpoint.Address, tc.choosing)
			}
			d.Done(scheduler.Outcome{})
			p.Done(scheduler.Outcome{})
		})
	}
}

// TestTimeCostTradesAffinityForQueue: alone, the scorer sends R to the
// holder of its prefix while the prefix saves more seconds than the
// holder's queue adds, and elsewhere once it does not. Pool a:1 and b:1
// of capacity 1 (c:1 left out by the subset). P is held on a:1 and
// released (its 4 blocks indexed), then Q (16 tokens, shares nothing) is
// queued on a:1 k times: a costs 0.01 + (16k + 4)/1000, b 0.01 + 16/1000.
// k = 0: 0.014 < 0.026, a; k = 1: 0.030 > 0.026, b.
func TestTimeCostTradesAffinityForQueue(t *testing.T) {
	for k, want := range []string{"a:1", "b:1"} {
		s, _ := timeRig(t, 0)
		s.SetEndpoints(scorertest.Eps("a:1", "b:1", "c:1")) // b:1 back to capacity 1
		p, _ := s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(promptP), Subset: []string{"a:1"}})
		p.FirstByte()
		var held []*scheduler.Decision
		for range k {
			q, _ := s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(promptQ), Subset: []string{"a:1"}})
			held = append(held, q)
		}
		d, _ := s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(promptR), Subset: []string{"a:1", "b:1"}})
		if d.Endpoint.Address != want {
			t.Errorf("%d requests queued on the holder: R went to %s, want %s", k, d.Endpoint.Address, want)
		}
		d.Done(scheduler.Outcome{})
		for _, q := range append(held, p) {
			q.Done(scheduler.Outcome{})
		}
	}
}

// TestTimeCostCacheCredit: cache_credit c charges the request's own
// uncached tokens 1 + c times, c scaled by the loop's affinity share.
// Pool a:1, b:1 (capacity 1, priors 1,000 tokens/s, 10 ms a step, no
// running decodes); prefix (learning at the pick, weight 1, affinity)
// and time-cost (weight 1). P (16 tokens) is picked onto a:1 and has no
// first byte yet: 16 tokens queued there, its blocks counted from the
// pick. R shares P's first 12 tokens: 4 uncached on a:1, 16 on b:1.
// With c = 1 and weights v published against calm weights (1, 1), the
// scale is (v_prefix / Σv) ÷ (1/2):
//
//	v (1, 1):       scale 1    a 0.01 + (16 + 4 + 4)/1000    = 0.034
//	                           b 0.01 + (16 + 16)/1000       = 0.042
//	v (0.25, 0.75): scale 0.5  a 0.01 + (20 + 0.5·4)/1000    = 0.032
//	                           b 0.01 + (16 + 0.5·16)/1000   = 0.034
//	v (0.1, 0.9):   scale 0.2  a 0.01 + (20 + 0.2·4)/1000    = 0.0308
//	                           b 0.01 + (16 + 0.2·16)/1000   = 0.0292
//
// so the credit sends R to join P's prefill while calm and, once the loop
// has moved 80 % of the affinity share away, to the idle pod. c = 0 is
// the request's own wait: a 0.030, b 0.026, whatever the weights.
func TestTimeCostCacheCredit(t *testing.T) {
	for _, tc := range []struct {
		credit     float64
		prefix, tc float64 // published weights; calm is (1, 1)
		a, b       float64
	}{
		{1, 1, 1, 0.034, 0.042},
		{1, 0.25, 0.75, 0.032, 0.034},
		{1, 0.1, 0.9, 0.0308, 0.0292},
		{0, 1, 1, 0.030, 0.026},
		{0, 0.1, 0.9, 0.030, 0.026},
	} {
		t.Run(fmt.Sprintf("c=%v/w=%v,%v", tc.credit, tc.prefix, tc.tc), func(t *testing.T) {
			s := twoPods(t, TimeCostConfig{PrefillTokensPerSecond: 1000, StepSeconds: 0.01, DecodeSecondsPerRunning: 0.001, ChunkTokens: 8, BytesPerToken: 4, CacheCredit: tc.credit}, 1)
			if err := s.Publish(&scheduler.Weights{Version: 2, Values: []float64{tc.prefix, tc.tc}, Calm: []float64{1, 1}, Mode: "rebalance"}); err != nil {
				t.Fatal(err)
			}
			first, err := s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(promptP), Subset: []string{"a:1"}})
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(promptR)})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]float64{"a:1": tc.a, "b:1": tc.b}
			for i, e := range d.Candidates() {
				if sec, ok := d.Seconds(1, i); !ok || math.Abs(sec-want[e.Address]) > 1e-12 {
					t.Errorf("%s: %v seconds (ok %v), want %v", e.Address, sec, ok, want[e.Address])
				}
			}
			d.Done(scheduler.Outcome{})
			first.Done(scheduler.Outcome{})
		})
	}
}

// TestTimeCostDecodeCredit: with decode_credit d, each candidate pays the
// decode seconds it adds beyond the best candidate's, at the batch the
// request would join. Pool a:1 and b:1 (priors: 1,000 tokens/s, 10 ms a
// step, 1 ms per running request, 100 output tokens). Calibrated, b:1
// learned a step line of 4 ms + 2 ms per sequence and 31 output tokens
// (a:1 nothing): the request is priced at their mean, 31 tokens (30 after
// the first). P is held on a:1 and Q on b:1, both past their first byte
// (one request in flight on each); R shares P's first 12 tokens:
//
//	dec a = 30 · (0.010 + 0.001 · 2) = 0.36; dec b = 30 · (0.004 + 0.002 · 2) = 0.24
//	a: 0.01 + 4/1000  + d · (0.36 − 0.24) = 0.014 + 0.12·d
//	b: 0.01 + 16/1000 + 0                = 0.026
//
// so R joins its prefix on a below d = 0.1 and decodes on b above it.
// Uncalibrated, both pods run the prior's line at the same batch: their
// decode seconds are equal and cancel, and R joins its prefix at any d.
//
// batch_credit c charges the batch's part c more times, (out − 1) ·
// (d · fixed + (d + c) · per_seq · batch): with d = 0 and c = 1, dec a =
// 30 · 0.001 · 2 = 0.06 and dec b = 30 · 0.002 · 2 = 0.12, so b pays 0.06
// more (b's sequences cost twice a's); with d = 0.5 and c = 1, dec a = 30
// · (0.005 + 0.003) = 0.24 = dec b = 30 · (0.002 + 0.006): b's faster
// step no longer outweighs its costlier batch, and R joins its prefix.
func TestTimeCostDecodeCredit(t *testing.T) {
	for _, tc := range []struct {
		d, c       float64
		calibrated bool
		a, b       float64
		choosing   string
	}{
		{0, 0, true, 0.014, 0.026, "a:1"},
		{0.05, 0, true, 0.020, 0.026, "a:1"},
		{0.5, 0, true, 0.074, 0.026, "b:1"},
		{1, 0, true, 0.134, 0.026, "b:1"},
		{1, 0, false, 0.014, 0.026, "a:1"},
		{0, 1, true, 0.014, 0.086, "a:1"},
		{0.5, 1, true, 0.014, 0.026, "a:1"},
		{0, 1, false, 0.014, 0.026, "a:1"},
	} {
		t.Run(fmt.Sprintf("d=%v/c=%v/calibrated=%v", tc.d, tc.c, tc.calibrated), func(t *testing.T) {
			s := twoPods(t, TimeCostConfig{PrefillTokensPerSecond: 1000, StepSeconds: 0.01, DecodeSecondsPerRunning: 0.001, ChunkTokens: 8, BytesPerToken: 4, DecodeCredit: tc.d, BatchCredit: tc.c, OutputTokens: 100}, 0)
			if tc.calibrated {
				s.SetCalibration("b:1", scheduler.Calibration{PrefillTokensPerSecond: 1000, DecodeFixedSeconds: 0.004, DecodeSecondsPerSeq: 0.002, OutputTokens: 31, Samples: 10})
			}
			held := make([]*scheduler.Decision, 0, 2)
			for _, r := range []struct{ prompt, on string }{{promptP, "a:1"}, {promptQ, "b:1"}} {
				h, err := s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(r.prompt), Subset: []string{r.on}})
				if err != nil {
					t.Fatal(err)
				}
				h.FirstByte()
				held = append(held, h)
			}
			d, err := s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(promptR)})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]float64{"a:1": tc.a, "b:1": tc.b}
			for i, e := range d.Candidates() {
				if sec, ok := d.Seconds(1, i); !ok || math.Abs(sec-want[e.Address]) > 1e-12 {
					t.Errorf("%s: %v seconds (ok %v), want %v", e.Address, sec, ok, want[e.Address])
				}
			}
			if d.Endpoint.Address != tc.choosing {
				t.Errorf("chose %s, want %s", d.Endpoint.Address, tc.choosing)
			}
			d.Done(scheduler.Outcome{})
			for _, h := range held {
				h.Done(scheduler.Outcome{})
			}
		})
	}
}

// twoPods is timePool over a:1 and b:1 (capacity 1).
func twoPods(t *testing.T, cfg TimeCostConfig, prefixWeight float64) *scheduler.Scheduler {
	t.Helper()
	s, _ := timePool(t, cfg, prefixWeight, scorertest.Eps("a:1", "b:1"))
	return s
}

func TestTimeCostConfigValidate(t *testing.T) {
	ok := DefaultTimeCostConfig()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mut  func(*TimeCostConfig)
		want string
	}{
		{func(c *TimeCostConfig) { c.PrefillTokensPerSecond = 0 }, "time-cost.prefill_tokens_per_second"},
		{func(c *TimeCostConfig) { c.PrefillTokensPerSecond = math.NaN() }, "time-cost.prefill_tokens_per_second"},
		{func(c *TimeCostConfig) { c.StepSeconds = 0 }, "time-cost.step_seconds"},
		{func(c *TimeCostConfig) { c.DecodeSecondsPerRunning = -1 }, "time-cost.decode_seconds_per_running"},
		{func(c *TimeCostConfig) { c.ChunkTokens = 0 }, "time-cost.chunk_tokens"},
		{func(c *TimeCostConfig) { c.BytesPerToken = 65 }, "time-cost.bytes_per_token"},
		{func(c *TimeCostConfig) { c.CacheCredit = -0.5 }, "time-cost.cache_credit"},
		{func(c *TimeCostConfig) { c.CacheCredit = math.NaN() }, "time-cost.cache_credit"},
		{func(c *TimeCostConfig) { c.CacheCredit = 17 }, "time-cost.cache_credit"},
		{func(c *TimeCostConfig) { c.DecodeCredit = -1 }, "time-cost.decode_credit"},
		{func(c *TimeCostConfig) { c.DecodeCredit = math.NaN() }, "time-cost.decode_credit"},
		{func(c *TimeCostConfig) { c.OutputTokens, c.DecodeCredit = 0, 1 }, "time-cost.output_tokens"},
		{func(c *TimeCostConfig) { c.BatchCredit = -1 }, "time-cost.batch_credit"},
		{func(c *TimeCostConfig) { c.BatchCredit = 16.5 }, "time-cost.batch_credit"},
		{func(c *TimeCostConfig) { c.BatchCredit = math.NaN() }, "time-cost.batch_credit"},
		{func(c *TimeCostConfig) { c.OutputTokens, c.BatchCredit = 0, 4 }, "time-cost.output_tokens"},
		{func(c *TimeCostConfig) { c.OutputTokens = -3 }, "time-cost.output_tokens"},
		{func(c *TimeCostConfig) { c.OutputTokens = math.Inf(1) }, "time-cost.output_tokens"},
	} {
		c := DefaultTimeCostConfig()
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", c, err, tc.want)
		}
	}
}

// TestTimeCostPickAllocatesNothing: the prefix index and time-cost pick,
// explain-free, release at the first byte and finish without allocating.
func TestTimeCostPickAllocatesNothing(t *testing.T) {
	if scorertest.RaceEnabled {
		t.Skip("allocation counts need a build without -race (sync.Pool drops items at random under it)")
	}
	for _, d := range []float64{0, 1} {
		pickFirstByteAllocatesNothing(t, timeCostScheduler(t, scorertest.BenchEndpoints(64, 1), d, d > 0), "time-cost")
	}
}

// With trade set it also has the shipped profile's second time-cost,
// trade-cost (decode_credit 0.05), at weight 1: what the trade law's
// scorer adds to a pick.
func timeCostScheduler(tb testing.TB, pool []scheduler.Endpoint, decodeCredit float64, trade bool) *scheduler.Scheduler {
	tb.Helper()
	p, err := prefix.New("prefix", prefix.DefaultConfig(), prefix.Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	cfg := DefaultTimeCostConfig()
	cfg.DecodeCredit = decodeCredit
	tc, err := NewTimeCost("time-cost", cfg, Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	entries := []scheduler.ScorerEntry{
		{Name: "prefix", Scorer: p, Weight: 0},
		{Name: "time-cost", Scorer: tc, Weight: 1},
	}
	if trade {
		tcfg := DefaultTimeCostConfig()
		tcfg.CacheCredit, tcfg.DecodeCredit = 1, 0.05
		tr, err := NewTimeCost("trade-cost", tcfg, Deps{})
		if err != nil {
			tb.Fatal(err)
		}
		entries = append(entries, scheduler.ScorerEntry{Name: "trade-cost", Scorer: tr, Weight: 1})
	}
	s, err := scheduler.New(scheduler.DefaultConfig(), entries,
		[]scheduler.Filter{scheduler.ModelFilter{}, scheduler.HealthyFilter{}}, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	s.SetEndpoints(pool)
	for i, e := range pool {
		if i%2 == 0 {
			s.SetCalibration(e.Address, scheduler.Calibration{PrefillTokensPerSecond: 9000, DecodeStepSeconds: 0.02, DecodeFixedSeconds: 0.015, DecodeSecondsPerSeq: 1e-4, OutputTokens: 200, Samples: 50})
		}
	}
	return s
}

// BenchmarkPickTimeCost is BenchmarkPick for the time-cost composition:
// the prefix lookup before the filters, the time-cost scorer (half the
// endpoints calibrated), tokens released at the first byte; trade=on adds
// the shipped profile's trade-cost, which every pick scores.
func BenchmarkPickTimeCost(b *testing.B) {
	for _, n := range scorertest.BenchSizes.Endpoints {
		for _, trade := range []bool{false, true} {
			tok := 8 << 10
			b.Run(fmt.Sprintf("endpoints=%d/prompt=%dk/trade=%s", n, tok>>10, map[bool]string{false: "off", true: "on"}[trade]), func(b *testing.B) {
				s := timeCostScheduler(b, scorertest.BenchEndpoints(n, 1), 0, trade)
				scorertest.BenchPicks(b, s, scorertest.BenchWorkload(tok, 16, 8, 1024, 1))
			})
		}
	}
}
