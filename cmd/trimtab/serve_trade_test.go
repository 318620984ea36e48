package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/configurator"
)

// TestServeTradeFirstPool: serve's control loop takes its first tick as it
// starts, before static discovery's first list. On a pool of declared
// capacities 1 and 3 the trade law's shape (time-cost first) must still be
// in force as soon as the pool is, not one loop interval later: the loop
// ticks every 10 s here, and the shape is checked well inside that.
func TestServeTradeFirstPool(t *testing.T) {
	addrs := startFakeFleet(t, 2)
	dir := t.TempDir()
	eps := fmt.Sprintf("endpoints:\n  - address: %s\n    models: [m]\n    capacity: 1\n  - address: %s\n    models: [m]\n    capacity: 3\n", addrs[0], addrs[1])
	epsFile := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(epsFile, []byte(eps), 0o644); err != nil {
		t.Fatal(err)
	}
	profile := writeProfile(t, dir, fmt.Sprintf(`scorers:
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
endpoints:
  mode: static
  file: %s
`, epsFile))
	f, err := configs.Load(profile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.Server.Admin.Enabled, f.Server.ExtProc.Enabled = false, false
	svc, err := newService(f, serviceOptions{Logger: slog.New(slog.DiscardHandler), HTTP: ln, NoRuntimeM: true})
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
	start := time.Now()
	eventually(t, 3*time.Second, "the trade shape (prefix 2 : inflight 1 : time-cost 16)", func() bool {
		w := svc.sched.Weights()
		return len(svc.sched.Pool().Endpoints) == 2 && w.Mode == configurator.ModeCalm &&
			w.Values[0] == 2 && w.Values[1] == 1 && w.Values[2] == 16
	})
	t.Logf("in force %v after start", time.Since(start).Round(time.Millisecond))
}
