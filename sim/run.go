package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim/engine"
)

// Epoch is virtual time zero: the scheduler, scorers, detector and
// configurator see Epoch + virtual offset as "now".
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// openChatSlots is how many chat sessions (and client tenants) an
// open-loop workload interleaves.
const openChatSlots = 128

// SampleInterval is how often a run records load and weights.
const SampleInterval = 250 * time.Millisecond

// unhealthyAfter is how many missed scrapes mark a dead pod's endpoint
// unhealthy (the healthy filter then drops it).
const unhealthyAfter = 3

// RunConfig is one simulation run: a scenario at one load level under one
// policy with one seed.
type RunConfig struct {
	Scenario *Scenario
	Policy   Policy
	Level    float64
	Seed     uint64
	// TracePath overrides the scenario's trace file.
	TracePath string
	// Timeline records per-pod load, signal and weights over time.
	Timeline bool
}

type simReq struct {
	req      scheduler.Request
	seq      engine.Seq
	dec      *scheduler.Decision
	spec     reqSpec
	buf      []byte
	server   int
	client   int
	phase    int
	active   int // index in runner.active
	arrival  time.Duration
	measured bool
	gen      uint32
	live     bool
}

type runner struct {
	cfg   RunConfig
	sc    *Scenario
	sched *scheduler.Scheduler
	ctl   *control.Loop
	gens  []generator // per phase
	wrng  *rand.Rand  // workload
	arng  *rand.Rand  // arrivals

	servers []*engine.Engine
	caps    []float64
	dead    []bool
	missed  []int // scrapes a dead pod has missed
	emit    []func(engine.Event)
	addrIdx map[string]int
	eps     []scheduler.Endpoint // the pool discovery reports

	h        eventHeap
	now      time.Duration
	warm     time.Duration // statistics start
	end      time.Duration // issuing stops
	scale    float64       // scenario time per run time (a trace's speed-up; else 1)
	phase    int
	free     []*simReq
	active   []*simReq // requests in an engine
	segs     segCache
	inflight int
	clients  int // closed loop: target concurrency now
	busy     int // closed loop: clients with a request or a pending arrival
	openGen  uint32
	openN    int
	rate     float64

	res       Result
	phases    []phaseAcc
	markGen   []int64 // generation tokens at warm-up, per server
	markHits  []int64
	markQuery []int64
	loadSum   []float64
	loadN     int
	signal    float64 // the loop's latest signal
	mode      string  // the loop's latest mode
}

// Run simulates one scenario at one level under one policy. It is
// deterministic for a given RunConfig. The result is a copy: nothing of
// the run stays reachable from it.
func Run(cfg RunConfig) (*Result, error) {
	sc := cfg.Scenario
	if sc == nil {
		return nil, errors.New("sim: no scenario")
	}
	sched, loop, err := cfg.Policy.Build(cfg.Seed, sc)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", cfg.Policy.Name, err)
	}
	r := &runner{
		cfg:   cfg,
		sc:    sc,
		sched: sched,
		ctl:   loop,
		wrng:  rand.New(rand.NewPCG(cfg.Seed, 0x77)),
		arng:  rand.New(rand.NewPCG(cfg.Seed, 0xa7)),
		scale: 1,
	}
	for i := range sc.Phases {
		g, err := newGenerator(sc, sc.Phases[i].Work(), cfg.Seed, cfg.TracePath)
		if err != nil {
			return nil, err
		}
		r.gens = append(r.gens, g)
	}
	if sc.Load.Mode == ModeTrace {
		r.scale = cfg.Level
	}
	r.end = r.at(sc.Duration)
	r.warm = r.at(sc.Warmup)
	r.res = Result{Scenario: sc.Name, Policy: cfg.Policy.Name, Level: cfg.Level, Seed: cfg.Seed}
	if err := r.setup(); err != nil {
		return nil, err
	}
	r.loop()
	r.finish()
	res := r.res
	return &res, nil
}

// at converts a scenario offset to run time.
func (r *runner) at(d time.Duration) time.Duration {
	return time.Duration(float64(d) / r.scale)
}

