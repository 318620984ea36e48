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
	// the prefill estimate follows the last Window requests, the decode
	// line the last 128 of them. Default 1024.
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
// last 1,024 observations per endpoint, fully learned at 20, forgotten after
// 10m, 8,192 buffered, the default prior.
func DefaultCalibrationConfig() CalibrationConfig {
	return CalibrationConfig{Interval: 5 * time.Second, Window: 1024, MinSamples: 20, MaxAge: 10 * time.Minute, Buffer: 8192, Prior: DefaultCalibrationPrior()}
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
	// Source is what the published prefill throughput rests on: "prior"
	// (nothing observed), "blended" (fewer than min_samples prefill
	// points, its own or its class's when Pooled) or "learned".
	Source string `json:"source"`
	// PrefillSamples and DecodeSamples are the endpoint's own
	// observations each estimate rests on (prefill: those not picked
	// while admission-bound).
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
	// Pooled says the published prefill throughput is its class's fit
	// (endpoints of the same capacity and models, their points together).
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
	scratch []float64 // Theil–Sen slopes, quantile residuals
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
		scratch: make([]float64, 0, max(cfg.Window, decodeWindow*(decodeWindow-1)/2)),
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
	pick     time.Time // the request's arrival at the router; zero: unknown
	seq      uint64    // the endpoint's pick ordinal (orders equal picks)
	prompt   float64   // prompt tokens (the server's count when reported)
	own      float64   // own uncached tokens
	queue    float64   // pending tokens ahead, as recorded (see Observation)
	matched  bool      // queue is in uncached tokens
	reported bool      // own comes from the server's cached_tokens
	// rPrompt and rUncached are the router's own counts of the request
	// (the units of a later request's queue, unmatched and matched).
	rPrompt, rUncached float64
	// admission says the request was picked while the endpoint was
	// admission-bound (see admissionBound): its first byte measures
	// waiting for KV, not prefill.
	admission bool
	ttft      float64 // seconds; 0: none
	batch     float64 // in-flight at the pick + 1
	itl       float64 // seconds per output token after the first; 0: unknown
}

// fb returns the time the sample's first byte reached the router.
func (s *sample) fb() time.Time {
	return s.pick.Add(time.Duration(s.ttft * float64(time.Second)))
}

// epCal is one endpoint's window of samples (a ring), its last known KV
// configuration, and the prefill points of the last step (for pooling).
type epCal struct {
	win              []sample
	next, n          int
	blockSize, block int // last scraped cache config (kept when metrics go stale)
	live             []int
	xs, ys           []float64
	rate             float64 // the prefill rate published last (tokens/s; 0: none learned)
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
			e = &epCal{win: make([]sample, c.cfg.Window), live: make([]int, 0, c.cfg.Window),
				xs: make([]float64, 0, c.cfg.Window), ys: make([]float64, 0, c.cfg.Window)}
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
		at:        now,
		pick:      o.Arrival,
		seq:       o.Seq,
		prompt:    float64(o.PromptTokens),
		own:       float64(o.UncachedTokens),
		queue:     float64(max(o.QueueTokens, 0)),
		matched:   o.Matched,
		rPrompt:   float64(max(o.PromptTokens, 0)),
		rUncached: float64(max(o.UncachedTokens, 0)),
		admission: admissionBound(o),
		ttft:      o.TTFT.Seconds(),
		batch:     float64(max(o.InFlight, 0)) + 1,
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
	// Uncached tokens beyond the prompt are a wrong count.
	s.own = min(s.own, s.prompt)
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

	var bs, itls []float64
	var promptSum, reportedPrompt, reportedOwn float64
	if e != nil {
		cutoff := now.Add(-c.cfg.MaxAge)
		e.live = e.live[:0]
		for i := range e.n {
			s := &e.win[i]
			if s.at.Before(cutoff) {
				continue
			}
			e.live = append(e.live, i)
			promptSum += s.prompt
			if s.reported {
				reportedPrompt += s.prompt
				reportedOwn += s.own
			}
		}
		// The decode line from the newest decodeWindow samples.
		for k := 1; k <= e.n && len(itls) < decodeWindow; k++ {
			s := &e.win[(e.next-k+len(e.win))%len(e.win)]
			if s.itl > 0 && !s.at.Before(cutoff) {
				bs = append(bs, s.batch)
				itls = append(itls, s.itl)
			}
		}
		if reportedPrompt > 0 {
			out.UncachedShare = min(reportedOwn/reportedPrompt, 1)
		}
		if len(e.live) > 0 {
			out.MeanPromptTokens = promptSum / float64(len(e.live))
		}
		sort.Slice(e.live, func(a, b int) bool {
			sa, sb := &e.win[e.live[a]], &e.win[e.live[b]]
			if !sa.pick.Equal(sb.pick) {
				return sa.pick.Before(sb.pick)
			}
			return sa.seq < sb.seq
		})
		// Requests ahead count what they had left at the rate this
		// endpoint last published (in full before anything was).
		c.points(e, out.UncachedShare, e.rate)
	}
	var xs, ys []float64
	if e != nil {
		xs, ys = e.xs, e.ys
	}
	n := len(xs)
	if r := c.fitPrefill(xs, ys); r > 0 {
		out.LearnedPrefillTokensPerSecond = r
	} else {
		n = 0
	}
	out.PrefillSamples, out.DecodeSamples = n, len(itls)
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
	out.Calibration = scheduler.Calibration{DecodeStepSeconds: step, KVCapacityTokens: kv}
	return out
}

