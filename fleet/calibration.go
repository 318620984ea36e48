package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/scheduler"
)

// CalibrationConfig is the calibrator's settings (docs/calibration.md).
type CalibrationConfig struct {
	// Interval is how often the calibrator drains the observations,
	// re-estimates and publishes (> 0). Default 5s.
	Interval time.Duration `mapstructure:"interval"`
	// Window is how many observations it keeps per endpoint (16…4096):
	// the estimate follows the last Window requests. Default 128.
	Window int `mapstructure:"window"`
	// MinSamples is N: an estimate resting on n observations is blended
	// with the prior with weight min(1, n/N) (1…Window). Default 20.
	MinSamples int `mapstructure:"min_samples"`
	// MaxAge forgets observations older than this (> 0), so an endpoint
	// that changed (a new model, a new GPU) is relearned. Default 10m.
	MaxAge time.Duration `mapstructure:"max_age"`
	// Buffer is how many observations the request path may record between
	// two steps (64…1<<20); more are dropped and counted. Default 8192.
	Buffer int `mapstructure:"buffer"`
	// Prior is the engine assumed before anything is learned.
	Prior CalibrationPrior `mapstructure:"prior"`
}

// CalibrationPrior is the engine the calibrator assumes for an endpoint of
// capacity 1 until it has observed it, in the simulator's step model
// (sim/engine.Config, whose keys it shares): a step of a batch costs
// step_fixed + step_per_prefill_token·(prefill tokens) +
// step_per_decode_seq·(decoding sequences) + the attention terms, and
// carries at most max_batched_tokens tokens. An endpoint of capacity c is
// assumed c times as fast with c times the KV blocks (as the simulator
// scales it).
type CalibrationPrior struct {
	BlockSize             int           `mapstructure:"block_size"`
	NumBlocks             int           `mapstructure:"num_blocks"`
	MaxNumSeqs            int           `mapstructure:"max_num_seqs"`
	MaxBatchedTokens      int           `mapstructure:"max_batched_tokens"`
	StepFixed             time.Duration `mapstructure:"step_fixed"`
	StepPerPrefillToken   time.Duration `mapstructure:"step_per_prefill_token"`
	StepPerDecodeSeq      time.Duration `mapstructure:"step_per_decode_seq"`
	StepPerContextToken   time.Duration `mapstructure:"step_per_context_token"`
	PrefillAttentionPer1k time.Duration `mapstructure:"prefill_attention_per_1k"`
}

// DefaultCalibrationPrior returns the simulator's default engine,
// sim/engine.DefaultConfig (Llama-3.1-8B-Instruct bf16 on one
// A100-40GB, vLLM defaults; docs/benchmarks.md derives and cites every
// figure): 16-token blocks, 9,000 blocks, 256 sequences, 2,048-token
// steps, 13 ms + 70 µs per prefill token + 70 µs per decoding sequence,
// 80 ns per context token, 2.8 µs per prefill token per 1,000 tokens of
// context. A test in sim keeps the two equal.
func DefaultCalibrationPrior() CalibrationPrior {
	return CalibrationPrior{
		BlockSize:             16,
		NumBlocks:             9000,
		MaxNumSeqs:            256,
		MaxBatchedTokens:      2048,
		StepFixed:             13 * time.Millisecond,
		StepPerPrefillToken:   70 * time.Microsecond,
		StepPerDecodeSeq:      70 * time.Microsecond,
		StepPerContextToken:   80 * time.Nanosecond,
		PrefillAttentionPer1k: 2800 * time.Nanosecond,
	}
}

// PrefillTokensPerSecond is the prior's prefill throughput when busy
// prefilling: one full step of max_batched_tokens prompt tokens per
// step_fixed + max_batched_tokens·step_per_prefill_token (attention left
// out: it depends on the prompts).
func (p CalibrationPrior) PrefillTokensPerSecond() float64 {
	b := float64(p.MaxBatchedTokens)
	return b / (p.StepFixed.Seconds() + b*p.StepPerPrefillToken.Seconds())
}

