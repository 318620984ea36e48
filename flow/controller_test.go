package flow

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trimtab/trimtab/scheduler"
)

// A saturated preferred endpoint does not make a request wait: it goes
// to the idle one at once.
func TestPickGoesToTheEndpointWithRoom(t *testing.T) {
	r := newRig(t, testConfig(), ep("a"), ep("b"))
	var held []picked
	for range 2 { // a's ledger: 2 × 100 = 200 ≥ 0.8 × 250: saturated
		d, l, err := r.c.Pick(context.Background(), req(), Class{Band: 1}, 0)
		if err != nil || d.Endpoint.Address != "a" {
			t.Fatalf("pick: %v on %v, want a", err, d)
		}
		held = append(held, picked{d, l, nil})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, l, err := r.c.Pick(ctx, req(), Class{Band: 1}, 0) // a queued pick ends with ctx: nothing runs Drain
	if err != nil || d.Endpoint.Address != "b" {
		t.Fatalf("third pick: %v, want b (a is saturated, b idle)", err)
	}
	if r.c.Len() != 0 {
		t.Fatalf("queue holds %d next to an idle endpoint", r.c.Len())
	}
	finish(picked{d, l, nil})
	for _, p := range held {
		finish(p)
	}
	if r.c.Load("a") != 0 || r.c.Load("b") != 0 {
		t.Fatalf("ledger after all finished: a %d b %d, want 0", r.c.Load("a"), r.c.Load("b"))
	}
}

// checkNoIdleWait fails when the queue holds work while an eligible
// endpoint of the head request has room for the head's band: it is not
// saturated, its pending prefill wait is below the band's budget, and it
// is not one of the clear endpoints (carrying none of the router's
// requests of the band or a lower one) the band's reserve keeps for the
// bands above — at most min(reserve, eligible − 1) of them, and only
// while no more are clear.
func checkNoIdleWait(t *testing.T, r *rig, step int) {
	t.Helper()
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	it := r.c.q.Peek()
	if it == nil {
		return
	}
	now := r.clk.Now()
	budget := r.c.cfg.Budgets()[it.Band].Seconds()
	clearOf := func(e *scheduler.Endpoint) bool {
		s := r.c.ledger[e.Address]
		if s == nil {
			return true
		}
		for b := it.Band; b < len(s.bands); b++ {
			if s.bands[b].Load() > 0 {
				return false
			}
		}
		return true
	}
	tokensOf := func(e *scheduler.Endpoint) int64 {
		if s := r.c.ledger[e.Address]; s != nil {
			return s.tokens.Load()
		}
		return 0
	}
	var room []*scheduler.Endpoint
	eligible, clear := 0, 0
	for _, e := range r.sched.Pool().Pointers() {
		if !Eligible(e, it.Value.req, now) {
			continue
		}
		eligible++
		if r.c.det.Saturated(e, tokensOf(e), r.c.cfg.Thresholds()[it.Band], now) || r.c.det.Wait(e, true) >= budget {
			continue
		}
		room = append(room, e)
		if clearOf(e) {
			clear++
		}
	}
	reserved := clear > 0 && clear <= min(r.c.cfg.Bands[it.Band].Reserve, eligible-1)
	for _, e := range room {
		if reserved && clearOf(e) {
			continue
		}
		t.Fatalf("step %d: %d requests wait (head in band %d) while %s has room (ledger %d, wait %.3fs)",
			step, r.c.q.Len(), it.Band, e.Address, tokensOf(e), r.c.det.Wait(e, true))
	}
}

// TestNoWaitNextToAnIdleEndpoint drives random arrivals and completions
// through the controller and checks after every step that no request
// waits while an eligible endpoint has room, and that everything queued
// is eventually dispatched.
func TestNoWaitNextToAnIdleEndpoint(t *testing.T) {
	r := newRig(t, testConfig(), ep("a"), ep("b"), ep("c"))
	rng := rand.New(rand.NewPCG(1, 2))
	var running []picked
	var waiting []<-chan picked
	queued := 0
	for step := range 300 {
		if rng.IntN(2) == 0 || len(running) == 0 {
			ch := r.pickAsync(context.Background(), req(), Class{Band: rng.IntN(3), Tenant: []string{"x", "y"}[rng.IntN(2)]})
			// Either it is dispatched at once or it is queued.
			select {
			case p := <-ch:
				if p.err != nil {
					t.Fatal(p.err)
				}
				running = append(running, p)
				// A dispatch at once pokes the dispatcher while requests
				// wait (it may have taken a lower band's reserve): drain
				// as Run would.
				r.c.Drain()
				for n := queued - r.c.Len(); n > 0; n-- {
					running = append(running, recvAny(t, &waiting))
					queued--
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("step %d: neither dispatched nor queued", step)
			case <-waitFor(r, queued+1):
				queued++
				waiting = append(waiting, ch)
			}
		} else {
			i := rng.IntN(len(running))
			finish(running[i])
			running = append(running[:i], running[i+1:]...)
			r.c.Drain()
			// Everything the drain dispatched is delivered.
			for n := queued - r.c.Len(); n > 0; n-- {
				p := recvAny(t, &waiting)
				running = append(running, p)
				queued--
			}
		}
		checkNoIdleWait(t, r, step)
	}
	for len(running) > 0 || queued > 0 {
		if len(running) == 0 {
			t.Fatalf("%d requests wait with nothing running", queued)
		}
		finish(running[0])
		running = running[1:]
		r.c.Drain()
		for n := queued - r.c.Len(); n > 0; n-- {
			running = append(running, recvAny(t, &waiting))
			queued--
		}
		checkNoIdleWait(t, r, -1)
	}
}

// waitFor returns a channel closed when n requests are queued.
func waitFor(r *rig, n int) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for r.c.Len() < n && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if r.c.Len() >= n {
			close(ch)
		}
	}()
	return ch
}