func (r *runner) setup() error {
	r.addrIdx = map[string]int{}
	if r.cfg.Timeline {
		tl := &Timeline{}
		for _, e := range r.sched.Scorers() {
			tl.Scorers = append(tl.Scorers, e.Name)
		}
		tl.Weights = make([][]float64, len(tl.Scorers))
		r.res.Timeline = tl
	}
	for _, c := range r.sc.Capacities() {
		if err := r.addServer(c); err != nil {
			return err
		}
	}
	r.sched.SetEndpoints(r.eps)
	r.mode = r.sched.Weights().Mode

	r.h.push(event{at: r.sc.ScrapeInterval, kind: evScrape})
	if r.ctl != nil {
		r.h.push(event{at: r.ctl.Interval(), kind: evControl})
	}
	r.h.push(event{at: 0, kind: evSample})
	r.h.push(event{at: r.warm, kind: evMark, idx: 0})
	r.h.push(event{at: r.end, kind: evMark, idx: 1})
	for i, ev := range r.sc.Events {
		r.h.push(event{at: r.at(ev.At), kind: evFleet, idx: int32(i)})
	}
	r.phases = make([]phaseAcc, len(r.sc.Phases))
	for i, ph := range r.sc.Phases {
		start := r.at(r.sc.PhaseStart(i))
		r.res.Phases = append(r.res.Phases, PhaseResult{Name: ph.Name, Start: start, End: start + r.at(ph.Duration)})
		if i > 0 {
			r.h.push(event{at: start, kind: evPhase, idx: int32(i)})
		}
	}
	r.enterPhase(0)
	if r.sc.Load.Mode == ModeTrace {
		r.scheduleTrace()
	}
	return nil
}

// addServer starts a server of capacity c and adds its endpoint to the
// pool (the caller installs the pool).
func (r *runner) addServer(c float64) error {
	i := len(r.servers)
	ecfg := r.sc.EngineFor(c)
	e, err := engine.New(ecfg)
	if err != nil {
		return err
	}
	addr := "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250+1) + ":8000"
	r.servers = append(r.servers, e)
	r.caps = append(r.caps, c)
	r.dead = append(r.dead, false)
	r.missed = append(r.missed, 0)
	r.emit = append(r.emit, r.onEvent)
	r.addrIdx[addr] = i
	r.eps = append(r.eps, scheduler.Endpoint{
		Address:        addr,
		Name:           "pod-" + strconv.Itoa(i),
		Models:         []string{r.sc.Model},
		Capacity:       c,
		CacheBlockSize: ecfg.BlockSize,
		CacheBlocks:    ecfg.NumBlocks,
		ScrapedAt:      Epoch.Add(r.now),
	})
	r.markGen = append(r.markGen, 0)
	r.markHits = append(r.markHits, 0)
	r.markQuery = append(r.markQuery, 0)
	r.loadSum = append(r.loadSum, 0)
	if tl := r.res.Timeline; tl != nil {
		tl.PodLoad = append(tl.PodLoad, make([]float64, len(tl.T)))
	}
	return nil
}

func (r *runner) loop() {
	for r.h.len() > 0 {
		ev := r.h.pop()
		r.now = ev.at
		switch ev.kind {
		case evArrival:
			r.arrive(int(ev.idx))
		case evOpen:
			if ev.gen == r.openGen {
				r.arrive(-1)
				if r.sc.Load.Mode == ModeTrace {
					r.scheduleTrace()
				} else {
					r.scheduleOpen()
				}
			}
		case evStepEnd:
			r.stepEnd(int(ev.idx))
		case evTimeout:
			if ev.r.live && ev.r.gen == ev.gen {
				r.timeout(ev.r)
			}
		case evScrape:
			r.scrape()
			if r.running() {
				r.h.push(event{at: r.now + r.sc.ScrapeInterval, kind: evScrape})
			}
		case evControl:
			r.control()
			if r.running() {
				r.h.push(event{at: r.now + r.ctl.Interval(), kind: evControl})
			}
		case evSample:
			r.sample()
			if r.running() {
				r.h.push(event{at: r.now + SampleInterval, kind: evSample})
			}
		case evPhase:
			r.enterPhase(int(ev.idx))
		case evOnset:
			if int(ev.idx) == r.phase {
				r.onsetSample()
				if ev.gen < uint32(OnsetWindow/onsetTick) {
					r.h.push(event{at: r.now + onsetTick, kind: evOnset, idx: ev.idx, gen: ev.gen + 1})
				}
			}
		case evFleet:
			r.fleetEvent(int(ev.idx))
		case evDrop:
			r.dropEndpoint(int(ev.idx))
		case evMark:
			r.mark(ev.idx == 1)
		}
	}
}