// Validate checks the prior; errors name the field under prior.
func (p CalibrationPrior) Validate() error {
	switch {
	case p.BlockSize <= 0 || p.BlockSize > 1<<12:
		return fmt.Errorf("prior.block_size: %d, want 1…4096", p.BlockSize)
	case p.NumBlocks <= 0 || p.NumBlocks > 1<<26:
		return fmt.Errorf("prior.num_blocks: %d, want 1…%d", p.NumBlocks, 1<<26)
	case p.MaxNumSeqs <= 0 || p.MaxNumSeqs > 1<<16:
		return fmt.Errorf("prior.max_num_seqs: %d, want 1…65536", p.MaxNumSeqs)
	case p.MaxBatchedTokens <= 0 || p.MaxBatchedTokens > 1<<20:
		return fmt.Errorf("prior.max_batched_tokens: %d, want 1…%d", p.MaxBatchedTokens, 1<<20)
	case p.StepFixed <= 0 || p.StepFixed > time.Minute:
		return fmt.Errorf("prior.step_fixed: %v, want > 0 and ≤ 1m", p.StepFixed)
	case p.StepPerPrefillToken < 0 || p.StepPerDecodeSeq < 0 || p.StepPerContextToken < 0 || p.PrefillAttentionPer1k < 0:
		return errors.New("prior.step_per_*, prior.prefill_attention_per_1k: must be ≥ 0")
	}
	return nil
}

// DefaultCalibrationConfig returns the defaults: publish every 5s from the
// last 128 observations per endpoint, fully learned at 20, forgotten after
// 10m, 8,192 buffered, the default prior.
func DefaultCalibrationConfig() CalibrationConfig {
	return CalibrationConfig{Interval: 5 * time.Second, Window: 128, MinSamples: 20, MaxAge: 10 * time.Minute, Buffer: 8192, Prior: DefaultCalibrationPrior()}
}

// Validate checks the config; errors name the field.
func (c CalibrationConfig) Validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("calibration.interval: %v, want > 0", c.Interval)
	case c.Window < 16 || c.Window > 4096:
		return fmt.Errorf("calibration.window: %d, want 16…4096", c.Window)
	case c.MinSamples < 1 || c.MinSamples > c.Window:
		return fmt.Errorf("calibration.min_samples: %d, want 1…window (%d)", c.MinSamples, c.Window)
	case c.MaxAge <= 0:
		return fmt.Errorf("calibration.max_age: %v, want > 0", c.MaxAge)
	case c.Buffer < 64 || c.Buffer > 1<<20:
		return fmt.Errorf("calibration.buffer: %d, want 64…%d", c.Buffer, 1<<20)
	}
	if err := c.Prior.Validate(); err != nil {
		return fmt.Errorf("calibration.%w", err)
	}
	return nil
}

// CalibrationTarget is where a Calibrator reads the pool and publishes
// what it learned (a *scheduler.Scheduler).
type CalibrationTarget interface {
	Pool() *scheduler.Pool
	SetCalibration(addr string, c scheduler.Calibration)
}