// admissionKV is the scraped KV-cache utilisation at or above which an
// endpoint with requests waiting is taken to be admission-bound.
const admissionKV = 0.9

// admissionBound says o's request was picked while its endpoint was
// admission-bound by its fresh scraped metrics: requests waiting and the
// KV cache (nearly) full, so the engine admits a request only when
// another frees its blocks and the first byte measures that wait rather
// than prefill. Unknown (stale) metrics say nothing.
func admissionBound(o *scheduler.Observation) bool {
	return o.Scraped && o.Waiting > 0 && o.KVUtil >= admissionKV
}

// points fills e.xs and e.ys with the prefill points of e's live samples
// (e.live, in pick order) that were not admission-bound: the time to
// first byte against the prefill work the request waited for, its own
// uncached tokens plus the work ahead of it at the pick.
//
// The work ahead is rebuilt from the window: every earlier-picked request
// whose first byte came after this pick was ahead, with its reported
// uncached tokens; when rate > 0 (tokens/s) one whose first byte came
// within own/rate of the pick counts only rate × that time, the part it
// had left to prefill. Requests ahead that the window does not hold
// (still running, failed, forgotten) are the recorded queue less what was
// found, in queue units (router-uncached tokens when matched, else prompt
// tokens scaled by share, the endpoint's uncached share).
func (c *Calibrator) points(e *epCal, share, rate float64) {
	e.xs, e.ys = e.xs[:0], e.ys[:0]
	var maxTTFT float64
	for _, i := range e.live {
		maxTTFT = max(maxTTFT, e.win[i].ttft)
	}
	for k, i := range e.live {
		s := &e.win[i]
		if s.admission {
			continue
		}
		if s.pick.IsZero() {
			q := s.queue
			if !s.matched {
				q *= share
			}
			e.xs, e.ys = append(e.xs, q+s.own), append(e.ys, s.ttft)
			continue
		}
		var work, found float64
		for m := k - 1; m >= 0; m-- {
			a := &e.win[e.live[m]]
			if a.pick.IsZero() {
				continue
			}
			if s.pick.Sub(a.pick).Seconds() > maxTTFT {
				break // every earlier one was answered before this pick
			}
			left := a.fb().Sub(s.pick).Seconds()
			if left <= 0 {
				continue // answered before this pick: no longer ahead
			}
			w := a.own
			if rate > 0 {
				w = min(w, rate*left)
			}
			work += w
			if s.matched {
				found += a.rUncached
			} else {
				found += a.rPrompt
			}
		}
		missing := max(s.queue-found, 0)
		if !s.matched {
			missing *= share
		}
		e.xs, e.ys = append(e.xs, work+missing+s.own), append(e.ys, s.ttft)
	}
}

// decodeWindow is how many of the newest samples the decode line is
// fitted to (Theil–Sen is quadratic in them).
const decodeWindow = 128

// prefillQuantile is the quantile of the time to first byte the prefill
// line is fitted to: waits that are not prefill (admission, a step in
// progress, decodes sharing the steps) only add to it, so the line under
// most points is the prefill's.
const prefillQuantile = 0.25

// fitPrefill returns the prefill throughput (tokens/s) of the points:
// the inverse slope of the prefillQuantile regression line of time to
// first byte (ys) on work (xs); 0 when the work varies by less than a
// token or the slope is not positive.
func (c *Calibrator) fitPrefill(xs, ys []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	if hi-lo < 1 {
		return 0
	}
	b := c.quantileSlope(xs, ys, prefillQuantile)
	if !(b > 1e-9) {
		return 0
	}
	return 1 / b
}

