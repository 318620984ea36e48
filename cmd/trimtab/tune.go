package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/proxy"
	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/scenario"
)

func newSimTuneCmd() *cobra.Command {
	var (
		scenarios []string
		profile   string
		seed      uint64
		seeds     int
		budget    int
		parallel  int
		duration  time.Duration
		out       string
		loop      bool
		engine    string
		trace     string
		replay    traceFlags
	)
	cmd := &cobra.Command{
		Use:   "tune --scenario NAME|FILE|all | --trace FILE --servers N [--profile FILE] [--seeds K] [--budget N] --out DIR",
		Short: "Search for the best single static weight vector over a scenario suite",
		Long: `tune searches the weights of a profile's scorers (the loop off) for the single
static vector that serves a whole scenario suite best, as a careful operator
tuning by hand would. It starts from the profile's own weights and every
built-in static policy its scorers can express (static-3-2-2, prefix-only,
least-queue, load-only), then runs a coordinate search. Each vector runs every
scenario at every level over every seed. The objective is the mean of the
worst and the mean ratio to the per-cell best (TTFT p99 and output tokens/s).

--trace FILE --servers N adds to the suite (or is, alone) the replay of a
Mooncake-format trace, such as the window of your own traffic that trimtab
serve records at /debug/trace: the weights are tuned for your traffic.

With --loop it searches the calm weights of an adaptive profile instead: every
vector runs with the profile's control loop on (vectors the loop refuses are
skipped), starting also from the shipped tuned-static vector.

It writes DIR/tune.md (every vector ranked, each scenario's own best vector)
and DIR/tuned.yaml (the profile at the best vector; adaptive off, or on with
--loop).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scs, err := loadSimScenarios(scenarios, trace, replay, out, seeds, duration, engine)
			if err != nil {
				return err
			}
			f, name := (*configs.File)(nil), "adaptive-off"
			if profile == "" {
				f, err = configs.LoadShipped("adaptive")
			} else {
				f, err = configs.Load(profile)
				name = strings.TrimSuffix(filepath.Base(profile), filepath.Ext(profile))
			}
			if err != nil {
				return fmt.Errorf("--profile: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stderr, start := cmd.ErrOrStderr(), time.Now()
			if loop && !f.Adaptive.Enabled {
				return fmt.Errorf("--loop: the profile has adaptive.enabled: false; there is no loop to tune with")
			}
			if profile == "" && !loop && f.Scheduler.Guard.Factor > 0 {
				name = sim.PolicyGuardOnly // the loop off keeps scheduler.guard
			}
			base, skipped := sim.Baselines(f, name, loop)
			res, err := sim.Tune(ctx, sim.TuneConfig{
				Scenarios: scs, Profile: f, Loop: loop, Seed: seed, Seeds: seeds, Budget: budget, Parallel: parallel,
				Progress: func(done, budget int, best *sim.Evaluated) {
					fmt.Fprintf(stderr, "%3d/%d vectors, %v: best %s %v (score %.3f)\n", done, budget, time.Since(start).Round(time.Second), best.Name, best.Weights, best.Score)
				},
			}, base)
			if err != nil {
				return err
			}
			res.Skipped = skipped
			names := make([]string, len(scs))
			for i, sc := range scs {
				names[i] = sc.Name
			}
			what := "tuned-static: the best single static weight vector"
			if loop {
				what = "the best calm weights, the control loop on,"
			}
			comment := fmt.Sprintf("%s for %s over seeds %d–%d,\nfound by: %s", what, strings.Join(names, ", "), seed, seed+uint64(seeds)-1, commandLine())
			if err := res.WriteFiles(out, f, comment, commandLine()); err != nil {
				return err
			}
			if res.Invalid > 0 {
				fmt.Fprintf(stderr, "%d candidate vectors skipped: the profile does not validate with them\n", res.Invalid)
			}
			fmt.Fprintf(stderr, "%d vectors in %v → %s, %s\n", len(res.Vectors), time.Since(start).Round(time.Second), filepath.Join(out, "tune.md"), filepath.Join(out, "tuned.yaml"))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&scenarios, "scenario", nil, "scenario YAML file or shipped scenario name (repeatable; \"all\" for every shipped one)")
	fl.StringVar(&profile, "profile", "", "profile whose scorers are searched (default: the shipped configs/adaptive.yaml)")
	fl.Uint64Var(&seed, "seed", 1, "first seed")
	fl.IntVar(&seeds, "seeds", 1, "number of consecutive seeds each vector runs")
	fl.IntVar(&budget, "budget", 40, "weight vectors to evaluate in all, baselines included")
	fl.IntVar(&parallel, "parallel", runtime.GOMAXPROCS(0), "runs simulated at once")
	fl.DurationVar(&duration, "duration", 0, "play each scenario in this simulated time instead")
	fl.StringVar(&out, "out", "", "output directory")
	fl.BoolVar(&loop, "loop", false, "search the calm weights with the profile's control loop on")
	fl.StringVar(&engine, "engine", "", "engine calibration for every scenario: a shipped name ("+strings.Join(sim.EngineNames(), ", ")+") or a YAML file with the keys of a scenario's engine: section")
	fl.StringVar(&trace, "trace", "", "Mooncake-format trace file to replay as one more scenario (with --servers)")
	replay.register(fl)
	return cmd
}

// traceFlags say how a trace file given with --trace is replayed as a
// scenario of its own (scenario.FromTrace).
type traceFlags struct {
	servers, outputTokens int
}

func (tf *traceFlags) register(f *pflag.FlagSet) {
	f.IntVar(&tf.servers, "servers", 0, "servers to replay --trace on (a /debug/trace download names the pool it was recorded on in its "+proxy.HeaderTraceEndpoints+" header)")
	f.IntVar(&tf.outputTokens, "output-tokens", scenario.DefaultTraceOutputTokens, "output length of --trace requests whose output_length is 0 (unknown), when the trace knows no other to average")
}

// scenario builds the scenario that replays the trace at path.
func (tf traceFlags) scenario(path string) (*scenario.Scenario, error) {
	if tf.servers < 1 {
		return nil, fmt.Errorf("--servers: %d; --trace needs the number of servers to replay on (≥ 1)", tf.servers)
	}
	if tf.outputTokens < 1 {
		return nil, fmt.Errorf("--output-tokens: %d, must be ≥ 1", tf.outputTokens)
	}
	sc, err := scenario.FromTrace(path, scenario.TraceConfig{Servers: tf.servers, OutputTokens: tf.outputTokens})
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	return sc, nil
}

// loadSimScenarios checks the flags sim and sim tune share, loads the
// scenarios ("all": every shipped one) and, when trace is set, the
// scenario replaying it, applies the engine calibration (a shipped name or
// a file; "" keeps each scenario's engine) and creates the output
// directory.
func loadSimScenarios(names []string, trace string, tf traceFlags, out string, seeds int, duration time.Duration, engine string) ([]*scenario.Scenario, error) {
	switch {
	case len(names) == 0 && trace == "":
		return nil, fmt.Errorf("--scenario: required (a file, a shipped name or all), or --trace")
	case out == "":
		return nil, fmt.Errorf("--out: required")
	case seeds < 1:
		return nil, fmt.Errorf("--seeds: must be ≥ 1")
	}
	var scs []*scenario.Scenario
	if len(names) > 0 {
		var err error
		if scs, err = sim.LoadScenarios(names, duration); err != nil {
			return nil, err
		}
	}
	if trace != "" {
		sc, err := tf.scenario(trace)
		if err != nil {
			return nil, err
		}
		if duration > 0 {
			sc = sc.Scaled(duration)
		}
		scs = append(scs, sc)
	}
	if err := sim.ApplyEngine(scs, engine); err != nil {
		return nil, fmt.Errorf("--engine: %w", err)
	}
	return scs, os.MkdirAll(out, 0o755)
}
