package main

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim"
)

// TestServeAndSimRunOneLoop feeds one pool sequence to the control loop as
// serve wires it (newService: Run on a clock, history recording, the
// scheduler's pool) and as the simulator wires it (sim.ProfilePolicy: Tick
// on virtual time) and checks that both publish identical weight
// versions. The sequence walks through calm, a hot pod (rebalance) and
// back: 16 pods with 4 requests each; from tick 40 to 120 pod 0 also
// queues 40.
func TestServeAndSimRunOneLoop(t *testing.T) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	// The CV signal reads the scraped load this test feeds in; the herd
	// signal would need picks (control's TestHerdSignal covers it).
	f.Adaptive.Detector.Signal = detector.SignalCV
	pool := func(n int) []scheduler.Endpoint {
		eps := make([]scheduler.Endpoint, 16)
		for i := range eps {
			eps[i] = scheduler.Endpoint{Address: fmt.Sprintf("10.0.0.%d:8000", i+1), Running: float64(4 + (n+i)%2), KVUtil: 0.2, State: scheduler.StateFresh}
		}
		if n >= 40 && n < 120 {
			eps[0].Waiting = 40
		}
		return eps
	}
	const ticks = 200
	interval := f.Adaptive.Detector.Interval

	// serve's wiring.
	fc := clocktesting.NewFakeClock(sim.Epoch)
	served := *f
	served.HasEndpoints = true
	svc, err := newService(&served, serviceOptions{Clock: fc, Logger: slog.New(slog.DiscardHandler), Discoverer: noDiscovery{}, DisableExtProc: true, NoRuntimeM: true})
	if err != nil {
		t.Fatal(err)
	}
	var serveWs []*scheduler.Weights
	var last *control.Tick
	ticked := func() bool { tk := svc.loop.Last(); return tk != nil && tk != last }
	take := func() {
		last = svc.loop.Last()
		if last.Changed() {
			serveWs = append(serveWs, last.Weights)
		}
	}
	svc.sched.SetEndpoints(pool(0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.loop.Run(ctx) }()
	eventually(t, 5*time.Second, "first tick", ticked)
	take()
	for n := 1; n < ticks; n++ {
		svc.sched.SetEndpoints(pool(n))
		eventually(t, 5*time.Second, "ticker", fc.HasWaiters)
		fc.Step(interval)
		eventually(t, 5*time.Second, fmt.Sprintf("tick %d", n), ticked)
		take()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// sim's wiring.
	sched, simLoop, err := sim.ProfilePolicy("adaptive", "", f).Build(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var simWs []*scheduler.Weights
	for n := 0; n < ticks; n++ {
		sched.SetEndpoints(pool(n))
		if tk := simLoop.Tick(sim.Epoch.Add(time.Duration(n)*interval), sched.Pool().Pointers()); tk.Changed() {
			simWs = append(simWs, tk.Weights)
		}
	}

	if len(serveWs) < 3 || !reflect.DeepEqual(serveWs, simWs) {
		t.Fatalf("serve published %d versions, sim %d; they differ:\nserve %s\nsim   %s", len(serveWs), len(simWs), versions(serveWs), versions(simWs))
	}
	modes := map[string]bool{}
	for _, w := range serveWs {
		modes[w.Mode] = true
	}
	if !modes["calm"] || !modes["rebalance"] {
		t.Errorf("the sequence visited modes %v; it should pass calm and rebalance", modes)
	}
}

func versions(ws []*scheduler.Weights) string {
	s := ""
	for _, w := range ws {
		s += fmt.Sprintf("[v%d %s %.3v] ", w.Version, w.Mode, w.Values)
	}
	return s
}

// noDiscovery finds no endpoints; the test installs pools itself.
type noDiscovery struct{}

func (noDiscovery) Run(ctx context.Context, _ fleet.Sink) error { <-ctx.Done(); return nil }