// quantileSlope returns the slope b of the tau quantile regression line
// y ≈ a + b·x, 0 ≤ b ≤ 0.01 s per token (at least 100 tokens/s): it
// minimises the check loss Σ ρ_tau(y − a − b·x)
// with a the tau quantile of y − b·x, a convex function of b, by golden
// section search.
func (c *Calibrator) quantileSlope(xs, ys []float64, tau float64) float64 {
	loss := func(b float64) float64 {
		r := c.scratch[:0]
		for i := range xs {
			r = append(r, ys[i]-b*xs[i])
		}
		c.scratch = r[:0]
		a := selectK(r, int(tau*float64(len(r)-1)))
		var l float64
		for i := range xs {
			if d := ys[i] - b*xs[i] - a; d >= 0 {
				l += tau * d
			} else {
				l -= (1 - tau) * d
			}
		}
		return l
	}
	const phi = 0.6180339887498949
	lo, hi := 0.0, 0.01
	m1, m2 := hi-phi*(hi-lo), lo+phi*(hi-lo)
	f1, f2 := loss(m1), loss(m2)
	for range 48 {
		if f1 <= f2 {
			hi, m2, f2 = m2, m1, f1
			m1 = hi - phi*(hi-lo)
			f1 = loss(m1)
		} else {
			lo, m1, f1 = m1, m2, f2
			m2 = lo + phi*(hi-lo)
			f2 = loss(m2)
		}
	}
	b := (lo + hi) / 2
	// The optimum passes through two of the points: snap to the slope of
	// the pair through the point nearest the line closest to b, when that
	// loses nothing (exact on exact data).
	r := c.scratch[:0]
	for i := range xs {
		r = append(r, ys[i]-b*xs[i])
	}
	a := selectK(r, int(tau*float64(len(r)-1)))
	c.scratch = r[:0]
	at, near := 0, math.Inf(1)
	for i := range xs {
		if d := math.Abs(ys[i] - b*xs[i] - a); d < near {
			at, near = i, d
		}
	}
	snap, gap := b, math.Inf(1)
	for j := range xs {
		if dx := xs[j] - xs[at]; math.Abs(dx) >= 1 {
			if sl := (ys[j] - ys[at]) / dx; math.Abs(sl-b) < gap {
				snap, gap = sl, math.Abs(sl-b)
			}
		}
	}
	if snap >= 0 && snap <= 0.01 && loss(snap) <= loss(b) {
		b = snap
	}
	return b
}

// pool sets each endpoint's published prefill throughput. Endpoints of
// the same class (declared capacity and models) run the same engine, so
// the class's prefill points are fitted together (fitPrefill), which
// averages out one endpoint's noise and sees a wider range of work; an
// endpoint alone in its class, or whose class has no fit, keeps its own.
// Either is blended with the prior, in seconds per token (the unit costs
// add in), with weight min(1, points/min_samples).
func (c *Calibrator) pool(eps []EndpointCalibration, class []string) {
	members := map[string][]int{}
	for i := range eps {
		if eps[i].PrefillSamples > 0 {
			members[class[i]] = append(members[class[i]], i)
		}
	}
	type fit struct {
		r float64
		n int
	}
	fits := map[string]fit{}
	var xs, ys []float64
	for k, m := range members {
		if len(m) < 2 {
			continue
		}
		xs, ys = xs[:0], ys[:0]
		for _, i := range m {
			if e := c.eps[eps[i].Address]; e != nil {
				xs, ys = append(xs, e.xs...), append(ys, e.ys...)
			}
		}
		if r := c.fitPrefill(xs, ys); r > 0 {
			fits[k] = fit{r, len(xs)}
		}
	}
	for i := range eps {
		e := &eps[i]
		r, n := e.LearnedPrefillTokensPerSecond, e.PrefillSamples
		if f, ok := fits[class[i]]; ok {
			r, n, e.Pooled = f.r, f.n, true
		}
		e.Calibration.PrefillTokensPerSecond = e.priorR
		if ec := c.eps[e.Address]; ec != nil {
			ec.rate = r
		}
		e.Source, e.Calibration.Samples = "prior", 0
		if r > 0 {
			w := min(1, float64(n)/float64(c.cfg.MinSamples))
			e.Calibration.PrefillTokensPerSecond = 1 / ((1-w)/e.priorR + w/r)
			e.Source, e.Calibration.Samples = "blended", n
			if n >= c.cfg.MinSamples {
				e.Source = "learned"
			}
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
