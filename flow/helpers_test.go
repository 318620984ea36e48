package flow

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/scheduler"
)

// preferScorer scores the endpoint at addr 1 and every other 0, so the
// scheduler's unrestricted choice is known.
type preferScorer struct{ addr string }

func (preferScorer) Category() scheduler.Category { return scheduler.CategoryAffinity }
func (p preferScorer) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i, e := range eps {
		out[i] = 0
		if e.Address == p.addr {
			out[i] = 1
		}
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rig is a controller on a real scheduler with n endpoints ("a", "b",
// …), a fake clock, and a registry.
type rig struct {
	clk   *clocktesting.FakeClock
	sched *scheduler.Scheduler
	c     *Controller
	reg   *prometheus.Registry
}

// newRig builds a rig whose endpoints hold capacity tokens each and
// whose scorer prefers "a". cfg is flow's config to start from.
func newRig(t *testing.T, cfg Config, eps ...scheduler.Endpoint) *rig {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{{Name: "prefer", Scorer: preferScorer{addr: "a"}, Weight: 1}},
		nil, scheduler.MaxScore{}, scheduler.Deps{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(eps)
	reg := prometheus.NewRegistry()
	c, err := New(cfg, Deps{Scheduler: s, Clock: clk, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{clk: clk, sched: s, c: c, reg: reg}
}

// testConfig is flow on, each endpoint full at 2 requests of 100 prompt
// bytes (25 tokens) and 75 output tokens: 100 tokens each, capacity 250
// × 0.8 = 200.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Enabled = true
	cfg.Saturation.CapacityTokens = 250
	cfg.Saturation.OutputTokens = 75
	return cfg
}

func ep(addr string) scheduler.Endpoint {
	return scheduler.Endpoint{Address: addr, State: scheduler.StateStale}
}

func req() *scheduler.Request { return &scheduler.Request{Prompt: make([]byte, 100)} }

// picked is what a Pick returned.
type picked struct {
	d     *scheduler.Decision
	lease Lease
	err   error
}

// pickAsync runs Pick in a goroutine and returns where its answer will
// arrive.
func (r *rig) pickAsync(ctx context.Context, q *scheduler.Request, cl Class) <-chan picked {
	ch := make(chan picked, 1)
	go func() {
		d, l, err := r.c.Pick(ctx, q, cl, 0)
		ch <- picked{d, l, err}
	}()
	return ch
}

// waitQueued polls until n requests wait (the goroutine queued them).
func (r *rig) waitQueued(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.c.Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %d requests, want %d", r.c.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func recv(t *testing.T, ch <-chan picked) picked {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no answer from Pick")
		return picked{}
	}
}

// finish ends a dispatched request.
func finish(p picked) {
	p.d.Done(scheduler.Outcome{})
	p.lease.Release()
}
