package bench

import (
	"context"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/sim/scenario"
)

// RunResult is one run: the scenario at one level under one policy, one
// repeat.
type RunResult struct {
	Policy string
	Level  float64
	Repeat int
	// Order is the run's place (1-based) among the policies of its
	// repeat and level.
	Order int
	Seed  uint64
	Salt  uint64
	// Warm and End are the measurement window's offsets; Phases the
	// scenario's phases (scaled) with their offsets.
	Warm, End time.Duration
	Phases    []PhaseSpan
	Requests  []Request
	Pods      []PodSample
	PodNames  []string
	// Modes, ModeChanges and WeightVersions come from the router's admin
	// server (empty without one).
	Modes          []ModePoint
	ModeChanges    []ModeChange
	WeightVersions int
	// Wall is the run's length; CPU the process's CPU time during it
	// (0 when Deps.CPU is nil).
	Wall, CPU time.Duration
	// Timeout is the client timeout of one request, at which a miss
	// counts (Stats); SLO is the service level goodput counts against
	// (the scenario's).
	Timeout time.Duration
	SLO     scenario.SLO
	// AdminErr is why the timeline is missing, if it is.
	AdminErr string
	// HerdPicks is the router's herd picks over the run (its
	// trimtab_scheduler_endpoint_herd_picks_total summed at the end; 0
	// without an admin server).
	HerdPicks int64
	// PromptCheck compares the prompt sizes the servers reported with
	// the intended ones.
	PromptCheck PromptCheck
	// Classes are the scenario's request classes
	// (scenario.Scenario.RequestClasses; nil without any), which
	// Request.Class indexes.
	Classes []string
}

// PhaseSpan is one phase's name and offsets.
type PhaseSpan struct {
	Name       string
	Start, End time.Duration
}

// player plays one run.
type player struct {
	sc     *scenario.Scenario
	level  float64
	url    string
	hc     *http.Client
	clk    clock.WithTicker
	start  time.Time
	render *scenario.Renderer

	chains chains // Responses sessions' last response ids

	// phaseClass is each phase's class (nil: no classes); streams the
	// scenario's streams.
	phaseClass []int
	streams    []*streamPlay

	mu     sync.Mutex // guards render and out
	out    []Request
	phase  int
	alive  []bool // closed loop: client c has a goroutine
	target int    // closed loop: concurrency now
	wg     sync.WaitGroup
}

func (p *player) now() time.Duration { return p.clk.Since(p.start) }

// sleepUntil waits until offset at; false when ctx ended first.
func (p *player) sleepUntil(ctx context.Context, at time.Duration) bool {
	d := at - p.now()
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := p.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *player) levelOf(i int) float64 {
	if l := p.sc.Phases[i].Level; l != 0 {
		return l
	}
	return p.level
}

// fire sends one rendered request of the scenario's load, scheduled at
// sched, and records it.
func (p *player) fire(ctx context.Context, phase int, sched time.Duration, r *scenario.Rendered) {
	var cls *scenario.RequestClass
	class := -1
	if p.phaseClass != nil {
		class, cls = p.phaseClass[phase], p.sc.Phases[phase].Work().Class
	}
	p.fireAs(ctx, phase, sched, r, class, cls, p.sc.Timeout)
}

// fireAs sends one rendered request of class (cls its headers) with
// client timeout timeout, scheduled at sched, and records it.
func (p *player) fireAs(ctx context.Context, phase int, sched time.Duration, r *scenario.Rendered, class int, cls *scenario.RequestClass, timeout time.Duration) {
	sent := p.now()
	var prev string
	if r.Agent != nil && r.Agent.Turn > 0 {
		prev = p.chains.get(r.Agent.Session)
	}
	res := sendAs(ctx, p.hc, p.clk, p.url, p.sc.Model, r, prev, timeout, cls)
	if r.Agent != nil && r.Agent.API == scenario.AgentAPIResponses {
		p.chains.set(r.Agent.Session, res.ResponseID) // "" after a failure: the next turn resends the conversation
	}
	res.Phase, res.Scheduled, res.Sent, res.Class = phase, sched, sent, class
	res.Measured = sched >= p.sc.Warmup && sched < p.sc.Duration
	p.mu.Lock()
	p.out = append(p.out, res)
	p.mu.Unlock()
}

// play issues the scenario's requests until its end and waits for every
// request in flight (each bounded by the scenario's timeout).
func (p *player) play(ctx context.Context) []Request {
	for _, s := range p.streams {
		p.wg.Add(1)
		go p.stream(ctx, s)
	}
	switch p.sc.Load.Mode {
	case scenario.ModeClosed:
		p.closed(ctx)
	default:
		p.open(ctx)
	}
	p.wg.Wait()
	return p.out
}

