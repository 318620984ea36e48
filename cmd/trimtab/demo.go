package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/trimtab/trimtab/bench"
)

func newDemoCmd() *cobra.Command {
	var (
		o         bench.DemoConfig
		adminAddr string
		plain     bool
	)
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
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Screen = !plain && isTerminal(cmd.OutOrStdout())
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o, adminAddr)
		},
	}
	f := c.Flags()
	f.IntVar(&o.Servers, "servers", 8, "simulated vLLM servers")
	f.DurationVar(&o.Duration, "duration", time.Minute, "length of the load per policy (calm ¼, burst ½, calm ¼)")
	f.Float64Var(&o.Speed, "time-scale", 4, "speed-up of the simulated GPUs")
	f.StringVar(&adminAddr, "admin-addr", "127.0.0.1:9090", "status page and admin address (a busy port falls back to any free one)")
	f.BoolVar(&o.Compare, "compare", true, "also run the static weights on the same load")
	f.BoolVar(&plain, "plain", false, "print a status line per second instead of redrawing the screen")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the load")
	return c
}

// runDemo runs the demo; the simulated servers stop before it returns.
func runDemo(ctx context.Context, out io.Writer, o bench.DemoConfig, adminAddr string) error {
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	defer func() { cancel(); _ = g.Wait() }()
	return bench.Demo(gctx, g, out, o, routerStarter(routerAddrs{Proxy: "127.0.0.1:0", Admin: adminAddr, AdminFallback: true}))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
