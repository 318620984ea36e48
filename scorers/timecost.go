package scorers

import (
	"fmt"
	"math"

	"github.com/trimtab/trimtab/scheduler"
)

// TimeCostConfig configures the time-cost scorer (YAML params of a scorer
// with type "time-cost"). The rates and step times are priors: an
// endpoint's published scheduler.Calibration replaces them where it has a
// value.
type TimeCostConfig struct {
	// PrefillTokensPerSecond is the prior prefill rate of an endpoint of
	// capacity 1 with no calibration, in uncached prompt tokens per
	// second (prefill_tokens_per_second). Default 13,100: the simulator's
	// default engine (Llama-3.1-8B on an A100-40GB, docs/benchmarks.md)
	// computes a 2,048-token chunk in 13 ms + 2,048 × 70 µs = 156.4 ms.
	// The field's reference point is SMG's fallback when no rate is
	// reported, 2,000 tokens/s (docs/field-policies.md); only the ratio
	// between endpoints matters while every one uses the prior.
	PrefillTokensPerSecond float64 `mapstructure:"prefill_tokens_per_second"`
	// StepSeconds is the prior time of one engine step (step_seconds):
	// what a request waits at least, for the step in progress and its
	// own first decode. Default 0.013, the same engine's fixed step cost
	// (single-stream decode at ≈ 75 tokens/s).
	StepSeconds float64 `mapstructure:"step_seconds"`
	// DecodeSecondsPerRunning is what each running request adds to every
	// step that carries a prefill chunk (decode_seconds_per_running).
	// Default 70 µs, the same engine's step_per_decode_seq. 0 leaves the
	// decode-interference term out.
	DecodeSecondsPerRunning float64 `mapstructure:"decode_seconds_per_running"`
	// ChunkTokens is the engine's prefill chunk, the tokens one step
	// prefills (chunk_tokens; vLLM's max_num_batched_tokens). Default
	// 2,048.
	ChunkTokens int `mapstructure:"chunk_tokens"`
	// BytesPerToken converts prompt bytes to tokens where no token count
	// exists: other replicas' pending prefill and profiles without a
	// prefix scorer (bytes_per_token, default 4, the prefix scorer's).
	BytesPerToken int `mapstructure:"bytes_per_token"`
	// CacheCredit c (cache_credit, default 0) charges the request's own
	// uncached prompt tokens 1 + c times: once for the wait they add to
	// its own first token, c more for the prefill work they add to the
	// fleet — the seconds every request that follows it on e waits
	// behind that work, and the KV it takes. With c = 0 the cost is the
	// request's own expected wait; with c = 1 a request joins the pod
	// that holds (or, with an index learning at the pick, is computing)
	// its prefix while waiting there costs less than twice recomputing
	// the prefix elsewhere. Range [0, 16].
	CacheCredit float64 `mapstructure:"cache_credit"`
	// DecodeCredit d (decode_credit, default 0: off) adds the decode
	// side of the request's end-to-end time: its out − 1 tokens after the
	// first, one per step of e, each step costing fixed_e + per_seq_e ·
	// batch with this router's requests in flight on e and itself in the
	// batch: dec_e = (out − 1) · (fixed_e + per_seq_e · (in_flight_e + 1))
	// seconds. out is the candidates' mean output (the calibrator's
	// per-endpoint means, else output_tokens): a request's length does not
	// depend on where it goes. fixed_e and per_seq_e are e's learned step
	// line (else step_seconds and decode_seconds_per_running scaled by e's
	// prefill rate against the prior's). The cost grows by d · (dec_e −
	// the smallest dec over the candidates): the decode seconds e adds
	// beyond the best candidate's, so the part no choice avoids does not
	// flatten the score (min cost ÷ cost). Between endpoints of one engine
	// only the batch differs: where a decoding sequence costs little
	// (dense 8B models: microseconds per sequence against milliseconds per
	// step) the term is small beside the prefill, where decode dominates
	// the step it outweighs a cached prefix; between engines a slower step
	// weighs every output token. The in-flight count is this router's
	// own, the batch the calibrator fits the line against (another
	// replica's requests raise the line it learns instead). Range [0, 16].
	DecodeCredit float64 `mapstructure:"decode_credit"`
	// BatchCredit b (batch_credit, default 0: off) charges again the part
	// of the decode seconds that the batch makes: b · (out − 1) · per_seq_e
	// · (in_flight_e + 1), beyond the smallest over the candidates — the
	// seconds each decoding sequence already on e adds to every step of
	// this request, and that this request adds to every step of theirs.
	// Where a decoding sequence costs little beside the step (dense
	// models: microseconds against milliseconds) the term is nearly
	// nothing; where decode dominates the step (a model with a small KV
	// per token decoding at large batches) it spreads decodes as a
	// cached prefix would not. Unlike decode_credit it does not price a
	// slower engine's fixed step, so it can be weighed heavily on a pool of
	// two GPU generations without steering every request from the slow
	// class. Range [0, 16]; it uses output_tokens like decode_credit.
	BatchCredit float64 `mapstructure:"batch_credit"`
	// OutputTokens is the prior mean output per request, in tokens
	// (output_tokens, default 256), used by decode_credit and
	// batch_credit while no candidate's calibration reports a mean output;
	// 0 only without either.
	OutputTokens float64 `mapstructure:"output_tokens"`
}

