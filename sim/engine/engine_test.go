package engine

import (
	"errors"
	"testing"
	"time"
)

// testConfig is a tiny engine with round numbers: 4-token blocks, a step
// of 10 ms + 1 ms per prefill token + 2 ms per decode sequence + 0.1 ms per
// context token.
func testConfig() Config {
	return Config{
		BlockSize:           4,
		NumBlocks:           64,
		MaxNumSeqs:          8,
		MaxBatchedTokens:    100,
		StepFixed:           10 * time.Millisecond,
		StepPerPrefillToken: time.Millisecond,
		StepPerDecodeSeq:    2 * time.Millisecond,
		StepPerContextToken: 100 * time.Microsecond,
		PrefixCaching:       true,
	}
}

func mustNew(t *testing.T, c Config) *Engine {
	t.Helper()
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// seq makes a sequence whose block i hashes to base+i.
func seq(id uint64, base uint64, prompt, output int, blockSize int) *Seq {
	s := &Seq{ID: id, PromptTokens: prompt, OutputTokens: output}
	for i := 0; i < (prompt+output)/blockSize; i++ {
		s.Hashes = append(s.Hashes, base+uint64(i))
	}
	return s
}

// drive runs the engine until idle, returning the step durations and the
// events in order.
func drive(t *testing.T, e *Engine) (steps []time.Duration, evs []Event) {
	t.Helper()
	var now time.Duration
	for n := 0; !e.Idle(); n++ {
		if n > 10000 {
			t.Fatal("engine does not finish")
		}
		d, ok := e.StartStep()
		if !ok {
			t.Fatal("work left but no step possible")
		}
		now += d
		steps = append(steps, d)
		e.FinishStep(now, func(ev Event) { evs = append(evs, ev) })
	}
	return steps, evs
}

func TestChunkedPrefillArithmetic(t *testing.T) {
	e := mustNew(t, testConfig())
	s := seq(1, 100, 250, 3, 4)
	if err := e.Add(s); err != nil {
		t.Fatal(err)
	}
	steps, evs := drive(t, e)
	want := []time.Duration{
		110 * time.Millisecond, // 10 + 100 prefill tokens × 1
		110 * time.Millisecond, // 10 + 100
		60 * time.Millisecond,  // 10 + 50: prompt done, first token
		// decode 1 attends to the 250 computed tokens:
		// 10 + 2 (one sequence) + 250 × 0.1 = 37
		37 * time.Millisecond,
		// decode 2: 10 + 2 + 251 × 0.1 = 37.1
		37100 * time.Microsecond,
	}
	if len(steps) != len(want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	for i := range want {
		if steps[i] != want[i] {
			t.Errorf("step %d = %v, want %v", i, steps[i], want[i])
		}
	}
	if s.FirstTokenAt != 280*time.Millisecond { // 110 + 110 + 60
		t.Errorf("first token at %v, want 280ms", s.FirstTokenAt)
	}
	if len(evs) != 2 || evs[0].Kind != EventFirstToken || evs[1].Kind != EventFinished {
		t.Errorf("events %+v, want first token then finished", evs)
	}
	if st := e.Stats(); st.GenerationTokens != 3 || st.PromptTokens != 250 || st.KVUtil != 0 {
		t.Errorf("stats %+v: want 3 generated, 250 prompt tokens, KV empty", st)
	}
}

func TestTokenBudgetSharedWithDecodes(t *testing.T) {
	c := testConfig()
	c.MaxBatchedTokens = 10
	e := mustNew(t, c)
	a := seq(1, 100, 4, 5, 4)
	if err := e.Add(a); err != nil {
		t.Fatal(err)
	}
	d, _ := e.StartStep() // a prefills 4 tokens: 10 + 4 = 14 ms
	e.FinishStep(d, func(Event) {})
	b := seq(2, 200, 40, 1, 4)
	if err := e.Add(b); err != nil {
		t.Fatal(err)
	}
	// a decodes (1 token of the budget), b gets the other 9 tokens:
	// 10 + 9 × 1 + 2 + 4 context × 0.1 = 21.4 ms.
	d, _ = e.StartStep()
	if d != 21400*time.Microsecond {
		t.Errorf("mixed step = %v, want 21.4ms", d)
	}
	e.FinishStep(d, func(Event) {})
	if b.computed != 9 {
		t.Errorf("b computed %d tokens, want 9", b.computed)
	}
}

func TestPrefixCacheReuse(t *testing.T) {
	e := mustNew(t, testConfig())
	a := seq(1, 100, 20, 2, 4) // 5 prompt blocks: hashes 100…104
	if err := e.Add(a); err != nil {
		t.Fatal(err)
	}
	drive(t, e)
	if a.CachedTokens != 0 {
		t.Errorf("cold cache: %d cached tokens, want 0", a.CachedTokens)
	}
	tests := []struct {
		name   string
		s      *Seq
		cached int
	}{
		// Same first 3 blocks then different ones: 3 blocks × 4 = 12.
		{"shared prefix", func() *Seq {
			s := seq(2, 100, 24, 1, 4)
			s.Hashes[3], s.Hashes[4], s.Hashes[5] = 900, 901, 902
			return s
		}(), 12},
		// Identical 20-token prompt: at most (20 − 1) / 4 = 4 blocks = 16,
		// one token is always recomputed.
		{"identical prompt", seq(3, 100, 20, 1, 4), 16},
		// A prompt that differs in the first block shares nothing even if
		// later hashes repeat (chained hashes make this impossible in
		// practice; the engine stops at the first miss).
		{"first block differs", func() *Seq {
			s := seq(4, 100, 20, 1, 4)
			s.Hashes[0] = 999
			return s
		}(), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := e.Add(tt.s); err != nil {
				t.Fatal(err)
			}
			drive(t, e)
			if tt.s.CachedTokens != tt.cached {
				t.Errorf("cached %d tokens, want %d", tt.s.CachedTokens, tt.cached)
			}
		})
	}
	st := e.Stats()
	// Queried 20 + 24 + 20 + 20 = 84 prompt tokens, hit 0 + 12 + 16 + 0.
	if st.PrefixQueries != 84 || st.PrefixHits != 28 {
		t.Errorf("prefix counters %d/%d, want 28/84", st.PrefixHits, st.PrefixQueries)
	}
	if st.KVUtil != 0 {
		t.Errorf("KV util %v after all finished, want 0 (cached blocks count as free)", st.KVUtil)
	}
}

func TestPrefixCacheLRUEviction(t *testing.T) {
	c := testConfig()
	c.NumBlocks = 8
	e := mustNew(t, c)
	a := seq(1, 100, 16, 1, 4) // 4 blocks cached after it finishes
	if err := e.Add(a); err != nil {
		t.Fatal(err)
	}
	drive(t, e)
	// b needs all 8 blocks (28 prompt + 4 output tokens): every cached
	// block of a is evicted.
	b := seq(2, 500, 28, 4, 4)
	if err := e.Add(b); err != nil {
		t.Fatal(err)
	}
	drive(t, e)
	again := seq(3, 100, 16, 1, 4)
	if err := e.Add(again); err != nil {
		t.Fatal(err)
	}
	drive(t, e)
	if again.CachedTokens != 0 {
		t.Errorf("after eviction %d cached tokens, want 0", again.CachedTokens)
	}
}

func TestPreemptionByRecompute(t *testing.T) {
	c := testConfig()
	c.NumBlocks = 6 // 24 tokens
	e := mustNew(t, c)
	// Each needs 8 prompt + 8 output = 4 blocks at the end; both fit at
	// the start (2 blocks each + 1 for the first decode) but not at the end.
	a := seq(1, 100, 8, 8, 4)
	b := seq(2, 200, 8, 8, 4)
	for _, s := range []*Seq{a, b} {
		if err := e.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	_, evs := drive(t, e)
	if b.Preemptions == 0 {
		t.Errorf("b was never preempted; the cache cannot hold both")
	}
	if a.Preemptions != 0 {
		t.Errorf("a (admitted first) was preempted %d times; the newest goes first", a.Preemptions)
	}
	finished := 0
	for _, ev := range evs {
		if ev.Kind == EventFinished {
			finished++
		}
	}
	if finished != 2 || a.Generated != 8 || b.Generated != 8 {
		t.Errorf("finished %d, generated %d and %d; want both done with 8 tokens", finished, a.Generated, b.Generated)
	}
	if st := e.Stats(); st.Preemptions != int64(b.Preemptions) || st.KVUtil != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestMaxNumSeqsAndFIFO(t *testing.T) {
	c := testConfig()
	c.MaxNumSeqs = 2
	e := mustNew(t, c)
	ss := []*Seq{seq(1, 100, 4, 2, 4), seq(2, 200, 4, 2, 4), seq(3, 300, 4, 2, 4)}
	for _, s := range ss {
		if err := e.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := e.StartStep()
	if st := e.Stats(); st.Running != 2 || st.Waiting != 1 {
		t.Fatalf("running %d waiting %d, want 2 and 1", st.Running, st.Waiting)
	}
	e.FinishStep(d, func(Event) {})
	drive(t, e)
	if !(ss[0].FirstTokenAt == ss[1].FirstTokenAt && ss[2].FirstTokenAt > ss[1].FirstTokenAt) {
		t.Errorf("first tokens %v %v %v: the third should wait its turn", ss[0].FirstTokenAt, ss[1].FirstTokenAt, ss[2].FirstTokenAt)
	}
}

func TestAddRejects(t *testing.T) {
	e := mustNew(t, testConfig())
	long := seq(1, 1, 64*4, 8, 4) // 66 blocks > 64
	if err := e.Add(long); !errors.Is(err, ErrTooLong) {
		t.Errorf("Add(too long) = %v, want ErrTooLong", err)
	}
	if err := e.Add(&Seq{PromptTokens: 0, OutputTokens: 1}); err == nil {
		t.Error("Add(empty prompt) succeeded")
	}
	s := seq(2, 1, 4, 1, 4)
	if err := e.Add(s); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(s); err == nil {
		t.Error("Add(same sequence twice) succeeded")
	}
}

func TestAbort(t *testing.T) {
	e := mustNew(t, testConfig())
	a, b := seq(1, 100, 40, 50, 4), seq(2, 200, 40, 50, 4)
	for _, s := range []*Seq{a, b} {
		if err := e.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := e.StartStep()
	e.Abort(a) // during the step: the step must ignore it
	var evs []Event
	e.FinishStep(d, func(ev Event) { evs = append(evs, ev) })
	for _, ev := range evs {
		if ev.Seq == a {
			t.Errorf("aborted sequence got event %v", ev.Kind)
		}
	}
	e.Abort(b)
	e.Abort(b) // twice: no-op
	if !e.Idle() || e.Stats().KVUtil != 0 {
		t.Errorf("after aborting everything: idle %v, KV %v", e.Idle(), e.Stats().KVUtil)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"block size", func(c *Config) { c.BlockSize = 0 }, "engine.block_size: must be > 0"},
		{"blocks", func(c *Config) { c.NumBlocks = -1 }, "engine.num_blocks: must be > 0"},
		{"seqs", func(c *Config) { c.MaxNumSeqs = 0 }, "engine.max_num_seqs: must be > 0"},
		{"budget", func(c *Config) { c.MaxBatchedTokens = 0 }, "engine.max_batched_tokens: must be > 0"},
		{"fixed", func(c *Config) { c.StepFixed = 0 }, "engine.step_fixed: must be > 0"},
		{"loras", func(c *Config) { c.MaxLoRAs = -1 }, "engine.max_loras: -1, must be in [0, 1024]"},
		{"cpu loras", func(c *Config) { c.MaxLoRAs, c.MaxCPULoRAs = 4, 2 }, "engine.max_cpu_loras: 2, must be 0 (max_loras) or in [max_loras, 1024]"},
		{"load", func(c *Config) { c.LoRALoadDisk = -time.Second }, "engine.lora_load_disk: -1s, must be ≥ 0"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mutate(&c)
		if err := c.Validate(); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

func TestHashBlocksChained(t *testing.T) {
	a := []byte("0123456789abcdefXXXXXXXXXXXXXXXX")
	b := []byte("0123456789abcdefYYYYYYYYYYYYYYYY")
	ha, hb := HashBlocks(nil, a, 16), HashBlocks(nil, b, 16)
	if len(ha) != 2 || ha[0] != hb[0] || ha[1] == hb[1] {
		t.Errorf("hashes %x %x: want a shared first block and different second", ha, hb)
	}
	if got := HashBlocks(nil, a[:31], 16); len(got) != 1 {
		t.Errorf("partial trailing block hashed: %d hashes, want 1", len(got))
	}
}

// BenchmarkStep measures one engine step (StartStep + FinishStep) with n
// sequences decoding 1,000-token contexts; finished sequences are replaced.
func BenchmarkStep(b *testing.B) {
	for _, n := range []int{8, 64, 256} {
		b.Run("running="+itoa(n), func(b *testing.B) {
			e, _ := New(DefaultConfig())
			var done []*Seq
			for i := range n {
				_ = e.Add(seq(uint64(i), uint64(i)<<20, 1000, 200, 16))
			}
			collect := func(ev Event) {
				if ev.Kind == EventFinished {
					done = append(done, ev.Seq)
				}
			}
			b.ReportAllocs()
			var now time.Duration
			for b.Loop() {
				d, _ := e.StartStep()
				now += d
				e.FinishStep(now, collect)
				for _, s := range done {
					s.Reset()
					s.PromptTokens, s.OutputTokens = 1000, 200
					_ = e.Add(s)
				}
				done = done[:0]
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestPrefillAttentionTerm: with the attention term on, a prefill chunk of
// n tokens after c computed ones costs (n·c + n(n−1)/2) pairs × the
// per-1k cost on top of the flat per-token cost, so later chunks of a
// long prompt cost more than the first.
func TestPrefillAttentionTerm(t *testing.T) {
	cfg := testConfig()
	cfg.PrefillAttentionPer1k = time.Millisecond // 1 µs per pair
	e := mustNew(t, cfg)
	if err := e.Add(seq(1, 100, 250, 1, 4)); err != nil {
		t.Fatal(err)
	}
	steps, _ := drive(t, e)
	want := []time.Duration{
		110*time.Millisecond + 4950*time.Microsecond,  // pairs 0 + 100·99/2 = 4950
		110*time.Millisecond + 14950*time.Microsecond, // 100·100 + 4950
		60*time.Millisecond + 11225*time.Microsecond,  // 50·200 + 50·49/2 = 11225
	}
	if len(steps) != len(want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	for i := range want {
		if steps[i] != want[i] {
			t.Errorf("step %d = %v, want %v", i, steps[i], want[i])
		}
	}
}
