package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/sim"
)

// DemoScenario is `trimtab demo`'s load on servers servers for d: calm (a
// quarter of d, 4 clients), a burst (half, 64 clients) in which 90 % of
// requests share one 6,000-token system prompt (the rest spread over 16
// groups of 1,000-token prompts), calm again (4 clients). Every question
// is new, 150 tokens; answers are 150 tokens.
func DemoScenario(servers int, d time.Duration) (*sim.Scenario, error) {
	q := d / 4
	return sim.ParseScenario([]byte(fmt.Sprintf(`
name: demo
description: Calm, a hot-prefix burst, calm again (trimtab demo).
duration: %v
servers: %d
timeout: 60s
workload: {kind: shared-prefix, groups: 16, prompts_per_group: 1000000, system_tokens: 1000, question_tokens: 150, output_tokens: 150}
load: {mode: closed, levels: [64]}
phases:
  - {name: calm, duration: %v, level: 4}
  - {name: burst, duration: %v, workload: {hot_fraction: 0.9, hot_system_tokens: 6000}}
  - {name: calm again, duration: %v, level: 4}
`, d, servers, q, d-2*q, q)), "")
}

// DemoConfig is `trimtab demo`: the demo scenario on Servers simulated
// servers sped up Speed times, for Duration per policy.
type DemoConfig struct {
	Servers  int
	Duration time.Duration
	Speed    float64
	// Compare also runs the field's static weights (sim's static-3-2-2)
	// after the demo profile (configs/demo.yaml, adaptive).
	Compare bool
	// Screen redraws a full-screen view each second; else a line.
	Screen bool
	Seed   uint64
}

// Demo runs cfg, showing the run live on out, then prints the tables.
// The fleet runs in g until ctx ends.
func Demo(ctx context.Context, g *errgroup.Group, out io.Writer, cfg DemoConfig, start StartRouterFunc) error {
	switch {
	case cfg.Servers < 2 || cfg.Servers > 64:
		return fmt.Errorf("--servers %d: want 2…64", cfg.Servers)
	case cfg.Duration < 4*time.Second:
		return fmt.Errorf("--duration %v: want at least 4s", cfg.Duration)
	case !(cfg.Speed > 0):
		return fmt.Errorf("--time-scale %v: want > 0", cfg.Speed)
	}
	sc, err := DemoScenario(cfg.Servers, cfg.Duration)
	if err != nil {
		return err
	}
	adaptive, err := configs.LoadShipped("demo")
	if err != nil {
		return err
	}
	pols := []Policy{{Name: "adaptive", Profile: adaptive}}
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
	fmt.Fprintf(out, "trimtab demo: %d simulated vLLM servers (×%g real time), %v of load per policy\n", cfg.Servers, cfg.Speed, cfg.Duration)
	admin := ""
	show := func(l Live) {
		if l.AdminURL != admin {
			admin = l.AdminURL
			fmt.Fprintf(out, "status page: %s/ui\n", admin)
		}
		if cfg.Screen {
			io.WriteString(out, l.Screen())
		} else {
			fmt.Fprintln(out, l.Line())
		}
	}
	// A fresh salt per run: the second policy must not find the first's
	// prompts in the servers' caches.
	runs := uint64(0)
	salt := func() uint64 { runs++; return cfg.Seed<<32 + 2*runs + 1 }
	rep, err := Run(ctx, Config{Scenario: sc, TimeScale: 1, Policies: pols, Repeat: 1, Seed: cfg.Seed, Targets: targets},
		Deps{StartRouter: start, Salt: salt, Progress: show})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nResult (the same load under each policy; TTFT = time to first token as the client saw it):")
	return rep.WriteTables(out)
}