// DefaultTimeCostConfig returns the defaults documented on TimeCostConfig.
func DefaultTimeCostConfig() TimeCostConfig {
	return TimeCostConfig{
		PrefillTokensPerSecond:  13100,
		StepSeconds:             0.013,
		DecodeSecondsPerRunning: 70e-6,
		ChunkTokens:             2048,
		BytesPerToken:           4,
		OutputTokens:            256,
	}
}

// Validate checks the config; errors name the field.
func (c TimeCostConfig) Validate() error {
	switch {
	case !(c.PrefillTokensPerSecond > 0 && c.PrefillTokensPerSecond <= 1e9):
		return fmt.Errorf("time-cost.prefill_tokens_per_second: must be in (0, 1e9], got %v", c.PrefillTokensPerSecond)
	case !(c.StepSeconds > 0 && c.StepSeconds <= 60):
		return fmt.Errorf("time-cost.step_seconds: must be in (0, 60], got %v", c.StepSeconds)
	case !(c.DecodeSecondsPerRunning >= 0 && c.DecodeSecondsPerRunning <= 1):
		return fmt.Errorf("time-cost.decode_seconds_per_running: must be in [0, 1], got %v", c.DecodeSecondsPerRunning)
	case c.ChunkTokens <= 0 || c.ChunkTokens > 1<<20:
		return fmt.Errorf("time-cost.chunk_tokens: must be in 1…1048576, got %d", c.ChunkTokens)
	case c.BytesPerToken <= 0 || c.BytesPerToken > 64:
		return fmt.Errorf("time-cost.bytes_per_token: must be in 1…64, got %d", c.BytesPerToken)
	case !(c.CacheCredit >= 0 && c.CacheCredit <= 16):
		return fmt.Errorf("time-cost.cache_credit: must be in [0, 16], got %v", c.CacheCredit)
	case !(c.DecodeCredit >= 0 && c.DecodeCredit <= 16):
		return fmt.Errorf("time-cost.decode_credit: must be in [0, 16], got %v", c.DecodeCredit)
	case !(c.BatchCredit >= 0 && c.BatchCredit <= 16):
		return fmt.Errorf("time-cost.batch_credit: must be in [0, 16], got %v", c.BatchCredit)
	case (c.DecodeCredit > 0 || c.BatchCredit > 0 || c.OutputTokens != 0) && !(c.OutputTokens >= 1 && c.OutputTokens <= 1<<20):
		return fmt.Errorf("time-cost.output_tokens: must be in [1, 1048576], got %v", c.OutputTokens)
	}
	return nil
}