// CalibrationDeps are the calibrator's collaborators; nil fields get the
// real clock, no metrics and discarded logs.
type CalibrationDeps struct {
	Clock      clock.WithTicker
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// EndpointCalibration is what the calibrator holds of one endpoint.
type EndpointCalibration struct {
	Address  string  `json:"address"`
	Name     string  `json:"name,omitempty"`
	Capacity float64 `json:"capacity"`
	// Calibration is what was published.
	Calibration scheduler.Calibration `json:"calibration"`
	// Source is "prior" (nothing observed), "blended" (fewer than
	// min_samples observations) or "learned".
	Source string `json:"source"`
	// PrefillSamples and DecodeSamples are the observations each estimate
	// rests on.
	PrefillSamples int `json:"prefill_samples"`
	DecodeSamples  int `json:"decode_samples"`
	// LearnedPrefillTokensPerSecond is the estimate from the observations
	// alone (0: none).
	LearnedPrefillTokensPerSecond float64 `json:"learned_prefill_tokens_per_second"`
	// DecodeStepFixedSeconds and DecodeStepPerSeqSeconds are the fitted
	// decode step line, step ≈ fixed + per_seq·batch (blended with the
	// prior like the rest).
	DecodeStepFixedSeconds  float64 `json:"decode_step_fixed_seconds"`
	DecodeStepPerSeqSeconds float64 `json:"decode_step_per_seq_seconds"`
	// Batch is the median batch (router in-flight at the pick, plus one)
	// of the recent observations.
	Batch float64 `json:"batch"`
	// UncachedShare is the share of prompt tokens the endpoint had to
	// compute, by what it reported (1 when it reported nothing).
	UncachedShare float64 `json:"uncached_share"`
	// MeanPromptTokens is the mean prompt of the recent observations.
	MeanPromptTokens float64 `json:"mean_prompt_tokens"`
	// Pooled says the published prefill throughput is its class's median
	// (endpoints of the same capacity and models).
	Pooled bool `json:"pooled"`
	// KVSource is "scraped" (vllm:cache_config_info) or "prior".
	KVSource  string `json:"kv_source"`
	BlockSize int    `json:"block_size"`

	priorR float64
}

// CalibrationSnapshot is the calibrator's state after a step; immutable.
type CalibrationSnapshot struct {
	At        time.Time             `json:"at"`
	Endpoints []EndpointCalibration `json:"endpoints"`
	// Observed and Dropped count observations since start: those the
	// request path recorded and those it dropped because the buffer was
	// full.
	Observed uint64 `json:"observed"`
	Dropped  uint64 `json:"dropped"`
	// MinSamples is the config's N.
	MinSamples int `json:"min_samples"`
}

// Calibrator learns each endpoint's prefill throughput, decode step cost
// and KV capacity from the Observations the scheduler records of finished
// requests, and publishes them with SetCalibration. Step is a pure
// function of (now, pool, observations) and owns the estimator state;
// Tick drains the ring and publishes; Run calls Tick every Interval.
// Tick and Step must not run concurrently with each other; Snapshot,
// EngineFile and the metrics are safe at any time.
type Calibrator struct {
	cfg    CalibrationConfig
	target CalibrationTarget
	clk    clock.WithTicker
	log    *slog.Logger
	ring   *scheduler.ObservationRing

	eps     map[string]*epCal
	spare   []scheduler.Observation
	scratch []float64 // Theil–Sen slopes
	used    []bool    // Theil–Sen: samples in a pair
	snap    atomic.Pointer[CalibrationSnapshot]
	mu      sync.Mutex // serialises Tick
}

// NewCalibrator builds a calibrator publishing to target. The caller
// connects the request path with target's ObserveInto(c.Ring()).
func NewCalibrator(cfg CalibrationConfig, target CalibrationTarget, deps CalibrationDeps) (*Calibrator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if target == nil {
		return nil, errors.New("calibration: no target")
	}
	c := &Calibrator{
		cfg:     cfg,
		target:  target,
		clk:     deps.Clock,
		log:     deps.Logger,
		ring:    scheduler.NewObservationRing(cfg.Buffer),
		eps:     map[string]*epCal{},
		scratch: make([]float64, 0, cfg.Window*(cfg.Window-1)/2),
	}
	if c.clk == nil {
		c.clk = clock.RealClock{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.snap.Store(&CalibrationSnapshot{MinSamples: cfg.MinSamples})
	if deps.Registerer != nil {
		deps.Registerer.MustRegister(&calCollector{c: c})
	}
	return c, nil
}

// Ring returns the buffer the scheduler records observations into.
func (c *Calibrator) Ring() *scheduler.ObservationRing { return c.ring }

// Interval returns the config's Interval.
func (c *Calibrator) Interval() time.Duration { return c.cfg.Interval }

// Snapshot returns the state after the last step.
func (c *Calibrator) Snapshot() *CalibrationSnapshot { return c.snap.Load() }

// Run calls Tick every Interval on the injected clock until ctx ends.
func (c *Calibrator) Run(ctx context.Context) error {
	t := c.clk.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C():
			c.Tick(now)
		}
	}
}

// Tick drains the observations recorded since the last tick, steps the
// estimator and publishes every pool endpoint's calibration.
func (c *Calibrator) Tick(now time.Time) *CalibrationSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	obs := c.ring.Drain(c.spare)
	snap := c.Step(now, c.target.Pool().Pointers(), obs)
	c.spare = obs
	for _, e := range snap.Endpoints {
		c.target.SetCalibration(e.Address, e.Calibration)
	}
	return snap
}

