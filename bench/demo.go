package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/scenario"
)

// DefaultDemoRate is the demo burst's arrival rate in requests per
// second: on 16 pods at the engine model's own speed, enough in-flight
// requests that the pods holding the hot prompt carry more than the
// herd signal's bounds, and above its min_picks gate (20 picks a second).
const DefaultDemoRate = 35

// demoCalmRate is the calm phases' arrival rate (req/s).
const demoCalmRate = 4

// DemoScenario is `trimtab demo`'s load on servers servers for d: open-loop
// arrivals (a gateway's users do not wait for each other) at 4 req/s for a
// quarter of d, rate req/s for half, 4 req/s for the last quarter. 90 % of
// requests share one 6,000-token system prompt (the rest spread over 16
// groups of 1,000-token prompts), so the calm phase leaves it cached on a
// few pods and the burst surges onto a prefix the pool already holds:
// sim's hot-prefix-burst-open, shortened. Questions are 150 tokens
// (±50 %), answers 150. A request times out after 20s.
func DemoScenario(servers int, d time.Duration, rate float64) (*scenario.Scenario, error) {
	q := d / 4
	return scenario.Parse([]byte(fmt.Sprintf(`
name: demo
description: Calm, an open-loop surge on a hot prompt the pool already holds, calm again (trimtab demo).
duration: %v
servers: %d
timeout: 20s
workload: {kind: shared-prefix, groups: 16, prompts_per_group: 64, system_tokens: 1000, hot_fraction: 0.9, hot_system_tokens: 6000, question_tokens: 150, output_tokens: 150, jitter: 0.5}
load: {mode: open, levels: [%g]}
phases:
  - {name: calm, duration: %v, level: %d}
  - {name: burst, duration: %v}
  - {name: calm again, duration: %v, level: %d}
`, d, servers, rate, q, demoCalmRate, d-2*q, q, demoCalmRate)), "")
}

// DemoConfig is `trimtab demo`: the demo scenario on Servers simulated
// servers sped up Speed times, for Duration per policy.
type DemoConfig struct {
	Servers  int
	Duration time.Duration
	Speed    float64
	// Rate is the burst's arrival rate in req/s (0: DefaultDemoRate).
	Rate float64
	// Compare also runs the field's static weights (sim's static-3-2-2)
	// after the demo profile (configs/demo.yaml, adaptive).
	Compare bool
	// Screen redraws a full-screen view each second; else a line every
	// few seconds and one per change of the router's mode.
	Screen bool
	Seed   uint64
}

// DemoDeps are the demo's collaborators.
type DemoDeps struct {
	// LaunchRouter starts a router for a policy; required.
	LaunchRouter StartRouterFunc
	// HostLoad returns the machine's 1-minute load average and its cores
	// (ok false: unknown); nil skips the busy-machine warning.
	HostLoad func() (load1 float64, cores int, ok bool)
}