// TimeCost is a cache-aware distribution scorer in seconds: the expected
// time until a request's first token on each candidate e,
//
//	cost_e  = step_e + (work_e + c · uncached_e(r)) / rate_e + ⌈work_e / chunk⌉ · running_e · κ_e
//	work_e  = queued_e + uncached_e(r)
//
// plus, with decode_credit d > 0, d · (dec_e − min over the candidates of
// dec), dec_e the request's decode seconds on e at the batch it would join
// (see TimeCostConfig.DecodeCredit), and with batch_credit b > 0 the batch's
// part of them charged b more times (TimeCostConfig.BatchCredit).
//
// with queued_e the uncached prompt tokens already waiting for their first
// byte on e (Endpoint.PendingTokens, plus other replicas' pending prompt
// bytes ÷ bytes_per_token), uncached_e(r) the request's prompt tokens e
// does not hold by the prefix index (prompt − matched tokens), rate_e e's
// prefill rate (Calibration.PrefillTokensPerSecond, else the prior ×
// Capacity), step_e one engine step (Calibration.DecodeStepSeconds, else
// the prior step scaled by prior rate ÷ rate_e), running_e the scraped
// running requests (0 when the scrape is stale: the term is then left
// out), κ_e decode_seconds_per_running scaled like the step, and chunk
// chunk_tokens. Each chunk of prefill shares its step with e's running
// decodes, which lengthen it by κ each. c is cache_credit: the request's
// own uncached prefill charged again for the work it adds to e, which
// the requests after it wait behind (0 by default: the request's own
// wait only). The control loop's trade reaches c: it is scaled by
// CycleState.AffinityScale, so while the loop has moved weight from
// affinity to distribution the credit shrinks with the affinity share
// and the scorer spreads by expected wait.
//
// A prefix cached on e lowers cost_e by exactly the seconds of prefill it
// saves (cached tokens ÷ rate_e), and every token queued ahead raises it
// by the seconds it adds, so the scorer alone settles the affinity–load
// trade in the fleet's own units; the pending tokens are released at the
// first response byte, like token-load's.
//
// Score: score_e = min cost ÷ cost_e, in (0,1]: 1 for the cheapest
// candidate, ½ for one expected to take twice as long. cost_e ≥ step_e > 0,
// so the ratio is always defined; candidates whose costs differ by little
// score alike, so a weighted profile does not stretch a millisecond into
// the whole scale. Neutral rule: the counts are router-local and current,
// so none is needed; without a prefix scorer in the profile (no index) the
// work is undiscounted prompt bytes ÷ bytes_per_token (reason
// no_prefix_index). Category: distribution, since against the prefix
// scorer it is the load side (it prefers a cache holder only by the
// seconds saved, which a queue can outweigh), so moving weight to it
// moves the profile towards load. It reads the prefix scorer's match
// (scheduler.MatchConsumer). Seconds reports cost_e for explanations.
type TimeCost struct {
	rate, step, kappa float64
	credit            float64
	decode, batch     float64
	outTok            float64
	chunk, bpt        int64
	noIdx             interface{ Inc() }
}

// NewTimeCost builds a time-cost scorer named name.
func NewTimeCost(name string, cfg TimeCostConfig, deps Deps) (*TimeCost, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scorer %q: %w", name, err)
	}
	n, err := newNeutralCounters(name, deps.Registerer, reasonNoIndex)
	if err != nil {
		return nil, err
	}
	return &TimeCost{
		rate: cfg.PrefillTokensPerSecond, step: cfg.StepSeconds, kappa: cfg.DecodeSecondsPerRunning,
		credit: cfg.CacheCredit, decode: cfg.DecodeCredit, batch: cfg.BatchCredit, outTok: cfg.OutputTokens,
		chunk: int64(cfg.ChunkTokens), bpt: int64(cfg.BytesPerToken), noIdx: n.counter(reasonNoIndex),
	}, nil
}

// Category implements scheduler.Scorer: distribution.
func (*TimeCost) Category() scheduler.Category { return scheduler.CategoryDistribution }

// ConsumesMatch implements scheduler.MatchConsumer.
func (*TimeCost) ConsumesMatch() {}

// costs is the scorer's CycleState slot: the last decision's costs, and
// with decode_credit each candidate's decode seconds.
type costs struct{ s, dec []float64 }

