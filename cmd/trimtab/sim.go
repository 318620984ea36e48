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

	"github.com/trimtab/trimtab/sim"
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
	)
	cmd := &cobra.Command{
		Use:   "sim --scenario FILE|NAME|all [--policies a,b] [--seed N] [--seeds K] --out DIR",
		Short: "Simulate a fleet of vLLM-like servers and compare routing policies",
		Long: `sim runs the real trimtab scheduler, scorers, detector and configurator against
a discrete-event model of vLLM servers on virtual time, for every policy at every
load level of a scenario, and writes DIR/<scenario>.md (tables),
DIR/img/bench-<scenario>-*.png (plots) and DIR/summary.json (every run, every
phase, machine-readable).

A scenario is a YAML file or the name of a shipped one (` + strings.Join(sim.Shipped(), ", ") + `);
"all" runs every shipped scenario. Policies: ` + strings.Join(sim.PolicyNames(), ", ") + `;
--profile adds your own profile (configs schema, adaptive section included), so
a profile can be tuned here before it goes to production.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if scenarios, err = checkSimFlags(scenarios, out, seeds); err != nil {
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
			if err := os.MkdirAll(filepath.Join(out, "img"), 0o755); err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			// Ctrl-C stops starting new runs; the runs in progress finish.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var summary sim.SummaryFile
			for _, name := range scenarios {
				sc, err := sim.LoadScenario(name)
				if err != nil {
					return err
				}
				if duration > 0 {
					sc = sc.Scaled(duration)
				}
				if len(levels) > 0 {
					sc.Load.Levels = levels
				}
				if think > 0 {
					sc.Load.ThinkTime = think
				}
				start := time.Now()
				bar := newProgress(stderr, sc.Name)
				sw, err := sim.RunSweep(ctx, sim.SweepConfig{
					Scenario:  sc,
					Policies:  pols,
					Seed:      seed,
					Seeds:     seeds,
					TracePath: trace,
					Parallel:  parallel,
					Progress:  bar.update,
				})
				bar.finish()
				if err != nil {
					return fmt.Errorf("scenario %s: %w", sc.Name, err)
				}
				wall := time.Since(start)
				if !noPlots {
					if err := sw.WriteImages(filepath.Join(out, "img")); err != nil {
						return fmt.Errorf("scenario %s: plots: %w", sc.Name, err)
					}
				}
				f, err := os.Create(filepath.Join(out, sc.Name+".md"))
				if err != nil {
					return err
				}
				imgs := "img/"
				if noPlots {
					imgs = "-"
				}
				werr := sw.WriteMarkdown(f, imgs, commandLine())
				if cerr := f.Close(); werr == nil {
					werr = cerr
				}
				if werr != nil {
					return werr
				}
				summary.Runs = append(summary.Runs, sw.RunSummaries()...)
				if err := writeSummary(filepath.Join(out, "summary.json"), &summary); err != nil {
					return err
				}
				runs := len(sw.Levels) * len(sw.Policies) * len(sw.Seeds)
				fmt.Fprintf(stderr, "%s: %d runs of %v simulated in %v wall (%d in parallel) → %s\n",
					sc.Name, runs, sc.Duration, wall.Round(time.Millisecond), parallel, filepath.Join(out, sc.Name+".md"))
				for _, v := range sw.Verdicts() {
					fmt.Fprintf(stderr, "  %s %s %g: p50 %+.1f%% vs %s, p99 %+.1f%% vs %s, p99 ÷ static %.2f, tok/s ÷ static %.2f\n",
						v.Policy, sc.LevelUnit(), v.Level, 100*v.P50Gap, v.BestP50Policy, 100*v.P99Gap, v.BestP99Policy, v.StaticP99Ratio, v.StaticThroughputRatio)
				}
			}
			return writeComparisons(stderr, filepath.Join(out, "compare.md"), summary.Runs)
		},
	}
	cmd.AddCommand(newSimTuneCmd())
	f := cmd.Flags()
	f.StringSliceVar(&scenarios, "scenario", nil, "scenario YAML file or shipped scenario name (repeatable; \"all\" for every shipped one)")
	f.StringSliceVar(&policies, "policies", nil, "policies to compare (default all)")
	f.Uint64Var(&seed, "seed", 1, "first seed")
	f.IntVar(&seeds, "seeds", 1, "number of consecutive seeds; statistics are means over them")
	f.StringVar(&out, "out", "", "output directory")
	f.StringVar(&trace, "trace", "", "trace file for trace scenarios (overrides the scenario's path)")
	f.IntVar(&parallel, "parallel", runtime.GOMAXPROCS(0), "runs simulated at once")
	f.DurationVar(&duration, "duration", 0, "play the scenario in this simulated time instead (warm-up, phases and events keep their share)")
	f.Float64SliceVar(&levels, "levels", nil, "override the scenario's load levels")
	f.BoolVar(&noPlots, "no-plots", false, "write tables only")
	f.DurationVar(&think, "think-time", 0, "override closed-loop clients' mean think time between requests")
	f.StringSliceVar(&profiles, "profile", nil, "trimtab profile YAML to simulate as an extra policy named after the file (repeatable; alone it replaces the built-in policies)")
	return cmd
}

// writeSummary writes summary.json atomically (rename), so a reader never
// sees half a file; it is rewritten after every scenario.
func writeSummary(path string, f *sim.SummaryFile) error {
	tmp := path + ".tmp"
	w, err := os.Create(tmp)
	if err != nil {
		return err
	}
	werr := f.Write(w)
	if cerr := w.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return werr
	}
	return os.Rename(tmp, path)
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

// writeComparisons writes DIR/compare.md when the sweep ran adaptive
// beside its fair baselines: adaptive against adaptive-off (the same
// profile, loop off) and against tuned-static (the best single static
// vector for the suite), per scenario and level, and prints the verdict
// lines the acceptance criteria ask for.
func writeComparisons(stderr io.Writer, path string, runs []sim.RunSummary) error {
	type pair struct {
		b         string
		tol       float64
		ttft, tok float64 // win thresholds
		heading   string
	}
	var body strings.Builder
	for _, p := range []pair{
		{sim.PolicyAdaptiveOff, 0.02, 0.2, 0.1, "adaptive against adaptive-off (same profile, loop off)"},
		{sim.PolicyTunedStatic, 0.03, 0.1, 0, "adaptive against tuned-static (the best single static vector, `trimtab sim tune`)"},
	} {
		c := sim.Compare(runs, sim.PolicyAdaptive, p.b)
		if len(c.Rows) == 0 {
			continue
		}
		worse, wins := c.Worse(p.tol), c.Wins(p.ttft, p.tok)
		calm, fz := c.Loop()
		fmt.Fprintf(&body, "## %s\n\nA ÷ B − 1 on seed means; ⚠ marks a row worse than %.0f %%.\n\n", p.heading, 100*p.tol)
		if err := c.WriteMarkdown(&body, p.tol); err != nil {
			return err
		}
		line := fmt.Sprintf("adaptive vs %s: %d of %d rows worse by > %.0f %%; wins in %d scenarios %v; calm-phase entries %d, watchdog freezes %d",
			p.b, len(worse), len(c.Rows), 100*p.tol, len(wins), wins, calm, fz)
		fmt.Fprintf(&body, "%s.\n\n", line)
		fmt.Fprintln(stderr, line)
	}
	if body.Len() == 0 {
		return nil
	}
	return writeFile(path, func(w *os.File) error {
		_, err := fmt.Fprintf(w, "# Adaptive against its fair baselines\n\n`%s`\n\n%s", commandLine(), body.String())
		return err
	})
}