// Demo runs cfg, showing the run live on out (per-pod load, the router's
// mode and weights, each mode change with its reason), then prints the
// tables and a three-line summary in words. The fleet runs in g until
// ctx ends.
func Demo(ctx context.Context, g *errgroup.Group, out io.Writer, cfg DemoConfig, deps DemoDeps) error {
	if cfg.Rate == 0 {
		cfg.Rate = DefaultDemoRate
	}
	switch {
	case cfg.Servers < 2 || cfg.Servers > 64:
		return fmt.Errorf("--servers %d: want 2…64", cfg.Servers)
	case cfg.Duration < 4*time.Second:
		return fmt.Errorf("--duration %v: want at least 4s", cfg.Duration)
	case !(cfg.Speed > 0):
		return fmt.Errorf("--time-scale %v: want > 0", cfg.Speed)
	case !(cfg.Rate > 0) || cfg.Rate > 1000:
		return fmt.Errorf("--rate %v: want more than 0 and at most 1000 requests per second", cfg.Rate)
	case deps.LaunchRouter == nil:
		return fmt.Errorf("demo: DemoDeps.LaunchRouter is required")
	}
	sc, err := DemoScenario(cfg.Servers, cfg.Duration, cfg.Rate)
	if err != nil {
		return err
	}
	adaptive, err := configs.LoadShipped("demo")
	if err != nil {
		return err
	}
	pols := []Policy{{Name: "adaptive", Profile: adaptive}}
	const staticName = "static 3:2:2"
	if cfg.Compare {
		p, err := Policies([]string{sim.PolicyStatic322}, nil)
		if err != nil {
			return err
		}
		pols = append(pols, Policy{Name: "static", Profile: p[0].Profile})
	}
	targets, err := StartFleet(ctx, g, sc, cfg.Servers, cfg.Speed)
	if err != nil {
		return err
	}
	burst := sc.Phases[1].Duration
	fmt.Fprintf(out, "trimtab demo: %d simulated vLLM servers (×%g their model's speed) behind trimtab serve.\n", cfg.Servers, cfg.Speed)
	fmt.Fprintf(out, "The load: %v calm at %d req/s, a %v burst at %g req/s (90 %% of requests on one 6,000-token system prompt the pool already holds), %v calm;\n",
		sc.Phases[0].Duration, demoCalmRate, burst, cfg.Rate, sc.Phases[2].Duration)
	names := "adaptive (configs/demo.yaml: the loop on)"
	if cfg.Compare {
		names += ", then " + staticName + " (the Gateway API Inference Extension's default weights)"
	}
	fmt.Fprintf(out, "played under %s: about %v in all.\n", names, (time.Duration(len(pols)) * (cfg.Duration + 5*time.Second)).Round(10*time.Second))
	hostWarning(out, deps.HostLoad)

	v := &demoView{out: out, screen: cfg.Screen, unit: sc.LevelUnit(), hc: &http.Client{Timeout: 2 * time.Second}, reasons: map[string]string{}}
	// A fresh salt per run: the second policy must not find the first's
	// prompts in the servers' caches.
	runs := uint64(0)
	salt := func() uint64 { runs++; return cfg.Seed<<32 + 2*runs + 1 }
	rep, err := Run(ctx, Config{Scenario: sc, TimeScale: 1, Policies: pols, Repeat: 1, Seed: cfg.Seed, Targets: targets},
		Deps{LaunchRouter: deps.LaunchRouter, Salt: salt, Progress: func(l Live) { v.show(ctx, l) }})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nResult (the same load under each policy; TTFT = time to first token as the client saw it):")
	if err := rep.WriteTables(out); err != nil {
		return err
	}
	o := demoOutcome(rep, adaptive.Adaptive.ThetaOn, v.reasons, staticName)
	o.Burst = fmt.Sprintf("the %v burst at %g req/s", burst, cfg.Rate)
	hostWarning(out, deps.HostLoad)
	fmt.Fprintln(out, "Summary:")
	for _, line := range DemoSummary(o) {
		fmt.Fprintln(out, "  "+line)
	}
	return nil
}

func hostWarning(out io.Writer, load func() (float64, int, bool)) {
	if load == nil {
		return
	}
	if l, n, ok := load(); ok {
		if w := LoadWarning(l, n); w != "" {
			fmt.Fprintln(out, w)
		}
	}
}

// demoOutcome collects the summary's numbers from rep: each policy's
// burst phase (the scenario's second) and the adaptive run's loop.
func demoOutcome(rep *Report, thetaOn float64, reasons map[string]string, staticName string) DemoOutcome {
	o := DemoOutcome{StaticName: staticName}
	for _, r := range rep.Runs {
		if len(r.Phases) < 2 {
			continue
		}
		ph := r.Phases[1]
		st := r.stats(r.measured(1), ph.End-ph.Start)
		_, busiest := r.busiest(ph.Start, ph.End)
		if busiest == 0 {
			busiest = math.NaN()
		}
		n := DemoNumbers{TTFTP99: st.TTFTP99, E2EP99: st.E2EP99, TokPerSec: st.TokPerSec, Busiest: busiest, Failed: st.Failed}
		switch r.Policy {
		case "adaptive":
			o.Adaptive = n
			o.Loop = loopStory(r, thetaOn, reasons[r.Policy])
		default:
			o.Static = &n
		}
	}
	return o
}