// recvAny returns the first answer among waiting and drops its channel.
func recvAny(t *testing.T, waiting *[]<-chan picked) picked {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, ch := range *waiting {
			select {
			case p := <-ch:
				*waiting = append((*waiting)[:i], (*waiting)[i+1:]...)
				if p.err != nil {
					t.Fatal(p.err)
				}
				return p
			default:
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("a dispatched request never got its answer")
	return picked{}
}

// A queued request is picked when it is dispatched, with the pool as it
// is then: it lands on the endpoint that got room, and Run dispatches it
// on the release alone, without the poll.
func TestLateBindingOnRelease(t *testing.T) {
	r := newRig(t, testConfig(), ep("a"), ep("b"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.c.Run(ctx) }()
	var held []picked
	for range 4 {
		d, l, err := r.c.Pick(context.Background(), req(), Class{Band: 0}, 0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, picked{d, l, nil})
	}
	ch := r.pickAsync(context.Background(), req(), Class{Band: 0})
	r.waitQueued(t, 1)
	// Free b (held[2] or held[3] is on b: a took the first two).
	var onB picked
	for _, p := range held {
		if p.d.Endpoint.Address == "b" {
			onB = p
		}
	}
	finish(onB)
	p := recv(t, ch)
	if p.err != nil || p.d.Endpoint.Address != "b" {
		t.Fatalf("queued request: %v on %+v, want b (a is still full)", p.err, p.d)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestTTLIsTheMinimumAndExpires(t *testing.T) {
	cfg := testConfig()
	cfg.TTL = 10 * time.Second
	cfg.Bands[1].TTL = 5 * time.Second
	cls, err := NewClassifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		band int
		own  time.Duration
		want time.Duration
	}{
		{0, 0, 10 * time.Second},                // global only
		{1, 0, 5 * time.Second},                 // min(10s, band 5s)
		{1, 2 * time.Second, 2 * time.Second},   // min(10s, 5s, request 2s)
		{1, 7 * time.Second, 5 * time.Second},   // the request cannot extend its band's
		{0, 20 * time.Second, 10 * time.Second}, // nor the global
	} {
		if got := cls.TTL(Class{Band: tc.band, TTL: tc.own}); got != tc.want {
			t.Errorf("TTL(band %d, own %v) = %v, want %v", tc.band, tc.own, got, tc.want)
		}
	}

	r := newRig(t, cfg, ep("a"))
	for range 2 {
		if _, _, err := r.c.Pick(context.Background(), req(), Class{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	ch := r.pickAsync(context.Background(), req(), Class{Band: 1, Tenant: "t", TTL: 2 * time.Second})
	r.waitQueued(t, 1)
	r.clk.Step(1999 * time.Millisecond)
	r.c.Drain()
	if r.c.Len() != 1 {
		t.Fatal("expired before its TTL")
	}
	r.clk.Step(time.Millisecond)
	r.c.Drain()
	if p := recv(t, ch); !errors.Is(p.err, ErrExpired) {
		t.Fatalf("after its TTL: %v, want ErrExpired", p.err)
	}
	if got := testutil.ToFloat64(r.c.m.drops.WithLabelValues("standard", "t", ReasonTTL)); got != 1 {
		t.Fatalf("ttl drops %v, want 1", got)
	}
}

func TestClientGoneLeavesTheQueue(t *testing.T) {
	r := newRig(t, testConfig(), ep("a"))
	for range 2 {
		if _, _, err := r.c.Pick(context.Background(), req(), Class{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := r.pickAsync(ctx, req(), Class{Tenant: "t"})
	r.waitQueued(t, 1)
	cancel()
	if p := recv(t, ch); !errors.Is(p.err, context.Canceled) {
		t.Fatalf("client gone: %v, want context.Canceled", p.err)
	}
	if r.c.Len() != 0 {
		t.Fatal("the request of a client that went away is still queued")
	}
	if got := testutil.ToFloat64(r.c.m.drops.WithLabelValues("interactive", "t", ReasonClientGone)); got != 1 {
		t.Fatalf("client-gone drops %v, want 1", got)
	}
}

func TestQueueFullAndShed(t *testing.T) {
	cfg := testConfig()
	cfg.MaxQueue = 1
	r := newRig(t, cfg, ep("a"))
	for range 2 {
		if _, _, err := r.c.Pick(context.Background(), req(), Class{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	batch := r.pickAsync(context.Background(), req(), Class{Band: 2})
	r.waitQueued(t, 1)
	if _, _, err := r.c.Pick(context.Background(), req(), Class{Band: 2}, 0); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("sheddable into a full queue: %v, want ErrQueueFull", err)
	}
	inter := r.pickAsync(context.Background(), req(), Class{Band: 0})
	if p := recv(t, batch); !errors.Is(p.err, ErrShed) {
		t.Fatalf("queued sheddable request: %v, want ErrShed", p.err)
	}
	r.waitQueued(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.c.Run(ctx) }()
	cancel()
	<-done
	if p := recv(t, inter); !errors.Is(p.err, ErrStopped) {
		t.Fatalf("queued at shutdown: %v, want ErrStopped", p.err)
	}
}

// Stale metrics fail open: a scraped queue the detector would call full
// holds nothing once it is older than max_age.
func TestStaleMetricsFailOpen(t *testing.T) {
	d := NewDetector(DefaultConfig().Saturation) // no capacity: only the scraped opinion
	fresh := scheduler.Endpoint{Address: "a", State: scheduler.StateFresh, Waiting: 9, ScrapedAt: t0}
	for _, tc := range []struct {
		name string
		e    scheduler.Endpoint
		now  time.Time
		want bool
	}{
		{"fresh, waiting 9 ≥ 5", fresh, t0.Add(time.Second), true},
		{"older than max_age 1s", fresh, t0.Add(time.Second + 1), false},
		{"state stale", scheduler.Endpoint{State: scheduler.StateStale, Waiting: 9, ScrapedAt: t0}, t0, false},
		{"never scraped", scheduler.Endpoint{Waiting: 9}, t0, false},
		{"fresh, KV 0.8 ≥ 0.8", scheduler.Endpoint{KVUtil: 0.8, ScrapedAt: t0}, t0, true},
		{"fresh, idle", scheduler.Endpoint{Waiting: 4, KVUtil: 0.79, ScrapedAt: t0}, t0, false},
	} {
		if got := d.Saturated(&tc.e, 0, 0.8, tc.now); got != tc.want {
			t.Errorf("%s: saturated %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSaturationByLearnedCapacity(t *testing.T) {
	r := newRig(t, testConfig(), ep("a"))
	r.sched.SetCalibration("a", scheduler.Calibration{KVCapacityTokens: 1000})
	e := r.sched.Pool().Pointers()[0]
	for _, tc := range []struct {
		tokens int64
		want   bool
	}{
		{799, false}, // 799 < 0.8 × 1000 learned (the configured 250 is ignored)
		{800, true},  // 800 ≥ 800
	} {
		if got := r.c.det.Saturated(e, tc.tokens, 0.8, t0); got != tc.want {
			t.Errorf("tokens %d: saturated %v, want %v", tc.tokens, got, tc.want)
		}
	}
}

func TestMetricTenantsAreCapped(t *testing.T) {
	cfg := testConfig()
	cfg.MetricTenants = 2
	r := newRig(t, cfg, ep("a"))
	for _, ten := range []string{"t1", "t2", "t3", "t4"} {
		d, l, err := r.c.Pick(context.Background(), req(), Class{Tenant: ten}, 0)
		if err != nil {
			t.Fatal(err)
		}
		finish(picked{d, l, nil})
	}
	// t1, t2 keep their names; t3 and t4 fold into other: 1 + 1 + 2.
	want := `
# HELP trimtab_flow_dispatches_total Requests flow control handed to the scheduler.
# TYPE trimtab_flow_dispatches_total counter
trimtab_flow_dispatches_total{band="interactive",tenant="other"} 2
trimtab_flow_dispatches_total{band="interactive",tenant="t1"} 1
trimtab_flow_dispatches_total{band="interactive",tenant="t2"} 1
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "trimtab_flow_dispatches_total"); err != nil {
		t.Fatal(err)
	}
}