// sample is one observation as the estimator keeps it.
type sample struct {
	at       time.Time
	prompt   float64 // prompt tokens (the server's count when reported)
	own      float64 // own uncached tokens
	queue    float64 // pending tokens ahead, as recorded (see Observation)
	matched  bool    // queue is in uncached tokens
	reported bool    // own comes from the server's cached_tokens
	ttft     float64 // seconds; 0: none
	batch    float64 // in-flight at the pick + 1
	itl      float64 // seconds per output token after the first; 0: unknown
}

// epCal is one endpoint's window of samples (a ring) and its last
// known KV configuration.
type epCal struct {
	win              []sample
	next, n          int
	blockSize, block int // last scraped cache config (kept when metrics go stale)
}

func (e *epCal) add(s sample) {
	e.win[e.next] = s
	e.next = (e.next + 1) % len(e.win)
	e.n = min(e.n+1, len(e.win))
}

// Step ingests obs (at now), forgets samples older than MaxAge and
// endpoints that left pool, and returns (and keeps, for Snapshot) each
// pool endpoint's calibration. It does not publish.
func (c *Calibrator) Step(now time.Time, pool []*scheduler.Endpoint, obs []scheduler.Observation) *CalibrationSnapshot {
	in := make(map[string]bool, len(pool))
	for _, ep := range pool {
		in[ep.Address] = true
		e := c.eps[ep.Address]
		if e == nil {
			e = &epCal{win: make([]sample, c.cfg.Window)}
			c.eps[ep.Address] = e
		}
		if ep.CacheBlockSize > 0 && ep.CacheBlocks > 0 {
			e.blockSize, e.block = ep.CacheBlockSize, ep.CacheBlocks
		}
	}
	for a := range c.eps {
		if !in[a] {
			delete(c.eps, a)
		}
	}
	for i := range obs {
		o := &obs[i]
		e := c.eps[o.Endpoint]
		if e == nil || o.Kind != scheduler.OutcomeSuccess || o.TTFT <= 0 {
			continue
		}
		e.add(toSample(now, o))
	}
	prev := c.snap.Load()
	snap := &CalibrationSnapshot{At: now, Observed: c.ring.Recorded(), Dropped: c.ring.Dropped(), MinSamples: c.cfg.MinSamples}
	class := make([]string, 0, len(pool))
	for _, ep := range pool {
		snap.Endpoints = append(snap.Endpoints, c.estimate(now, ep, c.eps[ep.Address]))
		class = append(class, strconv.FormatFloat(ep.CapacityOrOne(), 'g', -1, 64)+"/"+strings.Join(ep.Models, ","))
	}
	c.pool(snap.Endpoints, class)
	sort.Slice(snap.Endpoints, func(i, j int) bool { return snap.Endpoints[i].Address < snap.Endpoints[j].Address })
	if prev != nil && len(prev.Endpoints) > 0 && len(snap.Endpoints) == 0 {
		c.log.Info("calibration: pool empty; nothing to publish")
	}
	c.snap.Store(snap)
	return snap
}

