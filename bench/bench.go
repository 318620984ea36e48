package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/scenario"
)

// Report is a whole bench: every run in the order it ran.
type Report struct {
	Scenario *scenario.Scenario // as played (time-scaled)
	Config   Config
	Runs     []*RunResult
	// Sim is the simulator's sweep of the same scenario (CompareSim).
	Sim *sim.Sweep
}

// Run plays cfg: for each repeat, for each level, every policy in turn
// (interleaved), each on a fresh router with a fresh prompt salt. The
// order rotates: repeat k (from 0) starts at policy k mod n of
// Config.Policies, so drift in the machine's load over a bench does not
// favour the policies listed last. It
// returns the runs done so far with ctx's error when ctx ends early.
func Run(ctx context.Context, cfg Config, deps Deps) (*Report, error) {
	if err := cfg.Validate(&deps); err != nil {
		return nil, err
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Client == nil {
		deps.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024}}
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ScrapeEvery == 0 {
		cfg.ScrapeEvery = DefaultScrapeEvery
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = time.Second
	}
	sc := cfg.Scenario
	if cfg.TimeScale != 1 {
		sc = sc.Scaled(time.Duration(float64(sc.Duration) * cfg.TimeScale))
	}
	if len(cfg.Levels) == 0 {
		cfg.Levels = []float64{sc.HeadlineLevel()}
	}
	rep := &Report{Scenario: sc, Config: cfg}
	total := cfg.Repeat * len(cfg.Levels) * len(cfg.Policies)
	n := len(cfg.Policies)
	for k := 0; k < cfg.Repeat; k++ {
		for _, level := range cfg.Levels {
			for j := range n {
				pol := cfg.Policies[(k+j)%n]
				run, err := runOne(ctx, &cfg, &deps, sc, pol, level, k, Live{Run: len(rep.Runs) + 1, Runs: total})
				if run != nil {
					run.Order = j + 1
					rep.Runs = append(rep.Runs, run)
				}
				if err != nil {
					return rep, fmt.Errorf("%s at %g, repeat %d: %w", pol.Name, level, k+1, err)
				}
			}
		}
	}
	if cfg.CompareSim {
		sw, err := CompareSim(ctx, &cfg, sc)
		if err != nil {
			return rep, fmt.Errorf("compare-sim: %w", err)
		}
		rep.Sim = sw
	}
	return rep, nil
}

