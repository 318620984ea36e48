package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

func newSimCmd() *cobra.Command {
	var (
		scenarios []string
		policies  []string
		seed      uint64
		seeds     int
		out       string
		trace     string
		parallel  int
		duration  time.Duration
		levels    []float64
		noPlots   bool
		profiles  []string
		think     time.Duration
		routers   routerFlags
		slo       sloFlags
		engine    string
		replay    traceFlags
	)
	cmd := &cobra.Command{
		Use:   "sim --scenario FILE|NAME|all | --trace FILE --servers N [--policies a,b] [--seed N] [--seeds K] --out DIR",
		Short: "Simulate a fleet of vLLM-like servers and compare routing policies",
		Long: `sim runs the real trimtab scheduler, scorers, detector and configurator against
a discrete-event model of vLLM servers on virtual time, for every policy at every
load level of a scenario, and writes DIR/<scenario>.md (tables),
DIR/img/bench-<scenario>-*.png (plots) and DIR/summary.json (every run, every
phase, machine-readable).

A scenario is a YAML file or the name of a shipped one (` + strings.Join(sim.Shipped(), ", ") + `);
"all" runs every shipped scenario. Policies: ` + strings.Join(sim.PolicyNames(), ", ") + `;
--profile adds your own profile (configs schema, adaptive section included), so
a profile can be tuned here before it goes to production.

--engine applies one engine calibration to every scenario, replacing its
engine: section: a shipped name (` + strings.Join(sim.EngineNames(), ", ") + `;
docs/calibrations.md derives each) or a YAML file with the keys of a
scenario's engine: section. Failed and timed-out requests count in the
percentiles at the client timeout; goodput counts requests within
--slo-ttft and --slo-tpot.

--trace FILE without --scenario replays a Mooncake-format trace (one
recorded by trimtab serve at /debug/trace, say) once at its own pace on
--servers servers; with --scenario it replaces the trace of trace scenarios.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			own := ""
			if len(scenarios) == 0 {
				own = trace // the trace is the scenario, not an override
			}
			scs, err := loadSimScenarios(scenarios, own, replay, out, seeds, duration, engine)
			if err != nil {
				return err
			}
			pols, err := sim.Policies(policies)
			if err != nil {
				return fmt.Errorf("--policies: %w", err)
			}
			if len(policies) == 0 && len(profiles) > 0 {
				pols = nil // only the given profiles, unless --policies asks for more
			}
			for _, path := range profiles {
				p, err := sim.LoadProfilePolicy(path)
				if err != nil {
					return fmt.Errorf("--profile: %w", err)
				}
				pols = append(pols, p)
			}
			stderr := cmd.ErrOrStderr()
			// Ctrl-C stops starting new runs; the runs in progress finish.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var summary report.SummaryFile
			for _, sc := range scs {
				if len(levels) > 0 {
					sc.Load.Levels = levels
				}
				if think > 0 {
					sc.Load.ThinkTime = think
				}
				if err := routers.apply(cmd, sc); err != nil {
					return err
				}
				if err := slo.apply(cmd, sc); err != nil {
					return err
				}
				start := time.Now()
				bar := newProgress(stderr, sc.Name)
				sw, err := sim.RunSweep(ctx, sim.SweepConfig{Scenario: sc, Policies: pols, Seed: seed, Seeds: seeds,
					TracePath: trace, Parallel: parallel, Progress: bar.update})
				bar.finish()
				if err != nil {
					return fmt.Errorf("scenario %s: %w", sc.Name, err)
				}
				wall := time.Since(start)
				report, err := sw.WriteReport(out, !noPlots, commandLine())
				if err != nil {
					return err
				}
				summary.Runs = append(summary.Runs, sw.RunSummaries()...)
				if err := summary.WriteFile(filepath.Join(out, "summary.json")); err != nil {
					return err
				}
				fmt.Fprintf(stderr, "%s: %d runs of %v simulated in %v wall (%d in parallel) → %s\n", sc.Name,
					len(sw.Levels)*len(sw.Policies)*len(sw.Seeds), sc.Duration, wall.Round(time.Millisecond), parallel, report)
				for _, v := range sw.Verdicts() {
					fmt.Fprintln(stderr, "  "+v.Line(sc.LevelUnit()))
				}
			}
			lines, err := sim.WriteComparisons(filepath.Join(out, "compare.md"), commandLine(), summary.Runs, report.Mean)
			for _, l := range lines {
				fmt.Fprintln(stderr, l)
			}
			return err
		},
	}
	cmd.AddCommand(newSimTuneCmd(), newSimOracleCmd())
	f := cmd.Flags()
	f.StringSliceVar(&scenarios, "scenario", nil, "scenario YAML file or shipped scenario name (repeatable; \"all\" for every shipped one)")
	f.StringSliceVar(&policies, "policies", nil, "policies to compare (default all)")
	f.Uint64Var(&seed, "seed", 1, "first seed")
	f.IntVar(&seeds, "seeds", 1, "number of consecutive seeds; statistics are means over them")
	f.StringVar(&out, "out", "", "output directory")
	f.StringVar(&trace, "trace", "", "Mooncake-format trace file: alone, replay it (with --servers); with --scenario, the trace of trace scenarios")
	replay.register(f)
	f.IntVar(&parallel, "parallel", runtime.GOMAXPROCS(0), "runs simulated at once")
	f.DurationVar(&duration, "duration", 0, "play the scenario in this simulated time instead (warm-up, phases and events keep their share)")
	f.Float64SliceVar(&levels, "levels", nil, "override the scenario's load levels")
	f.BoolVar(&noPlots, "no-plots", false, "write tables only")
	f.DurationVar(&think, "think-time", 0, "override closed-loop clients' mean think time between requests")
	routers.register(f)
	slo.register(f)
	f.StringVar(&engine, "engine", "", "engine calibration for every scenario: a shipped name or a YAML file with the keys of a scenario's engine: section (default: each scenario's own)")
	f.StringSliceVar(&profiles, "profile", nil, "trimtab profile YAML to simulate as an extra policy named after the file (repeatable; alone it replaces the built-in policies)")
	return cmd
}

// routerFlags are sim's router-replica flags; set, they override the
// scenario's routers: section.
type routerFlags struct {
	replicas int
	sync     string
	spread   string
	delay    time.Duration
}

func (rf *routerFlags) register(f *pflag.FlagSet) {
	f.IntVar(&rf.replicas, "routers", 0, "router replicas in front of the pool, each with its own scheduler, scorers and control loop (default: the scenario's, else 1)")
	f.StringVar(&rf.sync, "router-sync", "on", "replica sync between the routers: on or off")
	f.StringVar(&rf.spread, "router-spread", scenario.SpreadRoundRobin, "how requests reach the routers: round-robin or client-hash")
	f.DurationVar(&rf.delay, "router-sync-delay", 20*time.Millisecond, "how long a sync update takes from one router to the others")
}

// apply puts the flags that were given into sc.Routers and validates the
// result.
func (rf *routerFlags) apply(cmd *cobra.Command, sc *scenario.Scenario) error {
	f := cmd.Flags()
	if !f.Changed("routers") && !f.Changed("router-sync") && !f.Changed("router-spread") && !f.Changed("router-sync-delay") {
		return nil
	}
	rt := scenario.Routers{}
	if sc.Routers != nil {
		rt = *sc.Routers
	}
	if f.Changed("routers") {
		if rf.replicas < 1 {
			return fmt.Errorf("--routers: %d, want at least 1", rf.replicas)
		}
		rt.Replicas = rf.replicas
	}
	if f.Changed("router-sync") {
		switch rf.sync {
		case "on", "off":
			on := rf.sync == "on"
			rt.Sync = &on
		default:
			return fmt.Errorf("--router-sync: %q, want on or off", rf.sync)
		}
	}
	if f.Changed("router-spread") {
		rt.Spread = rf.spread
	}
	if f.Changed("router-sync-delay") {
		rt.SyncDelay = rf.delay
	}
	rt.SetDefaults()
	sc.Routers = &rt
	if err := sc.Validate(); err != nil {
		return fmt.Errorf("router flags: %w", err)
	}
	return nil
}

// sloFlags override the scenarios' goodput SLO.
type sloFlags struct{ ttft, tpot time.Duration }

func (sf *sloFlags) register(f *pflag.FlagSet) {
	d := scenario.DefaultSLO()
	f.DurationVar(&sf.ttft, "slo-ttft", d.TTFT, "goodput counts requests whose time to first token is at most this (default: the scenario's, else MLPerf's Llama-3.1-8B server bound)")
	f.DurationVar(&sf.tpot, "slo-tpot", d.TPOT, "goodput counts requests whose mean time per output token after the first is at most this (default: the scenario's, else MLPerf's)")
}

// apply puts the flags that were given into sc.SLO.
func (sf *sloFlags) apply(cmd *cobra.Command, sc *scenario.Scenario) error {
	f := cmd.Flags()
	if f.Changed("slo-ttft") {
		sc.SLO.TTFT = sf.ttft
	}
	if f.Changed("slo-tpot") {
		sc.SLO.TPOT = sf.tpot
	}
	if err := sc.SLO.Validate(); err != nil {
		return fmt.Errorf("--slo-ttft/--slo-tpot: %w", err)
	}
	return nil
}

func commandLine() string {
	args := append([]string{"trimtab"}, os.Args[1:]...)
	return strings.Join(args, " ")
}

// progress draws a one-line bar on stderr.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	name  string
	start time.Time
}

func newProgress(w io.Writer, name string) *progress {
	return &progress{w: w, name: name, start: time.Now()}
}

func (p *progress) update(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	const width = 30
	fill := width * done / max(total, 1)
	fmt.Fprintf(p.w, "\r%-18s [%s%s] %d/%d runs, %v", p.name, strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, total, time.Since(p.start).Round(time.Second))
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w)
}