// Score implements scheduler.Scorer.
func (t *TimeCost) Score(cs *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	c, _ := (*cs.Slot()).(*costs)
	if c == nil {
		c = &costs{}
		*cs.Slot() = c
	}
	if cap(c.s) < len(eps) {
		c.s, c.dec = make([]float64, len(eps)), make([]float64, len(eps))
	}
	c.s, c.dec = c.s[:len(eps)], c.dec[:len(eps)]
	for i, e := range eps {
		c.s[i] = t.cost(cs, req, e)
	}
	if t.decode > 0 || t.batch > 0 {
		t.decodeCosts(eps, c.dec)
		lo := math.Inf(1)
		for _, v := range c.dec {
			lo = min(lo, v)
		}
		for i, v := range c.dec {
			c.s[i] += v - lo
		}
	}
	lo := math.Inf(1)
	for _, v := range c.s {
		lo = min(lo, v)
	}
	for i, v := range c.s {
		out[i] = lo / v
	}
}

// cost returns cost_e for req on e up to its first token, in seconds (see
// TimeCost), with cs the decision's state (its match, when a MatchProducer
// ran).
func (t *TimeCost) cost(cs *scheduler.CycleState, req *scheduler.Request, e *scheduler.Endpoint) float64 {
	var work, own int64
	if m, ok := cs.Match(e); ok {
		own = m.Uncached()
		work = inFlightTokens(e, t.bpt) + own
	} else {
		own = int64(len(req.Prompt)) / t.bpt
		work = max(e.PendingPrefill(), 0)/t.bpt + own
		t.noIdx.Inc()
	}
	cal := e.Calibration()
	rate, scale := t.rateOf(e, cal)
	step := cal.DecodeStepSeconds
	if !(step > 0) || math.IsInf(step, 0) {
		step = t.step * scale
	}
	cost := step + (float64(work)+t.credit*cs.AffinityScale()*float64(own))/rate
	if run := e.Running; fresh(e) && run > 0 && !math.IsInf(run, 0) && t.kappa > 0 {
		chunks := (work + t.chunk - 1) / t.chunk
		cost += float64(chunks) * run * t.kappa * scale
	}
	return cost
}

// rateOf returns e's prefill rate (its calibration's, else the prior's
// scaled by its capacity) and the prior's rate over it.
func (t *TimeCost) rateOf(e *scheduler.Endpoint, cal scheduler.Calibration) (rate, scale float64) {
	rate = cal.PrefillTokensPerSecond
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = t.rate * e.CapacityOrOne()
	}
	return rate, t.rate / rate
}

// decodeCosts writes into dec each candidate's priced decode seconds for
// a request of the candidates' mean output (their calibrations' mean
// outputs, else output_tokens: the request's length does not depend on
// where it goes), at the batch it would join: (out − 1) · (d · fixed_e +
// (d + b) · per_seq_e · (local in-flight_e + 1)), d decode_credit and b
// batch_credit. The line is e's calibration's when it has
// one, else step_seconds and decode_seconds_per_running scaled like the
// step. The in-flight count is this router's own, the batch the
// calibrator fitted the line against.
func (t *TimeCost) decodeCosts(eps []*scheduler.Endpoint, dec []float64) {
	var sum float64
	var n int
	for _, e := range eps {
		if o := e.Calibration().OutputTokens; o > 0 && !math.IsInf(o, 0) {
			sum += o
			n++
		}
	}
	out := t.outTok
	if n > 0 {
		out = sum / float64(n)
	}
	for i, e := range eps {
		cal := e.Calibration()
		fixed, perSeq := cal.DecodeFixedSeconds, cal.DecodeSecondsPerSeq
		if fixed < 0 || perSeq < 0 || math.IsInf(fixed, 0) || math.IsInf(perSeq, 0) || math.IsNaN(fixed+perSeq) || fixed+perSeq == 0 {
			_, scale := t.rateOf(e, cal)
			fixed, perSeq = t.step*scale, t.kappa*scale
		}
		dec[i] = max(out-1, 0) * (t.decode*fixed + (t.decode+t.batch)*perSeq*float64(max(e.LocalInFlight(), 0)+1))
	}
}

// Seconds implements scheduler.SecondsReporter: candidate i's cost_e.
func (*TimeCost) Seconds(cs *scheduler.CycleState, i int) (float64, bool) {
	c, _ := (*cs.Slot()).(*costs)
	if c == nil || i < 0 || i >= len(c.s) {
		return 0, false
	}
	return c.s[i], true
}