func runOne(ctx context.Context, cfg *Config, deps *Deps, sc *scenario.Scenario, pol Policy, level float64, k int, live Live) (*RunResult, error) {
	seed := cfg.Seed + uint64(k)
	salt := deps.Salt()
	render, err := scenario.NewRenderer(sc, seed, salt, cfg.TracePath)
	if err != nil {
		return nil, err
	}
	router := &Router{ProxyURL: cfg.RouterURL, AdminURL: cfg.RouterAdminURL}
	if pol.Profile != nil {
		prof := *pol.Profile
		prof.Scheduler.Seed = seed
		// The load generator is one address standing for every client of
		// the scenario: a cap per client address would refuse the
		// scenario's clients as one. The profile's other caps hold.
		prof.Server.HTTP.MaxConnectionsPerClient = 0
		if router, err = deps.LaunchRouter(ctx, RouterSpec{Policy: pol.Name, Profile: &prof, Baseline: pol.Baseline, Seed: seed, Scenario: sc}, cfg.Targets); err != nil {
			return nil, fmt.Errorf("starting the router: %w", err)
		}
		deps.Logger.Info(fmt.Sprintf("router for %s started: proxy %s, admin %s, status page %s/ui", pol.Name, router.ProxyURL, router.AdminURL, router.AdminURL),
			"run", fmt.Sprintf("%d/%d", live.Run, live.Runs), "level", level, "repeat", k+1)
	}
	if router.AdminURL != "" {
		if err := waitReady(ctx, deps, router.AdminURL, len(cfg.Targets), 10*time.Second); err != nil {
			if router.Stop != nil {
				_ = router.Stop()
			}
			return nil, err
		}
	}
	defer func() {
		if router.Stop != nil {
			_ = router.Stop()
		}
	}()
	// A trace at speed-up level plays its trace time in 1/level of it:
	// the renderer keeps trace time, the run's clock is rt's.
	rt := sc
	if sc.Load.Mode == scenario.ModeTrace {
		rt = sc.Scaled(time.Duration(float64(sc.Duration) / level))
	}
	run := &RunResult{Policy: pol.Name, Level: level, Repeat: k + 1, Seed: seed, Salt: salt, Warm: rt.Warmup, End: rt.Duration,
		Timeout: rt.Timeout, SLO: rt.SLO}
	for i, ph := range rt.Phases {
		st := rt.PhaseStart(i)
		run.Phases = append(run.Phases, PhaseSpan{Name: ph.Name, Start: st, End: st + ph.Duration})
	}
	for _, t := range cfg.Targets {
		run.PodNames = append(run.PodNames, cmpOr(t.Name, t.Address))
	}
	p := &player{sc: rt, level: level, url: router.ProxyURL, hc: deps.Client, clk: deps.Clock, render: render}
	var streamClass []int
	run.Classes, p.phaseClass, streamClass = rt.RequestClasses()
	for k := range rt.Streams {
		sr, err := scenario.NewStreamRenderer(rt, k, seed, salt)
		if err != nil {
			return nil, err
		}
		p.streams = append(p.streams, &streamPlay{st: &rt.Streams[k], class: streamClass[k], render: sr})
	}
	var cpu0 time.Duration
	if deps.CPU != nil {
		cpu0 = deps.CPU()
	}
	p.start = deps.Clock.Now()

	bctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var podsMu sync.Mutex
	wg.Add(2)
	go func() {
		defer wg.Done()
		observePods(bctx, cfg, deps, p, &podsMu, run)
	}()
	go func() {
		defer wg.Done()
		progress(bctx, cfg, deps, p, router.AdminURL, &podsMu, run, live)
	}()
	run.Requests = p.play(ctx)
	stop()
	wg.Wait()
	run.Wall = p.now()
	run.PromptCheck = checkPrompts(run.Requests)
	if w := run.PromptCheck.Warning(); w != "" {
		deps.Logger.Warn("bench: "+w, "policy", run.Policy, "level", run.Level, "repeat", run.Repeat)
	}
	if deps.CPU != nil {
		run.CPU = deps.CPU() - cpu0
	}
	if router.AdminURL != "" {
		h, err := history(ctx, deps.Client, router.AdminURL, "")
		if err != nil {
			run.AdminErr = err.Error()
		} else {
			run.Modes, run.ModeChanges, run.WeightVersions = timeline(h, p.start)
		}
		if run.HerdPicks, err = herdPicks(ctx, deps.Client, router.AdminURL); err != nil && run.AdminErr == "" {
			run.AdminErr = err.Error()
		}
	}
	return run, ctx.Err()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// observePods scrapes every target each ScrapeEvery until ctx ends.
func observePods(ctx context.Context, cfg *Config, deps *Deps, p *player, mu *sync.Mutex, run *RunResult) {
	if len(cfg.Targets) == 0 {
		return
	}
	t := deps.Clock.NewTicker(cfg.ScrapeEvery)
	defer t.Stop()
	prev := make([]float64, len(cfg.Targets))
	hits := make([]float64, len(cfg.Targets))
	queries := make([]float64, len(cfg.Targets))
	for {
		s := PodSample{T: p.now(), Load: make([]float64, len(cfg.Targets))}
		for i, tg := range cfg.Targets {
			sctx, cancel := context.WithTimeout(ctx, cfg.ScrapeEvery)
			l, h, q, ok := scrapeTarget(sctx, deps.Client, tg.Address)
			cancel()
			if ok {
				prev[i], hits[i], queries[i] = l, h, q
			}
			s.Load[i] = prev[i]
			s.Hits += hits[i]
			s.Queries += queries[i]
		}
		mu.Lock()
		run.Pods = append(run.Pods, s)
		mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// progress calls Deps.Progress every ProgressEvery with a snapshot.
func progress(ctx context.Context, cfg *Config, deps *Deps, p *player, admin string, mu *sync.Mutex, run *RunResult, live Live) {
	if deps.Progress == nil {
		return
	}
	t := deps.Clock.NewTicker(cfg.ProgressEvery)
	defer t.Stop()
	live.Policy, live.Level, live.Repeat, live.Total = run.Policy, run.Level, run.Repeat, p.sc.Duration
	live.Pods = run.PodNames
	live.AdminURL = admin
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		reqs, phase := p.snapshot()
		live.Elapsed, live.Phase = p.now(), p.sc.Phases[phase].Name
		live.Concurrency = p.levelOf(phase)
		live.Stats = Summarise(reqs, 0, p.sc.Timeout, p.sc.SLO)
		mu.Lock()
		if n := len(run.Pods); n > 0 {
			live.Load = run.Pods[n-1].Load
		}
		mu.Unlock()
		if admin != "" {
			hctx, cancel := context.WithTimeout(ctx, cfg.ProgressEvery)
			if h, err := history(hctx, deps.Client, admin, "1s"); err == nil && h.Latest != nil {
				live.Mode, live.Signal, live.Weights = h.Latest.Mode, h.Latest.Signal, h.Latest.Weights
				live.Scorers = nil
				for _, s := range h.Scorers {
					live.Scorers = append(live.Scorers, s.Name)
				}
			}
			cancel()
		}
		deps.Progress(live)
	}
}