// running reports whether periodic events should continue.
func (r *runner) running() bool { return r.now < r.end || r.inflight > 0 }

// enterPhase switches to phase i: its load level and workload apply from
// now, and its onset window starts.
func (r *runner) enterPhase(i int) {
	if i > 0 {
		r.phaseTokens(i - 1)
	}
	r.phase = i
	r.phases[i].genStart, r.phases[i].winStart = r.genTotal(), r.now
	r.h.push(event{at: r.now, kind: evOnset, idx: int32(i)})
	if r.sc.Load.Mode == ModeTrace {
		return
	}
	level := r.sc.Phases[i].Level
	if level == 0 {
		level = r.cfg.Level
	}
	switch r.sc.Load.Mode {
	case ModeClosed:
		r.setClients(int(level))
	case ModeOpen:
		r.rate = level
		r.scheduleOpen()
	}
}

// setClients sets the closed-loop concurrency: new clients start at once,
// extra clients retire when their request ends (see next).
func (r *runner) setClients(n int) {
	r.clients = n
	for r.busy < n {
		r.h.push(event{at: r.now, kind: evArrival, idx: int32(r.busy)})
		r.busy++
	}
}

func (r *runner) scheduleOpen() {
	r.openGen++
	gap := time.Duration(r.arng.ExpFloat64() / r.rate * float64(time.Second))
	if at := r.now + gap; at < r.end {
		r.h.push(event{at: at, kind: evOpen, gen: r.openGen})
	}
}

func (r *runner) scheduleTrace() {
	tg := r.gens[0].(*traceGen)
	if tg.remaining() == 0 {
		return
	}
	at := r.at(time.Duration(tg.entries[tg.i].Timestamp) * time.Millisecond)
	if at < r.end {
		r.h.push(event{at: max(at, r.now), kind: evOpen, gen: r.openGen})
	}
}

// next lets closed-loop client c issue its next request, or retire.
func (r *runner) next(c int) {
	if c < 0 {
		return
	}
	if c >= r.clients || r.now >= r.end {
		r.busy--
		return
	}
	var think time.Duration
	if m := r.sc.Load.ThinkTime; m > 0 {
		think = time.Duration(r.arng.ExpFloat64() * float64(m))
	}
	r.h.push(event{at: r.now + think, kind: evArrival, idx: int32(c)})
}

func (r *runner) getReq() *simReq {
	if n := len(r.free); n > 0 {
		q := r.free[n-1]
		r.free = r.free[:n-1]
		return q
	}
	return &simReq{}
}

func (r *runner) putReq(q *simReq) {
	q.live = false
	q.dec = nil
	q.gen++
	r.free = append(r.free, q)
}

// arrive issues one request from client c (−1: open loop).
func (r *runner) arrive(c int) {
	if c >= 0 && (c >= r.clients || r.now >= r.end) {
		r.busy--
		return
	}
	q := r.getReq()
	q.client, q.arrival, q.live, q.phase = c, r.now, true, r.phase
	q.measured = r.now >= r.warm && r.now < r.end
	slot := c
	if c < 0 {
		// Open loop: arrivals cycle over a pool of sessions / tenants.
		slot = r.openN % openChatSlots
		r.openN++
	}
	r.gens[r.phase].next(r.wrng, slot, &q.spec)
	q.buf = q.buf[:0]
	for _, s := range q.spec.segs {
		q.buf = r.segs.append(q.buf, s)
	}
	promptBytes := len(q.buf)
	q.buf = appendSegment(q.buf, q.spec.out)
	q.seq.Reset()
	q.seq.Hashes = blockHashes(q.seq.Hashes, q.buf, r.sc.EngineConfig().BlockSize)
	q.seq.PromptTokens = promptBytes / BytesPerToken
	q.seq.OutputTokens = q.spec.out.tokens
	q.seq.Data = q
	q.req = scheduler.Request{
		Model:     r.sc.Model,
		Prompt:    q.buf[:promptBytes],
		SessionID: q.spec.sessionID,
		Arrival:   Epoch.Add(r.now),
	}
	r.res.Issued++
	if q.measured {
		r.res.Measured++
		r.res.Phases[q.phase].Measured++
	}
	r.inflight++
	dec, err := r.sched.Pick(context.Background(), &q.req)
	if err != nil {
		r.fail(q)
		return
	}
	q.dec = dec
	if r.dispatch(q) {
		r.h.push(event{at: r.now + r.sc.Timeout, kind: evTimeout, r: q, gen: q.gen})
	}
}

