package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/trimtab/trimtab/bench"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/scenario"
)

func newBenchCmd() *cobra.Command {
	var (
		cfg                          bench.Config
		scenarioPath, out, endpoints string
		engine                       string
		policies, profiles, targets  []string
		fleetN                       int
		addrs                        routerAddrs
		noPlots                      bool
		slo                          sloFlags
	)
	c := &cobra.Command{
		Use:   "bench --scenario FILE|NAME [--policies a,b] [--fleet N | --endpoints FILE | --target URL,… | --router URL] --out DIR",
		Short: "Play a simulator scenario in real time against real servers and compare routing policies",
		Long: `bench plays a ` + "`trimtab sim`" + ` scenario (same YAML, same requests) in wall-clock time against
simulated vLLM servers on loopback (--fleet, the default), the servers of a static
endpoints file (--endpoints) or URLs (--target), through trimtab serve started
in-process per policy (or an external --router). Each run salts its prompts
afresh; policies are interleaved over --repeat repeats, each repeat starting one
policy further on. It writes DIR/<scenario>.md, DIR/img/bench-real-*.png,
DIR/summary.json (sim's schema plus cached_token_ratio and errors) and, when
adaptive ran beside a fair baseline, DIR/compare.md (repeat by repeat). As in sim,
a failed or timed-out request (a miss) counts in the percentiles at the scenario's
timeout, and goodput counts requests within the SLO of --slo-ttft and --slo-tpot.
Policies: ` + strings.Join(bench.PolicyNames(), ", ") + `,
and --profile files (alone they replace the default policies).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scenarioPath == "" || out == "" {
				return fmt.Errorf("--scenario and --out are required")
			}
			sc, err := sim.LoadScenario(scenarioPath)
			if err != nil {
				return err
			}
			if err := sim.ApplyEngine([]*scenario.Scenario{sc}, engine); err != nil {
				return fmt.Errorf("--engine: %w", err)
			}
			if err := slo.apply(cmd, sc); err != nil {
				return err
			}
			cfg.Scenario = sc
			if len(profiles) > 0 && !cmd.Flags().Changed("policies") {
				policies = nil
			}
			if cfg.RouterURL != "" {
				cfg.Policies = []bench.Policy{{Name: "router"}}
			} else if cfg.Policies, err = bench.Policies(policies, profiles); err != nil {
				return fmt.Errorf("--policies/--profile: %w", err)
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			g, gctx := errgroup.WithContext(ctx)
			defer func() { cancel(); _ = g.Wait() }() // the fleet stops after the last run
			setup := "Router: trimtab serve in-process per run."
			switch {
			case cfg.RouterURL != "":
				setup = "Router: external, " + cfg.RouterURL + "."
			case endpoints != "":
				data, err := os.ReadFile(endpoints)
				if err != nil {
					return fmt.Errorf("--endpoints: %w", err)
				}
				fts, err := fleet.ParseStatic(data, endpoints)
				if err != nil {
					return fmt.Errorf("--endpoints: %w", err)
				}
				for _, t := range fts {
					cfg.Targets = append(cfg.Targets, bench.Target{Address: t.Address, Name: t.Name, Model: sc.Model, Capacity: t.Capacity})
				}
			case len(targets) > 0:
				if cfg.Targets, err = bench.ParseTargets(targets, sc.Model); err != nil {
					return fmt.Errorf("--target: %w", err)
				}
			default:
				fleetN = orElse(fleetN, sc.Servers)
				if cfg.Targets, err = bench.StartFleet(gctx, g, sc, fleetN, cfg.FleetSpeed); err != nil {
					return err
				}
				setup = fmt.Sprintf("Fleet: %d simulated vLLM servers (sim/fakeserver, speed ×%g) on loopback. %s", fleetN, cfg.FleetSpeed, setup)
			}
			stderr := cmd.ErrOrStderr()
			setup += fmt.Sprintf(" Machine: %d CPUs, load average %s at the start", runtime.NumCPU(), bench.LoadAverage())
			term := isTerminal(stderr)
			rep, err := bench.Run(gctx, cfg, bench.Deps{LaunchRouter: routerStarter(addrs), Salt: func() uint64 { return rand.Uint64() | 1 },
				CPU: bench.ProcessCPU, Progress: bench.PrintProgress(stderr, term), Logger: benchLogger(stderr, term)})
			fmt.Fprintln(stderr)
			if rep == nil || len(rep.Runs) == 0 {
				return err
			}
			setup += ", " + bench.LoadAverage() + " at the end."
			if werr := os.MkdirAll(out, 0o755); werr != nil {
				return werr
			}
			if werr := rep.WriteDir(out, commandLine(), setup, noPlots); werr != nil {
				return werr
			}
			if werr := rep.WriteRankings(cmd.OutOrStdout()); werr != nil {
				return werr
			}
			fmt.Fprintf(stderr, "%d runs → %s\n", len(rep.Runs), filepath.Join(out, sc.Name+".md"))
			lines, cerr := bench.WriteComparisons(filepath.Join(out, "compare.md"), commandLine(), rep.Summaries())
			for _, l := range lines {
				fmt.Fprintln(stderr, l)
			}
			return orElse(err, cerr)
		},
	}
	f := c.Flags()
	f.StringVar(&scenarioPath, "scenario", "", "scenario YAML file or shipped scenario name")
	f.StringVar(&engine, "engine", "", "engine calibration of the fake fleet (--fleet): a shipped name ("+strings.Join(sim.EngineNames(), ", ")+") or a YAML file with the keys of a scenario's engine: section")
	f.StringSliceVar(&policies, "policies", []string{sim.PolicyAdaptive, sim.PolicyAdaptiveOff, sim.PolicyTunedStatic}, "policies to compare")
	f.StringSliceVar(&profiles, "profile", nil, "trimtab profile YAML to run as an extra policy named after the file (repeatable)")
	f.StringVar(&out, "out", "", "output directory")
	f.IntVar(&fleetN, "fleet", 0, "simulated vLLM servers to start on loopback (default: the scenario's server count)")
	f.Float64Var(&cfg.FleetSpeed, "fleet-speed", 1, "speed-up of the simulated servers over the scenario's engine model")
	f.StringVar(&endpoints, "endpoints", "", "static endpoints file (serve's format) of real servers")
	f.StringSliceVar(&targets, "target", nil, "real server base URLs")
	f.StringVar(&cfg.RouterURL, "router", "", "measure this external router's OpenAI base URL instead of starting serve")
	f.StringVar(&cfg.RouterAdminURL, "router-admin", "", "the external router's admin URL (for its mode timeline)")
	f.StringVar(&addrs.Proxy, "router-addr", "127.0.0.1:0", "where each run's in-process router serves the OpenAI API (port 0: any free one)")
	f.StringVar(&addrs.Admin, "admin-addr", "127.0.0.1:0", "where each run's in-process router serves admin and the status page (port 0: any free one)")
	f.IntVar(&cfg.Repeat, "repeat", 1, "interleaved repeats of every policy")
	f.Uint64Var(&cfg.Seed, "seed", 1, "workload seed of the first repeat")
	f.Float64Var(&cfg.TimeScale, "time-scale", 1, "scale scenario time (0.1 plays ten minutes in one)")
	f.Float64SliceVar(&cfg.Levels, "levels", nil, "load levels (default: the scenario's headline)")
	f.BoolVar(&cfg.CompareSim, "compare-sim", false, "also simulate the scenario and print both rankings side by side")
	f.BoolVar(&noPlots, "no-plots", false, "write tables only")
	f.StringVar(&cfg.TracePath, "trace", "", "trace file for trace scenarios")
	slo.register(f)
	return c
}

// benchLogger logs bench's warnings and each router's addresses to w as
// text without timestamps; on a terminal each line first clears the
// progress line it would otherwise run into.
func benchLogger(w io.Writer, terminal bool) *slog.Logger {
	if terminal {
		w = clearLine{w}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
}

// clearLine writes "\r" and clear-to-end-of-line before every write.
type clearLine struct{ w io.Writer }

func (c clearLine) Write(p []byte) (int, error) {
	if _, err := io.WriteString(c.w, "\r\033[K"); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

func orElse[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// routerAddrs are where routerStarter's routers listen (host:port; port
// 0: any free one).
type routerAddrs struct {
	Proxy, Admin string
	// AdminFallback: a busy Admin port falls back to any free one (the
	// demo's fixed status page port); else it is an error naming
	// --admin-addr.
	AdminFallback bool
}

// routerStarter starts trimtab serve in-process (HTTP proxy and admin
// server, no ext_proc) with a profile — or a simulator baseline's
// scheduler — in front of fixed targets, listening on addrs.
func routerStarter(addrs routerAddrs) bench.StartRouterFunc {
	return func(ctx context.Context, spec bench.RouterSpec, targets []bench.Target) (*bench.Router, error) {
		var sched *scheduler.Scheduler
		if b := spec.Baseline; b != nil {
			s, loop, err := b.Build(spec.Seed, spec.Scenario)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", b.Name, err)
			}
			if loop != nil {
				return nil, fmt.Errorf("%s: a baseline with a control loop cannot run in serve", b.Name)
			}
			sched = s
		}
		fts := make(fleet.Fixed, len(targets))
		for i, t := range targets {
			fts[i] = fleet.Target{Address: t.Address, Name: orElse(t.Name, t.Address), Models: []string{t.Model}, Capacity: t.Capacity, Ready: true}
		}
		httpLn, err := net.Listen("tcp", addrs.Proxy)
		if err != nil {
			return nil, fmt.Errorf("--router-addr %s: %w", addrs.Proxy, err)
		}
		adminLn, err := net.Listen("tcp", addrs.Admin)
		if err != nil && addrs.AdminFallback {
			adminLn, err = net.Listen("tcp", "127.0.0.1:0")
		}
		if err != nil {
			httpLn.Close()
			return nil, fmt.Errorf("--admin-addr %s: %w", addrs.Admin, err)
		}
		svc, err := newService(spec.Profile, serviceOptions{Logger: slog.New(slog.DiscardHandler), Discoverer: fts,
			HTTP: httpLn, Admin: adminLn, DisableExtProc: true, NoRuntimeM: true, Scheduler: sched})
		if err != nil {
			httpLn.Close()
			adminLn.Close()
			return nil, err
		}
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		return &bench.Router{ProxyURL: "http://" + httpLn.Addr().String(), AdminURL: "http://" + adminLn.Addr().String(),
			Stop: func() error { cancel(); return <-done }}, nil
	}
}
