package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/trimtab/trimtab/bench"
	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/sim"
)

type demoOptions struct {
	servers        int
	duration       time.Duration
	timeScale      float64
	adminAddr      string
	compare, plain bool
	seed           uint64
}

func newDemoCmd() *cobra.Command {
	o := demoOptions{}
	c := &cobra.Command{
		Use:   "demo",
		Short: "Run trimtab in front of simulated vLLM servers under a hot-prefix burst, live",
		Long: `demo is a small trimtab bench: it starts simulated vLLM servers on loopback and
plays a hot-prefix burst (calm, a burst in which most requests share one long
system prompt, calm again) through trimtab serve with the demo profile (adaptive
weights), then the same load with the field's static weights (prefix 3 : queue 2
: kvcache 2, the Gateway API Inference Extension default). The terminal shows
mode, signal, weights and per-pod load as they move, and bench's tables at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDemo(cmd.Context(), cmd.OutOrStdout(), o) },
	}
	f := c.Flags()
	f.IntVar(&o.servers, "servers", 8, "simulated vLLM servers")
	f.DurationVar(&o.duration, "duration", time.Minute, "length of the load per policy (calm ¼, burst ½, calm ¼)")
	f.Float64Var(&o.timeScale, "time-scale", 4, "speed-up of the simulated GPUs")
	f.StringVar(&o.adminAddr, "admin-addr", "127.0.0.1:9090", "status page and admin address (a busy port falls back to any free one)")
	f.BoolVar(&o.compare, "compare", true, "also run the static weights on the same load")
	f.BoolVar(&o.plain, "plain", false, "print a status line per second instead of redrawing the screen")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the load")
	return c
}

func runDemo(ctx context.Context, out io.Writer, o demoOptions) error {
	switch {
	case o.servers < 2 || o.servers > 64:
		return fmt.Errorf("--servers %d: want 2…64", o.servers)
	case o.duration < 4*time.Second:
		return fmt.Errorf("--duration %v: want at least 4s", o.duration)
	case !(o.timeScale > 0):
		return fmt.Errorf("--time-scale %v: want > 0", o.timeScale)
	}
	sc, err := bench.DemoScenario(o.servers, o.duration)
	if err != nil {
		return err
	}
	adaptive, err := configs.LoadShipped("demo")
	if err != nil {
		return err
	}
	pols := []bench.Policy{{Name: "adaptive", Profile: adaptive}}
	if o.compare {
		p, _ := sim.Policies([]string{sim.PolicyStatic322})
		static, err := p[0].Profile()
		if err != nil {
			return err
		}
		pols = append(pols, bench.Policy{Name: "static", Profile: static})
	}
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	defer func() { cancel(); _ = g.Wait() }()
	targets, err := bench.StartFleet(gctx, g, sc, o.servers, o.timeScale)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "trimtab demo: %d simulated vLLM servers (×%g real time), %v of load per policy\n", o.servers, o.timeScale, o.duration)
	live, admin := !o.plain && isTerminal(out), ""
	show := func(l bench.Live) {
		if l.AdminURL != admin {
			admin = l.AdminURL
			fmt.Fprintf(out, "status page: %s/ui\n", admin)
		}
		if live {
			io.WriteString(out, l.Screen())
		} else {
			fmt.Fprintln(out, l.Line())
		}
	}
	rep, err := bench.Run(gctx, bench.Config{Scenario: sc, TimeScale: 1, Policies: pols, Repeat: 1, Seed: o.seed, Targets: targets},
		bench.Deps{StartRouter: routerStarter(o.adminAddr), Salt: func() uint64 { return o.seed | 1 }, Progress: show})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nResult (the same load under each policy; TTFT = time to first token as the client saw it):")
	return rep.WriteTables(out)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
