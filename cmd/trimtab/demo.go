package main

import (
	"context"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
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
		Short: "Run trimtab in front of simulated vLLM servers under a hot-prefix surge, live",
		Long: `demo is a small trimtab bench: it starts simulated vLLM servers on loopback and
plays an open-loop hot-prefix surge (calm, a burst in which most requests share
one long system prompt the pool already holds, calm again) through trimtab serve
with the demo profile (adaptive weights), then the same load with the field's
static weights (prefix 3 : queue 2 : kvcache 2, the Gateway API Inference
Extension default). It shows per-pod load as bars, the router's mode, signal and
weights, and each mode change with the loop's reason as they happen; at the end
bench's tables and three sentences: what happened, the key numbers, and the
comparison. It warns when the machine's load average exceeds its cores, since
the comparison then means little. It takes about two minutes; the first
"go run ./cmd/trimtab demo" also downloads and compiles trimtab's dependencies
(go build -o trimtab ./cmd/trimtab once, then ./trimtab demo, skips that).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Screen = !plain && isTerminal(cmd.OutOrStdout())
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o, adminAddr, hostLoad)
		},
	}
	f := c.Flags()
	f.IntVar(&o.Servers, "servers", 16, "simulated vLLM servers")
	f.DurationVar(&o.Duration, "duration", time.Minute, "length of the load per policy (calm ¼, burst ½, calm ¼)")
	f.Float64Var(&o.Speed, "time-scale", 1, "speed-up of the simulated GPUs")
	f.Float64Var(&o.Rate, "rate", bench.DefaultDemoRate, "the burst's arrival rate, requests per second (calm is 4)")
	f.StringVar(&adminAddr, "admin-addr", "127.0.0.1:9090", "status page and admin address (a busy port falls back to any free one)")
	f.BoolVar(&o.Compare, "compare", true, "also run the static weights on the same load")
	f.BoolVar(&plain, "plain", false, "print a status line per second instead of redrawing the screen")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the load")
	return c
}

// runDemo runs the demo; the simulated servers stop before it returns.
// load reads the host's load (nil: no busy-machine warning).
func runDemo(ctx context.Context, out io.Writer, o bench.DemoConfig, adminAddr string, load func() (float64, int, bool)) error {
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	defer func() { cancel(); _ = g.Wait() }()
	return bench.Demo(gctx, g, out, o, bench.DemoDeps{
		LaunchRouter: routerStarter(routerAddrs{Proxy: "127.0.0.1:0", Admin: adminAddr, AdminFallback: true}),
		HostLoad:     load,
	})
}

// hostLoad is the 1-minute load average from /proc/loadavg and the CPUs
// this process may use; ok is false where /proc/loadavg cannot be read.
func hostLoad() (load1 float64, cores int, ok bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, 0, false
	}
	return parseLoadavg(string(b), runtime.NumCPU())
}

// parseLoadavg reads the first field of /proc/loadavg's text ("0.52 0.58
// 0.59 1/467 12345").
func parseLoadavg(s string, cores int) (load1 float64, n int, ok bool) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, 0, false
	}
	return v, cores, true
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
