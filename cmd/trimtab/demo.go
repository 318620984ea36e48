package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/internal/loadgen"
	"github.com/trimtab/trimtab/internal/status"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
	"github.com/trimtab/trimtab/sim/fakeserver"
)

type demoOptions struct {
	servers   int
	duration  time.Duration
	timeScale float64
	adminAddr string
	compare   bool
	plain     bool
	seed      uint64
}

func newDemoCmd() *cobra.Command {
	o := demoOptions{}
	c := &cobra.Command{
		Use:   "demo",
		Short: "Run trimtab in front of simulated vLLM servers under a hot-prefix burst, live",
		Long: `demo starts simulated vLLM servers on loopback, trimtab serve in front of them with
the demo profile (adaptive weights), and a load generator that plays the hot-prefix
scenario: calm, a burst in which most requests share one long system prompt, calm
again. A second, identical pool runs the same load with the field's static weights
(prefix 3 : queue 2 : kvcache 2, the Gateway API Inference Extension default). The terminal
shows weights, signal, mode and per-pod load as they move, and a side-by-side of
adaptive against static at the end. The status page URL is printed while it runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := c.Flags()
	f.IntVar(&o.servers, "servers", 8, "simulated vLLM servers per pool")
	f.DurationVar(&o.duration, "duration", time.Minute, "length of the load (calm ¼, burst ½, calm ¼)")
	f.Float64Var(&o.timeScale, "time-scale", 4, "speed-up of the simulated GPUs")
	f.StringVar(&o.adminAddr, "admin-addr", "127.0.0.1:9090", "status page and admin address of the adaptive instance (a busy port falls back to any free one)")
	f.BoolVar(&o.compare, "compare", true, "run a static-weights pool beside the adaptive one on the same load")
	f.BoolVar(&o.plain, "plain", false, "print a status line per second instead of redrawing the screen")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the load")
	return c
}

// demoSide is one pool: simulated servers and a trimtab in front of them.
type demoSide struct {
	name     string
	svc      *service
	proxyURL string
	adminURL string
	gen      *loadgen.Generator
	results  []loadgen.Result
}

// fixedTargets is a Discoverer that reports one fixed list.
type fixedTargets []fleet.Target

func (t fixedTargets) Run(ctx context.Context, sink fleet.Sink) error {
	sink.Update(slices.Clone([]fleet.Target(t)))
	<-ctx.Done()
	return nil
}

func runDemo(ctx context.Context, out io.Writer, o demoOptions) error {
	if o.servers < 2 || o.servers > 64 {
		return fmt.Errorf("--servers %d: want 2…64", o.servers)
	}
	if o.duration < 4*time.Second {
		return fmt.Errorf("--duration %v: want at least 4s", o.duration)
	}
	if !(o.timeScale > 0) {
		return fmt.Errorf("--time-scale %v: want > 0", o.timeScale)
	}
	profile, err := configs.LoadShipped("demo")
	if err != nil {
		return err
	}
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bg, bctx := errgroup.WithContext(ctx)
	defer func() { cancel(); _ = bg.Wait() }()

	lcfg := loadgen.DefaultConfig()
	lcfg.Seed = o.seed
	q := o.duration / 4
	lcfg.Phases[0].Duration, lcfg.Phases[1].Duration, lcfg.Phases[2].Duration = q, o.duration-2*q, q

	names := []string{"adaptive"}
	if o.compare {
		names = append(names, "static")
	}
	var sides []*demoSide
	for _, name := range names {
		targets, err := startDemoServers(bctx, bg, name, o)
		if err != nil {
			return err
		}
		f := *profile
		f.Adaptive.Enabled = name == "adaptive"
		if name == "static" {
			// The field's static default, prefix 3 : queue 2 : kvcache 2
			// (the Gateway API Inference Extension's weights).
			f.Scorers = slices.DeleteFunc(slices.Clone(f.Scorers), func(s configs.ScorerConfig) bool {
				return s.Type != scorers.TypePrefix && s.Type != scorers.TypeQueue && s.Type != scorers.TypeKVCache
			})
		}
		admin := "127.0.0.1:0"
		if name == "adaptive" {
			admin = o.adminAddr
		}
		side, err := startDemoService(bctx, bg, name, &f, targets, admin, log)
		if err != nil {
			return err
		}
		cfg := lcfg
		cfg.URL = side.proxyURL
		if side.gen, err = loadgen.New(cfg, loadgen.Deps{}); err != nil {
			return err
		}
		sides = append(sides, side)
	}
	fmt.Fprintf(out, "trimtab demo: %d simulated vLLM servers per pool (×%g real time), %v of load\n", o.servers, o.timeScale, o.duration)
	fmt.Fprintf(out, "status page: %s/ui\n\n", sides[0].adminURL)
	for _, s := range sides {
		if err := waitReady(ctx, s.svc, 10*time.Second); err != nil {
			return fmt.Errorf("%s pool: %w", s.name, err)
		}
	}

	var wg sync.WaitGroup
	for _, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.results = s.gen.Run(ctx)
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	live := !o.plain && isTerminal(out)
loop:
	for {
		select {
		case <-finished:
			break loop
		case <-ctx.Done():
			<-finished
			break loop
		case <-tick.C:
			renderDemo(out, sides, lcfg, live)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	renderDemo(out, sides, lcfg, live)
	fmt.Fprintln(out)
	renderComparison(out, sides, lcfg)
	return nil
}

func startDemoServers(ctx context.Context, g *errgroup.Group, pool string, o demoOptions) ([]fleet.Target, error) {
	var targets []fleet.Target
	for i := 0; i < o.servers; i++ {
		cfg := fakeserver.DefaultConfig()
		cfg.Name = fmt.Sprintf("%s-%d", pool, i)
		cfg.TimeScale = o.timeScale
		srv, err := fakeserver.New(cfg, fakeserver.Deps{})
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		g.Go(func() error { return srv.Serve(ctx, ln) })
		targets = append(targets, fleet.Target{Address: ln.Addr().String(), Name: cfg.Name, Models: []string{cfg.Model}, Ready: true})
	}
	return targets, nil
}

func startDemoService(ctx context.Context, g *errgroup.Group, name string, f *configs.File, targets []fleet.Target, adminAddr string, log *slog.Logger) (*demoSide, error) {
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	adminLn, err := net.Listen("tcp", adminAddr)
	if err != nil {
		if adminLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	svc, err := newService(f, serviceOptions{Logger: log, Discoverer: fixedTargets(targets),
		HTTP: httpLn, Admin: adminLn, DisableExtProc: true, NoRuntimeM: true})
	if err != nil {
		return nil, err
	}
	g.Go(func() error { return svc.Run(ctx) })
	return &demoSide{name: name, svc: svc, proxyURL: "http://" + httpLn.Addr().String(), adminURL: "http://" + adminLn.Addr().String()}, nil
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

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// renderDemo draws the live view: the adaptive pool's weights, signal,
// mode and per-pod load, and TTFT so far on every pool.
func renderDemo(out io.Writer, sides []*demoSide, lcfg loadgen.Config, live bool) {
	main := sides[0]
	st := main.gen.Stats()
	phase := lcfg.Phases[min(st.Phase, len(lcfg.Phases)-1)]
	h := main.svc.hist.History(status.Query{Last: time.Second})
	w := main.svc.sched.Weights()
	if !live {
		sig := 0.0
		if h.Latest != nil {
			sig = h.Latest.Signal
		}
		parts := []string{fmt.Sprintf("t=%3.0fs %-10s", st.Elapsed.Seconds(), phase.Name), fmt.Sprintf("mode=%-9s signal=%.2f", w.Mode, sig)}
		for i, e := range main.svc.sched.Scorers() {
			parts = append(parts, fmt.Sprintf("%s=%.2f", e.Name, w.Values[i]))
		}
		for _, s := range sides {
			ss := s.gen.Stats()
			parts = append(parts, fmt.Sprintf("%s ttft p50/p99 %s/%s", s.name, ms(ss.TTFTp50), ms(ss.TTFTp99)))
		}
		fmt.Fprintln(out, strings.Join(parts, "  "))
		return
	}
	var b strings.Builder
	b.WriteString("\033[H\033[2J")
	fmt.Fprintf(&b, "trimtab demo   t=%.0fs/%.0fs   phase: %s (%d clients)   status page: %s/ui\n\n",
		st.Elapsed.Seconds(), lcfg.TotalDuration().Seconds(), phase.Name, phase.Concurrency, main.adminURL)
	fmt.Fprintf(&b, "adaptive weights v%d  mode %s", w.Version, strings.ToUpper(w.Mode))
	if l := h.Latest; l != nil {
		fmt.Fprintf(&b, "   signal %.2f (request cv %.2f, kv cv %.2f, pressure %.2f)", l.Signal,
			l.Components["request_cv"], l.Components["kv_cv"], l.Components["pressure"])
		if l.Gate != "" {
			fmt.Fprintf(&b, " held: %s", l.Gate)
		}
	}
	b.WriteString("\n  ")
	for i, e := range main.svc.sched.Scorers() {
		fmt.Fprintf(&b, "%-9s %5.2f   ", e.Name, w.Values[i])
	}
	fmt.Fprintf(&b, "\n  last change: %s\n\n", w.Reason)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pod\twaiting\trunning\tKV\tin-flight\tpicks\tshare\t")
	pool := main.svc.sched.Pool().Endpoints
	for i := range pool {
		e := &pool[i]
		picks := st.ByEndpoint[e.Address]
		share := 0.0
		if n := st.Requests - st.Failed; n > 0 {
			share = float64(picks) / float64(n)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f%%\t%d\t%d\t%.0f%%\t\n", e.Name, e.Waiting, e.Running, 100*e.KVUtil, e.InFlight(), picks, 100*share)
	}
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TTFT so far\tp50\tp90\tp99\trequests\tfailed\t")
	for _, s := range sides {
		ss := s.gen.Stats()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t\n", s.name, ms(ss.TTFTp50), ms(ss.TTFTp90), ms(ss.TTFTp99), ss.Requests, ss.Failed)
	}
	tw.Flush()
	io.WriteString(out, b.String())
}

// renderComparison prints adaptive against static per phase and overall.
func renderComparison(out io.Writer, sides []*demoSide, lcfg loadgen.Config) {
	fmt.Fprintln(out, "Result (same load on both pools; TTFT = time to first token as the client saw it):")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tpool\trequests\tfailed\tTTFT p50\tTTFT p90\tTTFT p99\tE2E p50\tE2E p99\ttokens/s\tbusiest pod\t")
	for pi := -1; pi < len(lcfg.Phases); pi++ {
		label := "all"
		dur := lcfg.TotalDuration()
		if pi >= 0 {
			label, dur = lcfg.Phases[pi].Name, lcfg.Phases[pi].Duration
		}
		for _, s := range sides {
			var res []loadgen.Result
			for _, r := range s.results {
				if pi < 0 || r.Phase == pi {
					res = append(res, r)
				}
			}
			st := loadgen.Summarise(res)
			busiest := 0
			for _, n := range st.ByEndpoint {
				busiest = max(busiest, n)
			}
			share := 0.0
			if ok := st.Requests - st.Failed; ok > 0 {
				share = float64(busiest) / float64(ok)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f%%\t\n", label, s.name, st.Requests, st.Failed,
				ms(st.TTFTp50), ms(st.TTFTp90), ms(st.TTFTp99), ms(st.E2Ep50), ms(st.E2Ep99), float64(st.Tokens)/dur.Seconds(), 100*share)
		}
	}
	tw.Flush()
	if len(sides) == 2 {
		a, s := loadgen.Summarise(phaseResults(sides[0], 1)), loadgen.Summarise(phaseResults(sides[1], 1))
		if a.Tokens > 0 && s.Tokens > 0 && a.E2Ep50 > 0 && a.TTFTp99 > 0 {
			fmt.Fprintf(out, "\nDuring the burst, adaptive against static: output tokens ×%.2f, E2E p50 %s vs %s, TTFT p99 %s vs %s.\n",
				float64(a.Tokens)/float64(s.Tokens), ms(a.E2Ep50), ms(s.E2Ep50), ms(a.TTFTp99), ms(s.TTFTp99))
		}
	}
}

func phaseResults(s *demoSide, phase int) []loadgen.Result {
	var res []loadgen.Result
	for _, r := range s.results {
		if r.Phase == phase {
			res = append(res, r)
		}
	}
	return res
}
