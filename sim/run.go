package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim/engine"
	"github.com/trimtab/trimtab/sim/scenario"
)

// Epoch is virtual time zero: the scheduler, scorers, detector and
// configurator see Epoch + virtual offset as "now".
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// SampleInterval is how often a run records load and weights.
const SampleInterval = 250 * time.Millisecond

// unhealthyAfter is how many missed scrapes mark a dead pod's endpoint
// unhealthy (the healthy filter then drops it).
const unhealthyAfter = 3

// RunConfig is one simulation run: a scenario at one load level under one
// policy with one seed.
type RunConfig struct {
	Scenario *scenario.Scenario
	Policy   Policy
	Level    float64
	Seed     uint64
	// TracePath overrides the scenario's trace file.
	TracePath string
	// Timeline records per-pod load, signal and weights over time.
	Timeline bool
	// Calibration configures every router's calibrator (nil:
	// fleet.DefaultCalibrationConfig).
	Calibration *fleet.CalibrationConfig
	// Retune runs the slow loop on the first router (sim/slowloop.go;
	// nil or mode off: none). The policy must be a profile with its loop
	// on.
	Retune *control.RetuneConfig
}

type simReq struct {
	req      scheduler.Request
	seq      engine.Seq
	dec      *scheduler.Decision
	spec     scenario.Request
	buf      []byte
	rbuf     []byte // the router's prompt when it differs (agentic responses)
	server   int
	client   int
	phase    int
	active   int // index in runner.active
	arrival  time.Duration
	measured bool
	gen      uint32
	live     bool
	// Flow control and streams: the request's stream (0: the scenario's
	// load; k: Streams[k−1]), its client timeout, its place in the
	// router's queue (nil: not waiting), its lease, the notify function
	// Offer calls (made once per simReq), and whether flow control
	// dropped it.
	stream  int
	timeout time.Duration
	ticket  *flow.Ticket
	lease   flow.Lease
	notify  func(*scheduler.Decision, flow.Lease, error)
	dropped bool
	// win and wi are the request's record in the slow loop's traffic
	// window (win nil: not recorded).
	win *trafficWindow
	wi  int
}

type runner struct {
	cfg RunConfig
	sc  *scenario.Scenario
	// routers are the router replicas (one unless Scenario.Routers says
	// otherwise); sched and ctl are the first one's, whose weights and
	// signal the timeline records.
	routers  []*router
	rr       int // round-robin spread: replicas used so far
	sched    *scheduler.Scheduler
	ctl      *control.Loop
	gens     []scenario.Generator // per phase
	drawLoRA []*adapterDraw       // per phase; nil entries: no adapters
	wrng     *rand.Rand           // workload
	arng     *rand.Rand           // arrivals

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
	segs     scenario.SegCache
	inflight int
	clients  int // closed loop: target concurrency now
	busy     int // closed loop: clients with a request or a pending arrival
	openGen  uint32
	openN    int
	rate     float64

	measure // the measurement state (measure.go)

	// Flow control (sim/flow.go): the policy's flow section, the
	// dispatcher's poll, whether a wake or a poll is scheduled, decisions
	// to act on; the classes and streams.
	flowCfg                *flow.Config
	flowPoll               time.Duration
	flowPolling, flowWoken bool
	flowReady              []flowDecision
	classes                []classRun
	phaseClass             []int // class of each phase's load (empty: no classes)
	streams                []streamRun

	retune *simRetune // the slow loop (nil: off)
}

// Run simulates one scenario at one level under one policy. It is
// deterministic for a given RunConfig. The result is a copy: nothing of
// the run stays reachable from it.
func Run(cfg RunConfig) (*Result, error) { return runWith(&runner{cfg: cfg}) }

