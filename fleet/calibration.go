package fleet

import (
	"context"
	"errors"
	"log/slog"
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
	// Observed is how many of the endpoint's requests the window holds
	// (completed, with a first byte, within max_age), whether or not
	// they gave a prefill point: once it (its class, for a class fit)
	// holds 2 × min_samples, the endpoint asks for no more probes
	// (Calibration.Probes, scheduler.probe) even without a fit.
	Observed int `json:"observed"`
	// LearnedPrefillTokensPerSecond is the estimate from the observations
	// alone (0: none).
	LearnedPrefillTokensPerSecond float64 `json:"learned_prefill_tokens_per_second"`
	// DecodeStepFixedSeconds and DecodeStepPerSeqSeconds are the
	// endpoint's own decode step line, step ≈ fixed + per_seq·batch, fitted
	// against the batch each request decoded in (decodeBeside; blended with
	// the prior like the rest). Calibration's DecodeFixedSeconds and
	// DecodeSecondsPerSeq are its class's median of these lines when it
	// has a class of two or more. Calibration.DecodeStepSeconds is another
	// line's, fitted against the in-flight count at the pick, at Batch.
	DecodeStepFixedSeconds  float64 `json:"decode_step_fixed_seconds"`
	DecodeStepPerSeqSeconds float64 `json:"decode_step_per_seq_seconds"`
	// EngineStepFixedSeconds, EngineStepPerSeqSeconds and
	// EngineStepPerContextTokenSeconds are the engine's own decode step,
	// step ≈ fixed + per_seq·batch + per_context_token·(context tokens the
	// batch attends to), fitted to the same decodes less the prefill that
	// shared their steps (engineLine; blended with the prior like the
	// rest): a sequence's cost apart from its context. ContextIdentified
	// says this window's contexts spread enough to fit the context term;
	// otherwise it is the one last identified (0 before any: the context
	// is charged to the sequence). EngineDecodeSamples is how many
	// decodes the line rests on (those with an arrival time whose steps
	// went mostly to decoding); none: the prior's terms.
	EngineDecodeSamples              int     `json:"engine_decode_samples"`
	EngineStepFixedSeconds           float64 `json:"engine_step_fixed_seconds"`
	EngineStepPerSeqSeconds          float64 `json:"engine_step_per_seq_seconds"`
	EngineStepPerContextTokenSeconds float64 `json:"engine_step_per_context_token_seconds"`
	ContextIdentified                bool    `json:"context_identified"`
	// EngineStepBatchSeconds is EngineStepPerSeqSeconds as the trade
	// law's batch cost reads it (Calibration.EngineDecodeBatchSeconds):
	// a fitted per-sequence term less, until a window identifies the
	// context term, the prior's cost per context token at the median
	// context per sequence of the window that fitted it.
	EngineStepBatchSeconds float64 `json:"engine_step_batch_seconds"`
	// Batch is the median batch (router in-flight at the pick, plus one)
	// of the recent observations.
	Batch float64 `json:"batch"`
	// UncachedShare is the share of prompt tokens the endpoint had to
	// compute, by what it reported (1 when it reported nothing).
	UncachedShare float64 `json:"uncached_share"`
	// MeanPromptTokens is the mean prompt of the recent observations.
	MeanPromptTokens float64 `json:"mean_prompt_tokens"`
	// MeanOutputTokens is the mean output of the recent observations
	// that reported one (usage, else the stream's chunks); 0: none.
	MeanOutputTokens float64 `json:"mean_output_tokens"`
	// Pooled says the published prefill throughput is its class's fit
	// (endpoints of the same capacity and models, their points together).
	Pooled bool `json:"pooled"`
	// KVSource is "scraped" (vllm:cache_config_info) or "prior".
	KVSource  string `json:"kv_source"`
	BlockSize int    `json:"block_size"`

	priorR float64
}

// PriorPrefillTokensPerSecond is the prior's prefill throughput for the
// endpoint's capacity: what it publishes while it has no sample.
func (e *EndpointCalibration) PriorPrefillTokensPerSecond() float64 { return e.priorR }

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

