package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/trimtab/trimtab/bench"
	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim"
)

type benchOptions struct {
	scenario, out, endpoints, router, admin, trace string
	policies, profiles, targets                    []string
	levels                                         []float64
	fleet, repeat                                  int
	seed                                           uint64
	timeScale, speed                               float64
	compareSim, noPlots                            bool
}

func newBenchCmd() *cobra.Command {
	o := benchOptions{}
	c := &cobra.Command{
		Use:   "bench --scenario FILE|NAME [--policies a,b] [--fleet N | --endpoints FILE | --target URL,… | --router URL] --out DIR",
		Short: "Play a simulator scenario in real time against real servers and compare routing policies",
		Long: `bench plays a scenario of ` + "`trimtab sim`" + ` (same YAML, same requests) in wall-clock time
against OpenAI-compatible servers: N simulated vLLM servers on loopback (--fleet,
the default), servers from a static endpoints file (--endpoints) or URLs
(--target). For each policy it starts trimtab serve in-process in front of them
with that policy's profile, or measures an external router (--router). Every
run salts its prompts afresh; policies are interleaved over --repeat repeats.
It writes DIR/<scenario>.md, DIR/img/bench-real-*.png and DIR/summary.json
(sim's schema plus cached_token_ratio and errors). Policies: the profiles among
` + strings.Join(sim.PolicyNames(), ", ") + `, and --profile files.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd, o) },
	}
	f := c.Flags()
	f.StringVar(&o.scenario, "scenario", "", "scenario YAML file or shipped scenario name")
	f.StringSliceVar(&o.policies, "policies", []string{sim.PolicyAdaptive, sim.PolicyAdaptiveOff, sim.PolicyTunedStatic}, "policies to compare")
	f.StringSliceVar(&o.profiles, "profile", nil, "trimtab profile YAML to run as an extra policy named after the file (repeatable)")
	f.StringVar(&o.out, "out", "", "output directory")
	f.IntVar(&o.fleet, "fleet", 0, "simulated vLLM servers to start on loopback (default: the scenario's server count)")
	f.Float64Var(&o.speed, "fleet-speed", 1, "speed-up of the simulated servers over the scenario's engine model")
	f.StringVar(&o.endpoints, "endpoints", "", "static endpoints file (serve's format) of real servers")
	f.StringSliceVar(&o.targets, "target", nil, "real server base URLs")
	f.StringVar(&o.router, "router", "", "measure this external router's OpenAI base URL instead of starting serve")
	f.StringVar(&o.admin, "router-admin", "", "the external router's admin URL (for its mode timeline)")
	f.IntVar(&o.repeat, "repeat", 1, "interleaved repeats of every policy")
	f.Uint64Var(&o.seed, "seed", 1, "workload seed of the first repeat")
	f.Float64Var(&o.timeScale, "time-scale", 1, "scale scenario time (0.1 plays ten minutes in one)")
	f.Float64SliceVar(&o.levels, "levels", nil, "load levels (default: the scenario's headline)")
	f.BoolVar(&o.compareSim, "compare-sim", false, "also simulate the scenario and print both rankings side by side")
	f.BoolVar(&o.noPlots, "no-plots", false, "write tables only")
	f.StringVar(&o.trace, "trace", "", "trace file for trace scenarios")
	return c
}

func runBench(cmd *cobra.Command, o benchOptions) error {
	if o.scenario == "" || o.out == "" {
		return fmt.Errorf("--scenario and --out are required")
	}
	sc, err := sim.LoadScenario(o.scenario)
	if err != nil {
		return err
	}
	cfg := bench.Config{Scenario: sc, TimeScale: o.timeScale, Repeat: o.repeat, Seed: o.seed, Levels: o.levels,
		TracePath: o.trace, RouterURL: o.router, RouterAdminURL: o.admin, CompareSim: o.compareSim, FleetSpeed: o.speed}
	if cfg.Policies, err = benchPolicies(o); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	g, gctx := errgroup.WithContext(ctx)
	defer func() { cancel(); _ = g.Wait() }() // servers stop after the last run
	setup := "Router: trimtab serve in-process per run."
	switch {
	case o.router != "":
		setup = "Router: external, " + o.router + "."
	case o.endpoints != "":
		data, err := os.ReadFile(o.endpoints)
		if err != nil {
			return fmt.Errorf("--endpoints: %w", err)
		}
		fts, err := fleet.ParseStatic(data, o.endpoints)
		if err != nil {
			return fmt.Errorf("--endpoints: %w", err)
		}
		for _, t := range fts {
			cfg.Targets = append(cfg.Targets, bench.Target{Address: t.Address, Name: t.Name, Model: sc.Model, Capacity: t.Capacity})
		}
	case len(o.targets) > 0:
		for _, s := range o.targets {
			u, err := url.Parse(s)
			if err != nil || u.Host == "" {
				return fmt.Errorf("--target %q: want a base URL like http://10.0.0.5:8000", s)
			}
			cfg.Targets = append(cfg.Targets, bench.Target{Address: u.Host, Model: sc.Model})
		}
	default:
		n := orElse(o.fleet, sc.Servers)
		if cfg.Targets, err = bench.StartFleet(gctx, g, sc, n, o.speed); err != nil {
			return err
		}
		setup = fmt.Sprintf("Fleet: %d simulated vLLM servers (sim/fakeserver, speed ×%g) on loopback; %s", n, o.speed, setup)
	}
	setup += fmt.Sprintf(" Machine: %d CPUs, load average %s at start.", runtime.NumCPU(), loadAvg())
	rep, err := bench.Run(gctx, cfg, bench.Deps{StartRouter: routerStarter("127.0.0.1:0"), Salt: func() uint64 { return rand.Uint64() | 1 },
		CPU: processCPU, Progress: progressLine(cmd.ErrOrStderr())})
	fmt.Fprintln(cmd.ErrOrStderr())
	if rep == nil || len(rep.Runs) == 0 {
		return err
	}
	if werr := os.MkdirAll(o.out, 0o755); werr != nil {
		return werr
	}
	setup += " Load average " + loadAvg() + " at the end."
	if werr := rep.WriteDir(o.out, commandLine(), setup, o.noPlots); werr != nil {
		return werr
	}
	if rep.Sim != nil {
		_ = rep.WriteRankings(cmd.OutOrStdout())
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%d runs → %s\n", len(rep.Runs), filepath.Join(o.out, sc.Name+".md"))
	return orElse(err, writeComparisons(cmd.ErrOrStderr(), filepath.Join(o.out, "compare.md"), rep.Summaries()))
}

func orElse[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

func benchPolicies(o benchOptions) ([]bench.Policy, error) {
	if o.router != "" {
		return []bench.Policy{{Name: "router"}}, nil
	}
	var out []bench.Policy
	pols, err := sim.Policies(o.policies)
	if err != nil {
		return nil, fmt.Errorf("--policies: %w", err)
	}
	for _, p := range pols {
		if p.Profile == nil {
			return nil, fmt.Errorf("--policies: %s is simulator-only (not a trimtab profile)", p.Name)
		}
		f, err := p.Profile()
		if err != nil {
			return nil, err
		}
		out = append(out, bench.Policy{Name: p.Name, Profile: f})
	}
	for _, path := range o.profiles {
		f, err := configs.Load(path)
		if err != nil {
			return nil, fmt.Errorf("--profile: %w", err)
		}
		out = append(out, bench.Policy{Name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), Profile: f})
	}
	return out, nil
}

// routerStarter starts trimtab serve in-process (HTTP proxy and admin
// server on loopback, no ext_proc) for a profile in front of fixed
// targets, and returns once every target has been scraped. The admin
// server tries adminAddr first, then any free port.
func routerStarter(adminAddr string) bench.StartRouterFunc {
	return func(ctx context.Context, f *configs.File, targets []bench.Target) (*bench.Router, error) {
		fts := make(fixedTargets, len(targets))
		for i, t := range targets {
			fts[i] = fleet.Target{Address: t.Address, Name: orElse(t.Name, t.Address), Models: []string{t.Model}, Capacity: t.Capacity, Ready: true}
		}
		httpLn, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		adminLn, err := net.Listen("tcp", adminAddr)
		if err != nil {
			if adminLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				httpLn.Close()
				return nil, err
			}
		}
		svc, err := newService(f, serviceOptions{Logger: slog.New(slog.DiscardHandler), Discoverer: fts,
			HTTP: httpLn, Admin: adminLn, DisableExtProc: true, NoRuntimeM: true})
		if err != nil {
			httpLn.Close()
			adminLn.Close()
			return nil, err
		}
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		stop := func() error { cancel(); return <-done }
		if err := waitReady(ctx, svc, 10*time.Second); err != nil {
			_ = stop()
			return nil, err
		}
		return &bench.Router{ProxyURL: "http://" + httpLn.Addr().String(), AdminURL: "http://" + adminLn.Addr().String(), Stop: stop}, nil
	}
}

// fixedTargets is a Discoverer that reports one fixed list.
type fixedTargets []fleet.Target

func (t fixedTargets) Run(ctx context.Context, sink fleet.Sink) error {
	sink.Update(slices.Clone([]fleet.Target(t)))
	<-ctx.Done()
	return nil
}

func waitReady(ctx context.Context, svc *service, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		snap := svc.fleet.Load()
		if snap != nil && len(svc.sched.Pool().Endpoints) > 0 && snap.Count(scheduler.StateFresh) == len(snap.Endpoints) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("servers not scraped within %v", within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// progressLine redraws one status line on a terminal, or prints one every
// ten calls elsewhere.
func progressLine(w interface{ Write([]byte) (int, error) }) func(bench.Live) {
	n := 0
	term := isTerminal(w)
	return func(l bench.Live) {
		if n++; term {
			fmt.Fprintf(w, "\r%s\033[K", l.Line())
		} else if n%10 == 0 {
			fmt.Fprintln(w, l.Line())
		}
	}
}