// toSample turns an observation into the estimator's terms: own work is
// the server's uncached count (prompt − cached) when it reported one,
// else the router's.
func toSample(now time.Time, o *scheduler.Observation) sample {
	s := sample{
		at:      now,
		prompt:  float64(o.PromptTokens),
		own:     float64(o.UncachedTokens),
		queue:   float64(max(o.QueueTokens, 0)),
		matched: o.Matched,
		ttft:    o.TTFT.Seconds(),
		batch:   float64(max(o.InFlight, 0)) + 1,
	}
	if u := o.Usage; u.PromptTokens > 0 {
		s.prompt = float64(u.PromptTokens)
		if !o.Matched {
			s.own = s.prompt
		}
		if u.CachedReported {
			s.own = float64(max(u.PromptTokens-max(u.CachedTokens, 0), 0))
			s.reported = true
		}
	}
	out := o.Usage.OutputTokens
	if out <= 0 {
		out = o.Usage.Chunks
	}
	if out >= 2 && o.Latency > o.TTFT {
		s.itl = (o.Latency - o.TTFT).Seconds() / float64(out-1)
	}
	return s
}

// estimate computes one endpoint's calibration from its window.
func (c *Calibrator) estimate(now time.Time, ep *scheduler.Endpoint, e *epCal) EndpointCalibration {
	p := c.cfg.Prior
	capy := ep.CapacityOrOne()
	out := EndpointCalibration{Address: ep.Address, Name: ep.Name, Capacity: capy, Source: "prior", KVSource: "prior", UncachedShare: 1}
	priorR := p.PrefillTokensPerSecond() * capy
	priorFixed, priorPerSeq := p.StepFixed.Seconds()/capy, p.StepPerDecodeSeq.Seconds()/capy
	out.BlockSize = p.BlockSize
	kv := float64(p.NumBlocks*p.BlockSize) * capy
	if e != nil && e.block > 0 {
		kv, out.KVSource, out.BlockSize = float64(e.block*e.blockSize), "scraped", e.blockSize
	}

	var xs, ys, bs, itls []float64
	var promptSum, ownSum, reportedPrompt, reportedOwn float64
	if e != nil {
		cutoff := now.Add(-c.cfg.MaxAge)
		for i := range e.n {
			s := &e.win[i]
			if s.at.Before(cutoff) {
				continue
			}
			promptSum += s.prompt
			if s.reported {
				reportedPrompt += s.prompt
				reportedOwn += s.own
			}
		}
		if reportedPrompt > 0 {
			out.UncachedShare = min(reportedOwn/reportedPrompt, 1)
		}
		for i := range e.n {
			s := &e.win[i]
			if s.at.Before(cutoff) {
				continue
			}
			q := s.queue
			if !s.matched {
				q *= out.UncachedShare
			}
			ownSum++
			xs = append(xs, q+s.own)
			ys = append(ys, s.ttft)
			if s.itl > 0 {
				bs = append(bs, s.batch)
				itls = append(itls, s.itl)
			}
		}
		if ownSum > 0 {
			out.MeanPromptTokens = promptSum / ownSum
		}
	}
	// Pairs whose work differs by less than a token say nothing.
	slope, n := c.theilSen(xs, ys, 1)
	out.PrefillSamples, out.DecodeSamples = n, len(itls)
	if slope > 0 {
		out.LearnedPrefillTokensPerSecond = 1 / slope
	}
	out.priorR = priorR
	fixed, perSeq := priorFixed, priorPerSeq
	if m := len(itls); m >= 2 {
		w := min(1, float64(m)/float64(c.cfg.MinSamples))
		lf, ls := c.line(bs, itls)
		fixed = (1-w)*priorFixed + w*lf
		perSeq = (1-w)*priorPerSeq + w*ls
		out.Batch = medianOf(append(c.scratch[:0], bs...))
	}
	out.DecodeStepFixedSeconds, out.DecodeStepPerSeqSeconds = fixed, perSeq
	step := fixed + perSeq*max(out.Batch, 1)
	samples := n
	switch {
	case n == 0:
		samples = 0
	case n >= c.cfg.MinSamples:
		out.Source = "learned"
	default:
		out.Source = "blended"
	}
	out.Calibration = scheduler.Calibration{DecodeStepSeconds: step, KVCapacityTokens: kv, Samples: samples}
	return out
}

// minClass is how many learned endpoints a class needs before its members
// publish the class median.
const minClass = 3

