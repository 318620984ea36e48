package main

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/fleet"
)

// afterFirstTick is a Discoverer that reports its targets only once the
// control loop has ticked: the order serve usually starts in (the loop's
// first tick before discovery's first list), made certain.
type afterFirstTick struct {
	targets fleet.Fixed
	ticked  func() bool
}

func (d afterFirstTick) Run(ctx context.Context, sink fleet.Sink) error {
	for !d.ticked() {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	return d.targets.Run(ctx, sink)
}

// TestServeTradeFirstPool: serve's control loop takes its first tick as it
// starts, before discovery's first list. On a pool of declared capacities
// 1 and 3 the trade law's shape (time-cost first) must still be in force
// as soon as the pool is, not one loop interval later: the loop ticks
// every 10 s here, and the shape is checked well inside that.
func TestServeTradeFirstPool(t *testing.T) {
	addrs := startFakeFleet(t, 2)
	dir := t.TempDir()
	profile := writeProfile(t, dir, `scorers:
  - type: prefix
    weight: 32
  - type: inflight
    weight: 1
  - type: time-cost
    weight: 0
adaptive:
  enabled: true
  detector:
    interval: 10s
    herd_window: 10s
  trade:
    enabled: true
    weights: {prefix: 2, time-cost: 16}
`)
	f, err := configs.Load(profile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.Server.Admin.Enabled, f.Server.ExtProc.Enabled = false, false
	var svc *service
	disc := afterFirstTick{
		targets: fleet.Fixed{{Address: addrs[0], Models: []string{"m"}, Capacity: 1, Ready: true}, {Address: addrs[1], Models: []string{"m"}, Capacity: 3, Ready: true}},
		ticked:  func() bool { return svc.loop.Last() != nil },
	}
	svc, err = newService(f, serviceOptions{Logger: slog.New(slog.DiscardHandler), HTTP: ln, NoRuntimeM: true, Discoverer: disc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	eventually(t, 3*time.Second, "the trade shape (prefix 2 : inflight 1 : time-cost 16)", func() bool {
		w := svc.sched.Weights()
		return len(svc.sched.Pool().Endpoints) == 2 && w.Mode == configurator.ModeCalm &&
			w.Values[0] == 2 && w.Values[1] == 1 && w.Values[2] == 16
	})
	if tk := svc.loop.Last(); tk == nil || tk.Trade == "" {
		t.Errorf("the last tick %+v did not make the trade change: the shape came from elsewhere", tk)
	}
}