// runWith runs r, which holds only its RunConfig; tests keep r to look
// inside after the run.
func runWith(r *runner) (*Result, error) {
	cfg := r.cfg
	sc := cfg.Scenario
	if sc == nil {
		return nil, errors.New("sim: no scenario")
	}
	r.sc, r.scale = sc, 1
	r.wrng = rand.New(rand.NewPCG(cfg.Seed, 0x77))
	r.arng = rand.New(rand.NewPCG(cfg.Seed, 0xa7))
	if err := r.buildRouters(); err != nil {
		return nil, fmt.Errorf("policy %s: %w", cfg.Policy.Name, err)
	}
	// A phase that does not override the workload continues the stream of
	// the first such phase where restarting it would repeat what it
	// already sent: a trace (arrivals and rendering walk the same
	// entries), unique prompts, a group-major cycle.
	continues := sc.Load.Mode == scenario.ModeTrace || sc.Workload.Kind == scenario.KindUniform || sc.Workload.Order == scenario.OrderGroupMajor || sc.Workload.Kind == scenario.KindAgentic
	plain := -1
	for i := range sc.Phases {
		zero := sc.Phases[i].Workload.IsZero()
		if zero && plain >= 0 && continues {
			r.gens = append(r.gens, r.gens[plain])
			continue
		}
		g, err := scenario.NewGenerator(sc, sc.Phases[i].Work(), cfg.Seed, cfg.TracePath)
		if err != nil {
			return nil, err
		}
		if zero && plain < 0 {
			plain = i
		}
		r.gens = append(r.gens, g)
	}
	for i := range sc.Phases {
		r.drawLoRA = append(r.drawLoRA, newAdapterDraw(sc.Phases[i].Work(), cfg.Seed))
	}
	if sc.Load.Mode == scenario.ModeTrace {
		r.scale = cfg.Level
	}
	r.end = r.at(sc.Duration)
	r.warm = r.at(sc.Warmup)
	r.res = Result{Scenario: sc.Name, Policy: cfg.Policy.Name, Level: cfg.Level, Seed: cfg.Seed, Routers: sc.Routers, SLO: sc.SLO, Engine: sc.EngineName}
	if err := r.setup(); err != nil {
		return nil, err
	}
	r.loop()
	r.finish()
	r.finishClasses()
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
	r.setEndpoints()
	for _, rt := range r.routers {
		rt.mode = rt.sched.Weights().Mode
	}

	r.h.push(event{at: r.sc.ScrapeInterval, kind: evScrape})
	if r.ctl != nil {
		r.h.push(event{at: 0, kind: evControl}) // trimtab serve ticks at start
	}
	if r.syncing() {
		r.h.push(event{at: r.sc.Routers.SyncInterval, kind: evSync})
	}
	r.h.push(event{at: r.routers[0].cal.Interval(), kind: evCalibrate})
	if err := r.buildRetune(); err != nil {
		return err
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
	if r.sc.Load.Mode == scenario.ModeTrace {
		r.scheduleTrace()
	}
	r.setupClasses()
	return nil
}

// addServer starts a server of capacity c and adds its endpoint to the
// pool (the caller installs the pool).
func (r *runner) addServer(c float64) error {
	i := len(r.servers)
	ecfg, declared := r.sc.ServerEngine(i, c)
	e, err := engine.New(ecfg)
	if err != nil {
		return err
	}
	addr := "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250+1) + ":8000"
	r.servers = append(r.servers, e)
	r.caps = append(r.caps, declared)
	r.dead = append(r.dead, false)
	r.missed = append(r.missed, 0)
	r.emit = append(r.emit, r.onEvent)
	r.addrIdx[addr] = i
	r.eps = append(r.eps, scheduler.Endpoint{
		Address:        addr,
		Name:           "pod-" + strconv.Itoa(i),
		Models:         []string{r.sc.Model},
		Capacity:       declared,
		CacheBlockSize: ecfg.BlockSize,
		CacheBlocks:    ecfg.NumBlocks,
		ScrapedAt:      Epoch.Add(r.now),
	})
	r.pods = append(r.pods, podWindow{})
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
				if r.sc.Load.Mode == scenario.ModeTrace {
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
		case evRetune:
			r.retuneStep()
			if r.running() {
				r.h.push(event{at: r.now + r.retune.interval, kind: evRetune})
			}
		case evSync:
			r.sendSync()
			if r.running() {
				r.h.push(event{at: r.now + r.sc.Routers.SyncInterval, kind: evSync})
			}
		case evSyncDeliver:
			r.deliverSync(ev.msg)
		case evFlow:
			r.flowEvent(int(ev.idx))
		case evStream:
			r.streamEvent(int(ev.idx), ev.gen == 1)
		case evCalibrate:
			r.calibrate()
			if r.running() {
				r.h.push(event{at: r.now + r.routers[0].cal.Interval(), kind: evCalibrate})
			}
		}
	}
}

// setEndpoints installs the pool discovery reports in every replica.
func (r *runner) setEndpoints() {
	for _, rt := range r.routers {
		rt.sched.SetEndpoints(r.eps)
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
	if r.sc.Load.Mode == scenario.ModeTrace {
		return
	}
	level := r.sc.Phases[i].Level
	if level == 0 {
		level = r.cfg.Level
	}
	switch r.sc.Load.Mode {
	case scenario.ModeClosed:
		r.setClients(int(level))
	case scenario.ModeOpen:
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
	gap := time.Duration(float64(time.Second) / r.rate)
	if r.sc.Load.Arrivals != scenario.ArrivalsConstant {
		gap = time.Duration(r.arng.ExpFloat64() / r.rate * float64(time.Second))
	}
	if at := r.now + gap; at < r.end {
		r.h.push(event{at: at, kind: evOpen, gen: r.openGen})
	}
}

func (r *runner) scheduleTrace() {
	next, ok := r.gens[0].(*scenario.TraceGen).PeekArrival()
	if !ok {
		return
	}
	if at := r.at(next); at < r.end {
		r.h.push(event{at: max(at, r.now), kind: evOpen, gen: r.openGen})
	}
}
