package control

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/scheduler"
)

// favour is an affinity scorer that gives 1 to the endpoint named by the
// request's model (standing in for "holds this prefix") and 0 elsewhere.
type favour struct{}

func (favour) Category() scheduler.Category { return scheduler.CategoryAffinity }
func (favour) Score(_ *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i, e := range eps {
		out[i] = 0
		if e.Address == req.Model {
			out[i] = 1
		}
	}
}

// TestHerdSignal runs the default control law (herd signal, load guard,
// calm = the profile's weights) against a real scheduler on four pods.
// Requests are held for four ticks, so the router-local in-flight counts
// the guard and the signal read are exact.
//
//   - Balanced affinity (each request favours the next pod in turn) at
//     100 picks/s: the calm choice is never over the bound, the signal
//     stays 0 and the mode calm, however long it runs.
//   - A herd (every request favours a:1) at 100 picks/s: a:1 holds its
//     bound, the rest are herd picks, the signal crosses theta_on and the
//     loop enters rebalance at once.
//   - A herd at 10 picks/s, requests held 4 s: half the picks are herd
//     picks, but the rate is below min_picks: gated, calm.
func TestHerdSignal(t *testing.T) {
	pods := []string{"a:1", "b:1", "c:1", "d:1"}
	run := func(perTick, everyTicks, hold int, model func(i int) string, seconds int) (*Loop, *scheduler.Scheduler, []string) {
		t.Helper()
		prof := []scheduler.ScorerEntry{
			{Name: "prefix", Scorer: favour{}, Weight: 3},
			{Name: "queue", Scorer: catScorer(scheduler.CategoryDistribution), Weight: 1},
		}
		s, err := scheduler.New(scheduler.DefaultConfig(), prof, nil, scheduler.MaxScore{}, scheduler.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		eps := make([]scheduler.Endpoint, len(pods))
		for i, p := range pods {
			eps[i] = scheduler.Endpoint{Address: p}
		}
		s.SetEndpoints(eps)
		cfg := DefaultConfig()
		cfg.Enabled = true
		l := mustNew(t, cfg, s, Deps{})
		var held [][]*scheduler.Decision
		var modes []string
		n := 0
		for k := 0; k < seconds*20; k++ {
			var now []*scheduler.Decision
			if k%everyTicks == 0 {
				for j := 0; j < perTick; j++ {
					d, err := s.Pick(context.Background(), &scheduler.Request{ID: fmt.Sprint(n), Model: model(n)})
					if err != nil {
						t.Fatal(err)
					}
					n++
					now = append(now, d)
				}
			}
			held = append(held, now)
			if len(held) > hold {
				for _, d := range held[0] {
					d.Done(scheduler.Outcome{})
				}
				held = held[1:]
			}
			tk := l.Tick(t0.Add(time.Duration(k)*tick), s.Pool().Pointers())
			modes = append(modes, tk.Weights.Mode)
		}
		return l, s, modes
	}

	_, s, modes := run(5, 1, 4, func(i int) string { return pods[i%4] }, 20)
	for k, m := range modes {
		if m != configurator.ModeCalm {
			t.Fatalf("balanced: tick %d mode %s, want calm throughout", k, m)
		}
	}
	for _, e := range s.Pool().Pointers() {
		if e.HerdPicks() != 0 {
			t.Errorf("balanced: %s has %d herd picks", e.Address, e.HerdPicks())
		}
	}

	l, _, modes := run(5, 1, 4, func(int) string { return "a:1" }, 3)
	if got := modes[len(modes)-1]; got != configurator.ModeRebalance {
		t.Errorf("herd at 100 picks/s: mode %s after 3 s, want rebalance", got)
	}
	if sig := l.Last().Signal; sig.Herd < 0.2 || sig.Picks < 80 {
		t.Errorf("herd at 100 picks/s: herd %.3f picks %.1f, want ≥ 0.2 and ≈ 100", sig.Herd, sig.Picks)
	}

	// Held 4 s: 40 in flight, a:1 at its bound of 20, half the picks herd.
	l, s, modes = run(1, 2, 80, func(int) string { return "a:1" }, 10)
	for k, m := range modes {
		if m != configurator.ModeCalm {
			t.Fatalf("herd at 10 picks/s: tick %d mode %s, want calm (gated)", k, m)
		}
	}
	if sig := l.Last().Signal; sig.Gate != detector.GateLowLoad || sig.Herd < 0.3 {
		t.Errorf("herd at 10 picks/s: gate %q herd %.3f, want %q with herd ≥ 0.3", sig.Gate, sig.Herd, detector.GateLowLoad)
	}
	if h := s.Pool().Pointers()[0].HerdPicks(); h < 20 {
		t.Errorf("herd at 10 picks/s: a:1 has %d herd picks, want the bound exceeded", h)
	}
}

// TestHerdSignalStaticMode: with the loop off (static mode) and a guard
// configured as a scheduler setting, the guard diverts the herd and the
// loop still measures the herd signal, without changing the weights: the
// signal can be watched before adaptive mode is switched on. Every request
// favours a:1 of four pods at 100 picks/s, each held four ticks (20 in
// flight); the bound is max(2.5 × 21/4, 21/4 + 6) = 13.1, so from its
// 14th request a:1 is over it and the rest are herd picks.
func TestHerdSignalStaticMode(t *testing.T) {
	prof := []scheduler.ScorerEntry{
		{Name: "prefix", Scorer: favour{}, Weight: 3},
		{Name: "queue", Scorer: catScorer(scheduler.CategoryDistribution), Weight: 1},
	}
	scfg := scheduler.DefaultConfig()
	scfg.Guard.Factor = 2.5
	s, err := scheduler.New(scfg, prof, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints([]scheduler.Endpoint{{Address: "a:1"}, {Address: "b:1"}, {Address: "c:1"}, {Address: "d:1"}})
	l := mustNew(t, DefaultConfig(), s, Deps{}) // adaptive.enabled false
	start := s.Weights()
	var held [][]*scheduler.Decision
	n := 0
	for k := 0; k < 3*20; k++ {
		var now []*scheduler.Decision
		for j := 0; j < 5; j++ {
			d, err := s.Pick(context.Background(), &scheduler.Request{ID: fmt.Sprint(n), Model: "a:1"})
			if err != nil {
				t.Fatal(err)
			}
			n++
			now = append(now, d)
		}
		held = append(held, now)
		if len(held) > 4 {
			for _, d := range held[0] {
				d.Done(scheduler.Outcome{})
			}
			held = held[1:]
		}
		l.Tick(t0.Add(time.Duration(k)*tick), s.Pool().Pointers())
	}
	if w := s.Weights(); w != start || w.Mode != configurator.ModeStatic {
		t.Errorf("static mode: weights moved to version %d mode %s", w.Version, w.Mode)
	}
	if sig := l.Last().Signal; sig.Herd < 0.2 || sig.Picks < 80 {
		t.Errorf("static mode: herd %.3f picks %.1f, want the herd measured (≥ 0.2 at ≈ 100 picks)", sig.Herd, sig.Picks)
	}
	a := s.Pool().Pointers()[0]
	if a.InFlight() > 14 {
		t.Errorf("a:1 holds %d in flight, want at most the guard's bound", a.InFlight())
	}
}