// dispatch sends q to its decision's endpoint, moving along the fallbacks
// while the endpoint is down (connection refused, as the proxies retry).
// It reports whether q is now in an engine; if not, q has failed.
func (r *runner) dispatch(q *simReq) bool {
	for {
		i := r.addrIdx[q.dec.Endpoint.Address]
		if !r.dead[i] {
			q.server = i
			if err := r.servers[i].Add(&q.seq); err != nil {
				r.fail(q)
				return false
			}
			q.active = len(r.active)
			r.active = append(r.active, q)
			r.kick(i)
			return true
		}
		r.res.Retried++
		if !q.dec.Advance() {
			r.fail(q)
			return false
		}
	}
}

// leave removes q from the active list (it left its engine).
func (r *runner) leave(q *simReq) {
	last := r.active[len(r.active)-1]
	r.active[q.active] = last
	last.active = q.active
	r.active = r.active[:len(r.active)-1]
}

func (r *runner) fail(q *simReq) {
	r.res.Failed++
	if q.measured {
		r.res.MeasuredFailed++
	}
	if q.dec != nil {
		q.dec.Done(scheduler.Outcome{Kind: scheduler.OutcomeError, Status: 503})
	}
	r.inflight--
	c := q.client
	r.putReq(q)
	r.next(c)
}

func (r *runner) timeout(q *simReq) {
	r.servers[q.server].Abort(&q.seq)
	r.leave(q)
	r.res.TimedOut++
	if q.measured {
		r.res.MeasuredTimedOut++
	}
	o := scheduler.Outcome{Kind: scheduler.OutcomeCanceled, Latency: r.now - q.arrival}
	if q.seq.Generated > 0 {
		o.TTFT = q.seq.FirstTokenAt - q.arrival
	}
	q.dec.Done(o)
	r.inflight--
	c := q.client
	s := q.server
	r.putReq(q)
	r.next(c)
	r.kick(s)
}

func (r *runner) kick(i int) {
	e := r.servers[i]
	if r.dead[i] || e.Busy() {
		return
	}
	if d, ok := e.StartStep(); ok {
		r.h.push(event{at: r.now + d, kind: evStepEnd, idx: int32(i)})
	}
}

func (r *runner) stepEnd(i int) {
	if r.dead[i] {
		return // the step died with the server
	}
	r.servers[i].FinishStep(r.now, r.emit[i])
	r.kick(i)
}

// onEvent handles engine events; it only schedules, never re-enters the
// engine.
func (r *runner) onEvent(ev engine.Event) {
	q := ev.Seq.Data.(*simReq)
	if ev.Kind == engine.EventFirstToken {
		// The first token is the first response byte a proxy would see:
		// the prompt stops counting as pending prefill on the endpoint.
		q.dec.FirstByte()
	}
	if ev.Kind != engine.EventFinished {
		return
	}
	ttft := q.seq.FirstTokenAt - q.arrival
	e2e := r.now - q.arrival
	if q.measured {
		t, e := float64(ttft)/1e6, float64(e2e)/1e6
		r.res.TTFT = append(r.res.TTFT, t)
		r.res.E2E = append(r.res.E2E, e)
		p := &r.res.Phases[q.phase]
		p.TTFT = append(p.TTFT, t)
		p.E2E = append(p.E2E, e)
	}
	r.res.Completed++
	q.dec.Done(scheduler.Outcome{Kind: scheduler.OutcomeSuccess, Status: 200, TTFT: ttft, Latency: e2e})
	r.leave(q)
	r.inflight--
	c := q.client
	r.putReq(q)
	r.next(c)
}

func (r *runner) scrape() {
	at := Epoch.Add(r.now)
	for i, e := range r.servers {
		idx := r.poolIndex(i)
		if idx < 0 {
			continue
		}
		ep := &r.eps[idx]
		if r.dead[i] {
			if r.missed[i]++; r.missed[i] >= unhealthyAfter {
				ep.State = scheduler.StateUnhealthy
			}
			continue
		}
		st := e.Stats()
		ep.Waiting, ep.Running, ep.KVUtil = float64(st.Waiting), float64(st.Running), st.KVUtil
		ep.ScrapedAt = at
	}
	r.sched.SetEndpoints(r.eps)
}