// Learned returns how many endpoints of the latest snapshot are learned
// (not the prior).
func (c *Calibrator) Learned() int {
	n := 0
	for _, e := range c.Snapshot().Endpoints {
		if e.Source == "learned" {
			n++
		}
	}
	return n
}

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

// Step ingests obs (at now), forgets samples older than MaxAge and
// endpoints that left pool, and returns (and keeps, for Snapshot) each
// pool endpoint's calibration. It does not publish.
func (c *Calibrator) Step(now time.Time, pool []*scheduler.Endpoint, obs []scheduler.Observation) *CalibrationSnapshot {
	in := make(map[string]bool, len(pool))
	for _, ep := range pool {
		in[ep.Address] = true
		e := c.eps[ep.Address]
		if e == nil {
			e = &epCal{win: make([]sample, c.cfg.Window), live: make([]int, 0, c.cfg.Window), perSeq: -1, eng: engineTerms{perSeq: -1, perCtx: -1},
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

	var bs, bd, itls []float64
	var eb, ecx, ey []float64 // the engine line's batch, context and step (engineLine)
	var promptSum, reportedPrompt, reportedOwn, outSum, outN float64
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
			if s.out > 0 {
				outSum += s.out
				outN++
			}
			if s.reported {
				reportedPrompt += s.prompt
				reportedOwn += s.own
			}
		}
		// The decode line from the newest decodeWindow samples, each at
		// the batch it decoded in: the router's own requests decoding
		// on the endpoint beside it (decodeBeside over the window), or,
		// without its arrival time, the in-flight count at its pick.
		e.spans = e.spans[:0]
		for _, i := range e.live {
			if d, ok := e.win[i].decodeSpan(cutoff); ok {
				e.spans = append(e.spans, d)
			}
		}
		for k := 1; k <= e.n && len(itls) < decodeWindow; k++ {
			s := &e.win[(e.next-k+len(e.win))%len(e.win)]
			if s.itl > 0 && !s.at.Before(cutoff) {
				b := s.batch
				if d, ok := s.decodeSpan(cutoff); ok {
					var cx, pre float64
					b, cx, pre = decodeBeside(e.spans, d)
					// The engine's line: the inter-token time less the
					// prefill that shared its steps, at the rate this
					// endpoint last published (the prior's before).
					// A decode whose steps went mostly to prefill says
					// little of the decode and much of the rate the
					// prefill is taken out at: left out.
					rate := e.rate
					if !(rate > 0) {
						rate = priorR
					}
					if y := s.itl - pre/rate/(s.out-1); y >= s.itl*(1-maxPrefillShare) {
						eb, ecx, ey = append(eb, b), append(ecx, cx), append(ey, y)
					}
				}
				bs, bd = append(bs, s.batch), append(bd, b)
				itls = append(itls, s.itl)
			}
		}
		if reportedPrompt > 0 {
			out.UncachedShare = min(reportedOwn/reportedPrompt, 1)
		}
		out.Observed = len(e.live)
		if len(e.live) > 0 {
			out.MeanPromptTokens = promptSum / float64(len(e.live))
		}
		if outN > 0 {
			out.MeanOutputTokens = outSum / outN
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
	// Two lines from the same inter-token times: the step a request meets
	// against the in-flight count at its pick (what a scorer reads at a
	// pick), published at the median of that count; and the engine's
	// step line, against the batch each request decoded in (decodeBeside).
	// The first is attenuated — requests picked later join a decode — so
	// the engine's line is the second.
	stepFixed, stepPerSeq := priorFixed, priorPerSeq
	fixed, perSeq := priorFixed, priorPerSeq
	if m := len(itls); m >= 2 {
		w := min(1, float64(m)/float64(c.cfg.MinSamples))
		lf, ls := c.line(bs, itls)
		stepFixed, stepPerSeq = (1-w)*priorFixed+w*lf, (1-w)*priorPerSeq+w*ls
		// The engine's slope is identified only by batches that differ;
		// while the window's do not, the slope it last identified (the
		// prior's before any) holds.
		known := priorPerSeq
		if e.perSeq >= 0 {
			known = e.perSeq
		}
		var ok bool
		lf, ls, ok = c.lineOr(bd, itls, known, max(c.cfg.MinSamples/2, 2))
		if ok {
			e.perSeq = ls
		}
		fixed, perSeq = (1-w)*priorFixed+w*lf, (1-w)*priorPerSeq+w*ls
		out.Batch = medianOf(append(c.scratch[:0], bs...))
	}
	prior := engineTerms{fixed: priorFixed, perSeq: priorPerSeq, perCtx: p.StepPerContextToken.Seconds() / capy}
	eng := prior
	batchSeq := prior.perSeq
	if m := len(ey); m >= 2 {
		// Until a window identifies the context term, the context is
		// charged to the sequence (0 per token), not the prior's: a
		// prior a few times off (80 ns against an L4's 437 or a Qwen
		// 7B's 17) would move a term the size of the step between the
		// two where every request carries the same long prompt.
		known := prior
		known.perCtx = 0
		if e.eng.perCtx >= 0 {
			known.perCtx = e.eng.perCtx
		}
		if e.eng.perSeq >= 0 {
			known.perSeq = e.eng.perSeq
		}
		t, ctxOK, seqOK := c.engineLine(eb, ecx, ey, known, max(c.cfg.MinSamples/2, 4))
		if ctxOK {
			e.eng.perCtx = t.perCtx
		}
		if seqOK {
			e.eng.perSeq = t.perSeq
			if e.eng.perCtx < 0 {
				e.seqCtx = medianOf(perSequence(eb, ecx))
			}
		}
		out.ContextIdentified = ctxOK
		// Fixed and per-sequence blend with the prior like the rest; the
		// context term is the fit's (identified, kept or 0), never half
		// the prior's on top of a per-sequence term that holds the
		// context.
		w := min(1, float64(m)/float64(c.cfg.MinSamples))
		eng = engineTerms{fixed: (1-w)*prior.fixed + w*t.fixed, perSeq: (1-w)*prior.perSeq + w*t.perSeq, perCtx: t.perCtx}
		// Until a window identifies the context term, a per-sequence
		// term fitted to the batches holds the context its sequences
		// carried: early in the Mooncake trace at 2× the A100 8B's read
		// 1.4–3.1 ms per sequence on a 7–13 ms step (70 µs and 80 ns per
		// context token in truth), as decode-bound as the Qwen 7B. The
		// batch cost reads it less the prior's cost per context token
		// at the median context per sequence of the window that fitted
		// it; the engine line keeps it whole, which is right at that
		// context. A per-sequence term that is still the prior's holds
		// no context (the window's batches were alike: the fixed term
		// took it), and is read as it is.
		batchSeq = eng.perSeq
		if e.eng.perCtx < 0 && e.eng.perSeq >= 0 {
			batchSeq -= w * prior.perCtx * e.seqCtx
		}
	}
	out.EngineStepBatchSeconds = max(batchSeq, 0)
	out.EngineDecodeSamples = len(ey)
	out.EngineStepFixedSeconds, out.EngineStepPerSeqSeconds, out.EngineStepPerContextTokenSeconds = eng.fixed, eng.perSeq, eng.perCtx
	out.DecodeStepFixedSeconds, out.DecodeStepPerSeqSeconds = fixed, perSeq
	step := stepFixed + stepPerSeq*max(out.Batch, 1)
	out.Calibration = scheduler.Calibration{
		DecodeStepSeconds: step, DecodeFixedSeconds: fixed, DecodeSecondsPerSeq: max(perSeq, 0),
		EngineDecodeFixedSeconds: eng.fixed, EngineDecodeSecondsPerSeq: max(eng.perSeq, 0), EngineDecodeSecondsPerContextToken: max(eng.perCtx, 0),
		EngineDecodeBatchSeconds: out.EngineStepBatchSeconds,
		OutputTokens:             out.MeanOutputTokens, KVCapacityTokens: kv,
	}
	return out
}