// closed runs a closed loop: each phase sets the number of clients; new
// clients start at once, extra ones retire after their request.
func (p *player) closed(ctx context.Context) {
	for i := range p.sc.Phases {
		if !p.sleepUntil(ctx, p.sc.PhaseStart(i)) {
			return
		}
		n := int(p.levelOf(i))
		p.mu.Lock()
		p.phase, p.target = i, n
		for len(p.alive) < n {
			p.alive = append(p.alive, false)
		}
		for c := 0; c < n; c++ {
			if !p.alive[c] {
				p.alive[c] = true
				p.wg.Add(1)
				go p.client(ctx, c)
			}
		}
		p.mu.Unlock()
	}
	p.sleepUntil(ctx, p.sc.Duration)
}

func (p *player) client(ctx context.Context, c int) {
	defer p.wg.Done()
	var sched time.Duration
	for first := true; ; first = false {
		p.mu.Lock()
		now := p.now()
		if c >= p.target || now >= p.sc.Duration || ctx.Err() != nil {
			p.alive[c] = false
			p.mu.Unlock()
			return
		}
		phase := p.phase
		think := p.render.Think()
		r := p.render.Next(phase, c)
		p.mu.Unlock()
		if first {
			sched = now
		}
		sched += think
		if !p.sleepUntil(ctx, sched) {
			p.mu.Lock()
			p.alive[c] = false
			p.mu.Unlock()
			return
		}
		p.fire(ctx, phase, sched, &r)
		sched = p.now()
		if r.Agent != nil {
			sched += r.Agent.Pause // the tool call
		}
	}
}

// open runs Poisson arrivals at each phase's rate, or a trace's arrivals
// at the level's speed-up; every arrival is its own goroutine.
func (p *player) open(ctx context.Context) {
	trace := p.sc.Load.Mode == scenario.ModeTrace
	var at time.Duration
	for i := 0; i < len(p.sc.Phases); {
		end := p.sc.PhaseStart(i) + p.sc.Phases[i].Duration
		p.mu.Lock()
		var next time.Duration
		if trace {
			a, ok := p.render.PeekArrival()
			if !ok {
				p.mu.Unlock()
				return
			}
			next = time.Duration(float64(a) / p.level)
		} else {
			next = at + p.render.Gap(p.levelOf(i))
		}
		if next >= end && !trace {
			p.mu.Unlock()
			at, i = end, i+1
			continue
		}
		if next >= p.sc.Duration {
			p.mu.Unlock()
			return
		}
		for trace && i+1 < len(p.sc.Phases) && next >= end {
			i++
			end = p.sc.PhaseStart(i) + p.sc.Phases[i].Duration
		}
		r := p.render.Next(i, -1)
		p.phase = i
		p.mu.Unlock()
		at = next
		if !p.sleepUntil(ctx, at) {
			return
		}
		p.wg.Add(1)
		go func(phase int, sched time.Duration) {
			defer p.wg.Done()
			p.fire(ctx, phase, sched, &r)
		}(i, at)
	}
}

// snapshot copies the requests finished so far.
func (p *player) snapshot() ([]Request, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.out...), p.phase
}

// streamPlay is one of the scenario's streams in a run.
type streamPlay struct {
	st     *scenario.Stream
	class  int
	render *scenario.StreamRenderer // guarded by player.mu, as issued
	issued int
}

// next draws the stream's next request, its phase and (open loop) the gap
// to the one after it; false once the stream has issued its requests or
// the run stops issuing — except for a job (a closed-loop stream with
// requests), which issues all of them as the simulator plays it.
func (p *player) next(s *streamPlay) (r scenario.Rendered, phase int, gap time.Duration, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.now() >= p.sc.Duration && !s.st.Job() || s.st.Requests > 0 && s.issued >= s.st.Requests {
		return r, 0, 0, false
	}
	s.issued++
	r = s.render.Next()
	if s.st.Rate > 0 {
		gap = s.render.Gap(s.st.Rate)
	}
	return r, p.phase, gap, true
}

// stream plays stream s from its start, as the simulator does: Poisson
// arrivals at its rate, or its concurrency of closed-loop clients, until
// it has issued its requests or the run stops issuing. Each request
// carries the stream's class and its timeout.
func (p *player) stream(ctx context.Context, s *streamPlay) {
	defer p.wg.Done()
	if !p.sleepUntil(ctx, s.st.Start) {
		return
	}
	fire := func(phase int, sched time.Duration, r *scenario.Rendered) {
		p.fireAs(ctx, phase, sched, r, s.class, &s.st.RequestClass, s.st.Timeout)
	}
	if s.st.Rate > 0 {
		at := s.st.Start
		for {
			r, phase, gap, ok := p.next(s)
			if !ok || !p.sleepUntil(ctx, at) {
				return
			}
			p.wg.Add(1)
			go func(sched time.Duration) {
				defer p.wg.Done()
				fire(phase, sched, &r)
			}(at)
			at += gap
		}
	}
	for range s.st.Concurrency {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for ctx.Err() == nil {
				r, phase, _, ok := p.next(s)
				if !ok {
					return
				}
				fire(phase, p.now(), &r)
			}
		}()
	}
}