// pool sets each endpoint's published prefill throughput. Endpoints of
// the same class (declared capacity and models) run the same engine, so
// once minClass of them are learned each publishes the class median of
// the learned estimates, which averages out one endpoint's noise;
// otherwise its own. Either is blended with the prior, in seconds per
// token (the unit costs add in), with weight min(1, samples/min_samples).
func (c *Calibrator) pool(eps []EndpointCalibration, class []string) {
	learned := map[string][]float64{}
	samples := map[string]int{}
	for i := range eps {
		if e := &eps[i]; e.LearnedPrefillTokensPerSecond > 0 && e.PrefillSamples >= c.cfg.MinSamples {
			learned[class[i]] = append(learned[class[i]], e.LearnedPrefillTokensPerSecond)
			samples[class[i]] += e.PrefillSamples
		}
	}
	med := map[string]float64{}
	for k, v := range learned {
		if len(v) >= minClass {
			med[k] = medianOf(v)
		}
	}
	for i := range eps {
		e := &eps[i]
		r, n := e.LearnedPrefillTokensPerSecond, e.PrefillSamples
		if m, ok := med[class[i]]; ok {
			r, n, e.Pooled = m, samples[class[i]], true
		}
		e.Calibration.PrefillTokensPerSecond = e.priorR
		if r > 0 {
			w := min(1, float64(n)/float64(c.cfg.MinSamples))
			e.Calibration.PrefillTokensPerSecond = 1 / ((1-w)/e.priorR + w/r)
		}
	}
}

// theilSen returns the Theil–Sen slope of y against x over the pairs of
// samples whose x differ by at least minDx (> 0): the median of their
// slopes, which tolerates up to 29 % of arbitrary outliers; and how many
// samples are in at least one such pair. 0, 0 when there is none.
func (c *Calibrator) theilSen(xs, ys []float64, minDx float64) (slope float64, n int) {
	sl := c.scratch[:0]
	used := c.used[:0]
	for range xs {
		used = append(used, false)
	}
	for i := range xs {
		for j := i + 1; j < len(xs); j++ {
			if dx := xs[j] - xs[i]; dx >= minDx || -dx >= minDx {
				sl = append(sl, (ys[j]-ys[i])/dx)
				used[i], used[j] = true, true
			}
		}
	}
	for _, u := range used {
		if u {
			n++
		}
	}
	c.scratch, c.used = sl[:0], used[:0]
	if len(sl) == 0 {
		return 0, 0
	}
	return medianOf(sl), n
}

// line fits y ≈ a + b·x robustly: b the Theil–Sen slope (0 when x never
// varies), a the median of y − b·x; both at least 0.
func (c *Calibrator) line(xs, ys []float64) (a, b float64) {
	b, _ = c.theilSen(xs, ys, math.SmallestNonzeroFloat64)
	b = max(b, 0)
	res := c.scratch[:0]
	for i := range xs {
		res = append(res, ys[i]-b*xs[i])
	}
	a = max(medianOf(res), 0)
	c.scratch = res[:0]
	return a, b
}

// medianOf returns the median of v (the mean of the middle two for an
// even count), reordering v; 0 for none. Quickselect, O(len(v)).
func medianOf(v []float64) float64 {
	n := len(v)
	if n == 0 {
		return 0
	}
	hi := selectK(v, n/2)
	if n%2 == 1 {
		return hi
	}
	lo := v[0]
	for _, x := range v[:n/2] {
		lo = math.Max(lo, x)
	}
	return (lo + hi) / 2
}

// selectK reorders v so that v[k] is the k-th smallest, everything before
// it ≤ and after it ≥, and returns v[k].
func selectK(v []float64, k int) float64 {
	lo, hi := 0, len(v)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Median of three as the pivot.
		if v[mid] < v[lo] {
			v[mid], v[lo] = v[lo], v[mid]
		}
		if v[hi] < v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[hi] < v[mid] {
			v[hi], v[mid] = v[mid], v[hi]
		}
		pivot := v[mid]
		i, j := lo, hi
		for i <= j {
			for v[i] < pivot {
				i++
			}
			for v[j] > pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return v[k]
		}
	}
	return v[k]
}