// demoView draws the live run: the screen, or plain lines.
type demoView struct {
	out    io.Writer
	screen bool
	unit   string
	hc     *http.Client

	admin   string          // the run's admin URL
	seen    map[uint64]bool // change entries shown, by Seq
	recent  []string        // the last mode changes, for the screen
	mode    string
	phase   string
	printed time.Duration // when the last plain status line was printed
	// reasons holds each policy's first calm → rebalance reason.
	reasons map[string]string
}

// demoPlainEvery is how often the plain view prints a status line
// between changes.
const demoPlainEvery = 5 * time.Second

func (v *demoView) show(ctx context.Context, l Live) {
	l.Unit = v.unit
	if l.AdminURL != v.admin {
		v.admin, v.seen, v.recent, v.mode, v.phase, v.printed = l.AdminURL, map[uint64]bool{}, nil, "", "", -demoPlainEvery
		if !v.screen {
			fmt.Fprintf(v.out, "\n── run %d/%d: %s ── status page: %s/ui\n", l.Run, l.Runs, l.Policy, l.AdminURL)
		}
	}
	var changes []string
	if l.AdminURL != "" {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		if h, err := history(hctx, v.hc, l.AdminURL, "1s"); err == nil {
			for _, c := range h.Changes {
				if v.seen[c.Seq] || c.FromVersion == 0 {
					continue
				}
				v.seen[c.Seq] = true
				if c.FromMode == c.ToMode {
					continue
				}
				at := l.Elapsed
				if h.Latest != nil {
					at -= h.Latest.At.Sub(c.At)
				}
				why := tidyDurations(c.Reason)
				changes = append(changes, fmt.Sprintf("%4.0fs  %s → %s: %s", max(at, 0).Seconds(), c.FromMode, c.ToMode, why))
				if c.ToMode == "rebalance" && v.reasons[l.Policy] == "" {
					v.reasons[l.Policy] = why
				}
			}
		}
		cancel()
	}
	if v.screen {
		v.recent = append(v.recent, changes...)
		if len(v.recent) > 6 {
			v.recent = v.recent[len(v.recent)-6:]
		}
		s := l.Screen()
		if len(v.recent) > 0 {
			s += "\nmode changes (the configurator's reason):\n  " + strings.Join(v.recent, "\n  ") + "\n"
		}
		io.WriteString(v.out, s)
		return
	}
	for _, c := range changes {
		fmt.Fprintln(v.out, "  ▶ "+c)
	}
	if l.Phase != v.phase || l.Mode != v.mode || l.Elapsed-v.printed >= demoPlainEvery {
		v.phase, v.mode, v.printed = l.Phase, l.Mode, l.Elapsed
		fmt.Fprintln(v.out, plainLine(l))
	}
}

// longDuration is a Go duration printed to the nanosecond ("1.049997947s").
var longDuration = regexp.MustCompile(`\b\d+\.\d{4,}(?:s|ms|µs)\b`)

// tidyDurations rounds the durations in a reason to the millisecond
// ("1.049997947s" → "1.05s").
func tidyDurations(s string) string {
	return longDuration.ReplaceAllStringFunc(s, func(m string) string {
		d, err := time.ParseDuration(m)
		if err != nil {
			return m
		}
		return d.Round(time.Millisecond).String()
	})
}

// plainLine is one status line: time, phase, the router's mode, signal
// and weights, every pod's load as one character, and TTFT so far.
func plainLine(l Live) string {
	top := 0.0
	for _, x := range l.Load {
		top = max(top, x)
	}
	s := fmt.Sprintf("%4.0fs %-10s", l.Elapsed.Seconds(), l.Phase)
	if l.Mode != "" {
		s += fmt.Sprintf(" %-9s signal %.2f", l.Mode, l.Signal)
	}
	s += fmt.Sprintf("  pods %s (busiest %.0f)", LoadStrip(l.Load), top)
	if len(l.Weights) > 0 {
		names := l.Scorers
		if len(names) == 0 {
			for n := range l.Weights {
				names = append(names, n)
			}
			sort.Strings(names)
		}
		var ws []string
		for _, n := range names {
			ws = append(ws, n+" "+num(math.Round(l.Weights[n]*10)/10))
		}
		s += "  weights " + strings.Join(ws, " ")
	}
	return s + "  TTFT p99 " + fmtMs(l.Stats.TTFTP99)
}