// poolIndex returns server i's index in r.eps, or −1 once it was dropped.
func (r *runner) poolIndex(i int) int {
	if i < len(r.eps) && r.addrIdx[r.eps[i].Address] == i {
		return i // no endpoint dropped before it
	}
	for j := range r.eps {
		if r.addrIdx[r.eps[j].Address] == i {
			return j
		}
	}
	return -1
}

func (r *runner) control() {
	t := r.ctl.Tick(Epoch.Add(r.now), r.sched.Pool().Pointers())
	r.signal = t.Signal.Value
	if t.Changed() && t.Err == nil {
		r.res.WeightChanges++
	}
	if t.Mode != r.mode {
		if r.mode == configurator.ModeCalm && (t.Mode == configurator.ModeRebalance || t.Mode == configurator.ModeFrozen) {
			if ph := &r.res.Phases[r.phase]; r.now >= r.warm {
				ph.RebalanceEntries++
			} else {
				ph.WarmupRebalanceEntries++
			}
		}
		if t.Mode == configurator.ModeFrozen {
			r.res.Freezes++
		}
		r.mode = t.Mode
	}
}

func (r *runner) sample() {
	inWindow := r.now >= r.warm && r.now < r.end
	tl := r.res.Timeline
	for i, e := range r.servers {
		var load float64
		if !r.dead[i] {
			st := e.Stats()
			load = float64(st.Waiting + st.Running)
		}
		if inWindow {
			r.loadSum[i] += load
		}
		if tl != nil && r.now <= r.end {
			tl.PodLoad[i] = append(tl.PodLoad[i], load)
		}
	}
	if inWindow {
		r.loadN++
	}
	if tl != nil && r.now <= r.end {
		tl.T = append(tl.T, r.now.Seconds())
		w := r.sched.Weights()
		for s := range tl.Weights {
			tl.Weights[s] = append(tl.Weights[s], w.Values[s])
		}
		tl.Signal = append(tl.Signal, r.signal)
		mode := w.Mode
		if mode == "" {
			mode = configurator.ModeStatic
		}
		tl.Mode = append(tl.Mode, mode)
	}
}

func (r *runner) mark(end bool) {
	for i, e := range r.servers {
		st := e.Stats()
		if !end {
			r.markGen[i], r.markHits[i], r.markQuery[i] = st.GenerationTokens, st.PrefixHits, st.PrefixQueries
			continue
		}
		r.markGen[i] = st.GenerationTokens - r.markGen[i]
		r.markHits[i] = st.PrefixHits - r.markHits[i]
		r.markQuery[i] = st.PrefixQueries - r.markQuery[i]
	}
	if !end {
		// The current phase's share of the window starts now.
		r.phases[r.phase].genStart, r.phases[r.phase].winStart = r.genTotal(), r.now
		return
	}
	r.phaseTokens(r.phase)
	var gen, hits, query int64
	for i := range r.servers {
		gen += r.markGen[i]
		hits += r.markHits[i]
		query += r.markQuery[i]
	}
	if win := (r.end - r.warm).Seconds(); win > 0 {
		r.res.OutputTokensPerSec = float64(gen) / win
	}
	if query > 0 {
		r.res.PrefixHitRate = float64(hits) / float64(query)
	}
}

func (r *runner) finish() {
	slices.Sort(r.res.TTFT)
	slices.Sort(r.res.E2E)
	if r.loadN > 0 {
		r.res.LoadMin = math.Inf(1)
		var sum, capSum, top, topRatio float64
		for i, s := range r.loadSum {
			avg := s / float64(r.loadN)
			r.res.PodLoad = append(r.res.PodLoad, avg)
			r.res.LoadMax = max(r.res.LoadMax, avg)
			r.res.LoadMin = min(r.res.LoadMin, avg)
			sum += avg
			top = max(top, avg)
			if !r.dead[i] {
				capSum += r.caps[i]
				topRatio = max(topRatio, avg/r.caps[i])
			}
		}
		if sum > 0 {
			r.res.BusiestShare = top / sum
			r.res.BusiestRatio = topRatio / (sum / capSum)
		}
	}
	for _, e := range r.servers {
		r.res.Preemptions += e.Stats().Preemptions
	}
	r.finishPhases()
}
