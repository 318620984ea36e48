package sim

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim/scenario"
)

// The two baselines that are not weighted sums are sim-local scorers that
// write a one-hot score, plugged into the real scheduler with weight 1 and
// the max-score picker (ties broken by its seeded random draw).

// roundRobin scores the next endpoint in turn 1 and the rest 0: a plain
// Kubernetes Service. Category none.
type roundRobin struct{ next atomic.Uint64 }

func (*roundRobin) Category() scheduler.Category { return scheduler.CategoryNone }

func (r *roundRobin) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	k := int(r.next.Load() % uint64(len(eps)))
	for i := range out {
		out[i] = 0
	}
	out[k] = 1
}

// Picked advances the turn.
func (r *roundRobin) Picked(*scheduler.CycleState, *scheduler.Request, *scheduler.Endpoint) {
	r.next.Add(1)
}

func buildRoundRobin(seed uint64, _ *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
	cfg := scheduler.DefaultConfig()
	cfg.Seed = seed
	s, err := scheduler.New(cfg, []scheduler.ScorerEntry{{Name: "round-robin", Type: "round-robin", Scorer: &roundRobin{}, Weight: 1}}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	return s, nil, err
}

// sglangSwitch is SGLang's cache-aware router decision rule (sgl-router
// cache_aware policy): when the router-local loads are imbalanced
// (max − min > AbsThreshold and max > RelThreshold · min) it goes to the
// least-loaded endpoint; otherwise to the endpoint with the longest
// prefix match if that match ratio exceeds CacheThreshold; otherwise to the
// least-loaded endpoint. The prefix match is the real prefix scorer's
// score (matched leading blocks ÷ request blocks), the load is the
// router's in-flight count. It writes 1 for the chosen endpoint(s) and 0
// elsewhere. Category none.
type sglangSwitch struct {
	prefix         scheduler.Scorer
	absThreshold   float64
	relThreshold   float64
	cacheThreshold float64
}

func (*sglangSwitch) Category() scheduler.Category { return scheduler.CategoryNone }

func (s *sglangSwitch) Score(cs *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	minL, maxL := float64(eps[0].InFlight()), float64(eps[0].InFlight())
	for _, e := range eps[1:] {
		l := float64(e.InFlight())
		minL, maxL = min(minL, l), max(maxL, l)
	}
	leastLoaded := func() {
		for i, e := range eps {
			out[i] = 0
			if float64(e.InFlight()) == minL {
				out[i] = 1
			}
		}
	}
	// The prefix scorer always sees the request so its index learns from
	// every decision at the pick, as SGLang's radix tree does.
	s.prefix.Score(cs, req, eps, out)
	if maxL-minL > s.absThreshold && maxL > s.relThreshold*minL {
		leastLoaded()
		return
	}
	best := 0.0
	for _, v := range out {
		best = max(best, v)
	}
	if best <= s.cacheThreshold {
		leastLoaded()
		return
	}
	for i, v := range out {
		if v == best {
			out[i] = 1
		} else {
			out[i] = 0
		}
	}
}

func (s *sglangSwitch) Picked(cs *scheduler.CycleState, req *scheduler.Request, chosen *scheduler.Endpoint) {
	if o, ok := s.prefix.(scheduler.PickObserver); ok {
		o.Picked(cs, req, chosen)
	}
}

func (s *sglangSwitch) FirstByte(cs *scheduler.CycleState, req *scheduler.Request, ep *scheduler.Endpoint) {
	if o, ok := s.prefix.(scheduler.FirstByteObserver); ok {
		o.FirstByte(cs, req, ep)
	}
}

func (s *sglangSwitch) Done(req *scheduler.Request, ep *scheduler.Endpoint, o scheduler.Outcome) {
	if d, ok := s.prefix.(scheduler.DoneObserver); ok {
		d.Done(req, ep, o)
	}
}

func (s *sglangSwitch) PoolChanged(eps []*scheduler.Endpoint) {
	if p, ok := s.prefix.(scheduler.PoolObserver); ok {
		p.PoolChanged(eps)
	}
}

func buildSGLang(seed uint64, _ *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
	p, err := newPrefixScorer("prefix")
	if err != nil {
		return nil, nil, err
	}
	sw := &sglangSwitch{prefix: p, absThreshold: 64, relThreshold: 1.5, cacheThreshold: 0.3}
	cfg := scheduler.DefaultConfig()
	cfg.Seed = seed
	s, err := scheduler.New(cfg, []scheduler.ScorerEntry{{Name: "sglang-switch", Type: "sglang-switch", Scorer: sw, Weight: 1}}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	return s, nil, err
}

// bestOneHot writes 1 for the candidates whose cost is the lowest
// (within 1e-12) and 0 elsewhere, so the max-score picker breaks ties
// at random.
func bestOneHot(cost, out []float64) {
	lo := math.Inf(1)
	for _, c := range cost {
		lo = math.Min(lo, c)
	}
	for i, c := range cost {
		out[i] = 0
		if c <= lo+1e-12 {
			out[i] = 1
		}
	}
}

// smgLeastLoad is SMG's cache-aware routing with least_load for its misses
// and spills (lightseekorg/smg model_gateway/src/policies/least_load.rs and
// cache_aware.rs; smg #1647, #2341). Per request:
//
//  1. Spill: when the router-local in-flight counts are imbalanced
//     (max − min > absThreshold and max > relThreshold·min), the
//     candidate with the least expected wait.
//  2. Hit: else, when the best prefix match ratio (the prefix scorer's
//     score, learned at the pick) exceeds cacheThreshold, the best match
//     (ties to the least expected wait).
//  3. Miss: else the least expected wait.
//
// The expected wait, in seconds, is least_load's
//
//	wait_e = (queued_e + credit_e)/throughput + λ·k/(1 − k),  k = min(KVUtil_e, 0.999),
//
// with queued_e the scraped waiting requests × meanPrefill tokens (SGLang
// reports its waiting queue's uncached tokens; trimtab's scrape has the
// count), credit_e the prompt tokens this router dispatched to e since
// e's last scrape (the atomic dispatch credit, reset by a newer scrape),
// and throughput the fallback rate (no generation rate is scraped). It
// writes 1 for the chosen candidate(s), 0 elsewhere. Category none.
type smgLeastLoad struct {
	prefix         scheduler.Scorer
	absThreshold   float64
	relThreshold   float64
	cacheThreshold float64
	lambda         float64 // λ, seconds
	throughput     float64 // tokens/s
	meanPrefill    float64 // tokens a waiting request stands for
	bytesPerToken  int

	mu     sync.Mutex
	credit map[string]*smgCredit
	wait   []float64
}

type smgCredit struct {
	scraped time.Time // the scrape the credit counts from
	tokens  float64
}

func newSMGLeastLoad(prefix scheduler.Scorer) *smgLeastLoad {
	return &smgLeastLoad{prefix: prefix, absThreshold: 32, relThreshold: 1.1, cacheThreshold: 0.5,
		lambda: 0.15, throughput: 2000, meanPrefill: 1024, bytesPerToken: 4, credit: map[string]*smgCredit{}}
}

func (*smgLeastLoad) Category() scheduler.Category { return scheduler.CategoryNone }

// expectedWait is least_load's score for e (lower is better); it drops a
// credit older than e's latest scrape. Under s.mu.
func (s *smgLeastLoad) expectedWait(e *scheduler.Endpoint) float64 {
	c := s.credit[e.Address]
	if c == nil {
		c = &smgCredit{scraped: e.ScrapedAt}
		s.credit[e.Address] = c
	}
	if e.ScrapedAt.After(c.scraped) {
		c.scraped, c.tokens = e.ScrapedAt, 0
	}
	queued := math.Max(e.Waiting, 0) * s.meanPrefill
	k := math.Min(math.Max(e.KVUtil, 0), 0.999)
	return (queued+c.tokens)/s.throughput + s.lambda*k/(1-k)
}

func (s *smgLeastLoad) Score(cs *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	s.prefix.Score(cs, req, eps, out) // match ratios; the index sees every request
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wait = s.wait[:0]
	for _, e := range eps {
		s.wait = append(s.wait, s.expectedWait(e))
	}
	minL, maxL := float64(eps[0].InFlight()), float64(eps[0].InFlight())
	for _, e := range eps[1:] {
		l := float64(e.InFlight())
		minL, maxL = min(minL, l), max(maxL, l)
	}
	best := 0.0
	for _, v := range out {
		best = max(best, v)
	}
	if maxL-minL > s.absThreshold && maxL > s.relThreshold*minL || best <= s.cacheThreshold {
		bestOneHot(s.wait, out)
		return
	}
	// Hit: among the best matches, the least expected wait.
	for i, v := range out {
		if v != best {
			s.wait[i] = math.Inf(1)
		}
	}
	bestOneHot(s.wait, out)
}

// Picked credits the chosen endpoint with the request's prompt tokens
// and forwards the pick to the prefix index.
func (s *smgLeastLoad) Picked(cs *scheduler.CycleState, req *scheduler.Request, chosen *scheduler.Endpoint) {
	s.mu.Lock()
	s.expectedWait(chosen)
	s.credit[chosen.Address].tokens += float64(len(req.Prompt) / s.bytesPerToken)
	s.mu.Unlock()
	if o, ok := s.prefix.(scheduler.PickObserver); ok {
		o.Picked(cs, req, chosen)
	}
}

func (s *smgLeastLoad) PoolChanged(eps []*scheduler.Endpoint) {
	if p, ok := s.prefix.(scheduler.PoolObserver); ok {
		p.PoolChanged(eps)
	}
}

func buildSMGLeastLoad(seed uint64, _ *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
	p, err := newPrefixScorer("prefix")
	if err != nil {
		return nil, nil, err
	}
	cfg := scheduler.DefaultConfig()
	cfg.Seed = seed
	s, err := scheduler.New(cfg, []scheduler.ScorerEntry{{Name: PolicySMGLeastLoad, Type: PolicySMGLeastLoad, Scorer: newSMGLeastLoad(p), Weight: 1}}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	return s, nil, err
}

// dynamoKVCost is Dynamo's KV router cost (ai-dynamo/dynamo
// lib/llm/src/kv_router/scheduler.rs, the default selector): for worker
// e and a request of r prompt tokens, in KV blocks of blockSize tokens,
//
//	cost_e = overlapWeight · prefill_e + decode_e
//	prefill_e = (pending_e + r − cached_e) / blockSize
//	decode_e  = (active_e + r) / blockSize
//
// with cached_e the leading prompt tokens e holds by the prefix index
// (learned at the pick, as Dynamo's router records a routed request's
// blocks), pending_e the uncached prompt tokens this router sent to e
// awaiting their first byte (Endpoint.PendingTokens), and active_e the
// prompt tokens of the requests this router sent to e that have not
// completed (its active sequences). The argmin wins (temperature 0, the
// default); it writes 1 for the cheapest candidate(s), 0 elsewhere.
// Category none; it reads the prefix match (scheduler.MatchConsumer).
type dynamoKVCost struct {
	overlapWeight float64
	blockSize     float64
	bytesPerToken int

	mu     sync.Mutex
	active map[string]int64 // prompt tokens of uncompleted requests, by address
	cost   []float64
}

func newDynamoKVCost() *dynamoKVCost {
	return &dynamoKVCost{overlapWeight: 1, blockSize: 16, bytesPerToken: 4, active: map[string]int64{}}
}

func (*dynamoKVCost) Category() scheduler.Category { return scheduler.CategoryNone }
func (*dynamoKVCost) ConsumesMatch()               {}

func (d *dynamoKVCost) tokens(req *scheduler.Request) int64 {
	return int64(len(req.Prompt) / d.bytesPerToken)
}

func (d *dynamoKVCost) Score(cs *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	r := float64(d.tokens(req))
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cost = d.cost[:0]
	for _, e := range eps {
		uncached := r
		if m, ok := cs.Match(e); ok {
			uncached = float64(m.Uncached())
		}
		prefill := (float64(max(e.PendingTokens(), 0)) + uncached) / d.blockSize
		decode := (float64(d.active[e.Address]) + r) / d.blockSize
		d.cost = append(d.cost, d.overlapWeight*prefill+decode)
	}
	bestOneHot(d.cost, out)
}

func (d *dynamoKVCost) Picked(_ *scheduler.CycleState, req *scheduler.Request, chosen *scheduler.Endpoint) {
	d.mu.Lock()
	d.active[chosen.Address] += d.tokens(req)
	d.mu.Unlock()
}

func (d *dynamoKVCost) Done(req *scheduler.Request, ep *scheduler.Endpoint, _ scheduler.Outcome) {
	d.mu.Lock()
	if d.active[ep.Address] -= d.tokens(req); d.active[ep.Address] <= 0 {
		delete(d.active, ep.Address)
	}
	d.mu.Unlock()
}

func buildDynamoKVCost(seed uint64, _ *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
	p, err := newPrefixScorer("prefix")
	if err != nil {
		return nil, nil, err
	}
	cfg := scheduler.DefaultConfig()
	cfg.Seed = seed
	s, err := scheduler.New(cfg, []scheduler.ScorerEntry{
		{Name: "prefix", Type: "prefix", Scorer: p, Weight: 0},
		{Name: PolicyDynamoKVCost, Type: PolicyDynamoKVCost, Scorer: newDynamoKVCost(), Weight: 1},
	}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	return s, nil, err
}
