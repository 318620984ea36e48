package flow

import (
	"context"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// cachedScorer is a prefix index in miniature: it prefers addr and says
// addr holds the first cached tokens of every prompt (4 bytes a token).
type cachedScorer struct {
	addr   string
	cached int64
}

func (cachedScorer) Category() scheduler.Category { return scheduler.CategoryAffinity }
func (cachedScorer) ConsumesMatch()               {}
func (c cachedScorer) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i, e := range eps {
		out[i] = 0
		if e.Address == c.addr {
			out[i] = 1
		}
	}
}
func (c cachedScorer) Match(cs *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint) {
	n := int64(len(req.Prompt) / 4)
	cs.SetMatch(n, n)
	for _, e := range eps {
		if e.Address == c.addr {
			cs.SetCached(e, min(c.cached, n))
		}
	}
}

// newCachedRig is newRig with a cachedScorer for addr holding cached
// tokens of every prompt.
func newCachedRig(t *testing.T, cfg Config, addr string, cached int64, eps ...scheduler.Endpoint) *rig {
	t.Helper()
	r := newRig(t, cfg, eps...)
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{{Name: "cached", Scorer: cachedScorer{addr: addr, cached: cached}, Weight: 1}},
		nil, scheduler.MaxScore{}, scheduler.Deps{Clock: r.clk})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(eps)
	c, err := New(cfg, Deps{Scheduler: s, Clock: r.clk})
	if err != nil {
		t.Fatal(err)
	}
	r.sched, r.c = s, c
	return r
}

// A request is charged the prompt its endpoint must compute, not the
// prompt tokens the endpoint already holds in its prefix cache.
// testConfig: capacity 250 × 0.8 = 200 tokens; a prompt of 800 bytes is
// 200 tokens, 170 of them cached on a: charged 30 + 75 output = 105 (the
// whole prompt would be 200 + 75 = 275, a saturated after one), so a
// takes two (105 < 200, then 210 ≥ 200: saturated) and the third goes to
// b.
func TestChargeIsTheUncachedPrompt(t *testing.T) {
	r := newCachedRig(t, testConfig(), "a", 170, ep("a"), ep("b"))
	long := func() *scheduler.Request { return &scheduler.Request{Prompt: make([]byte, 800)} }
	// A pick that queues ends with ctx: nothing runs Drain.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var addrs []string
	for range 3 {
		d, _, err := r.c.Pick(ctx, long(), Class{Band: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, d.Endpoint.Address)
	}
	if addrs[0] != "a" || addrs[1] != "a" || addrs[2] != "b" || r.c.Load("a") != 210 {
		t.Fatalf("picks %v, a's ledger %d; want a, a, b and 210 (two of 30 uncached + 75 output)", addrs, r.c.Load("a"))
	}
}

// A batch flood on a pool with room for its KV does not fill the
// endpoints with prefill: a sheddable request waits once its endpoints'
// pending prefill reaches the band's budget (25 ms at 13,100 tokens/s:
// 327 tokens), and one endpoint with no prefill pending is kept for the
// bands above (reserve 1), while an interactive request (budget 2 s) is
// dispatched at once. Each prompt is 4,000 bytes = 1,000 tokens, 76 ms.
// Capacity 1e6 tokens: the KV bound is never reached.
//
//	sheddable 1 → a (both free, 2 > reserve 1)   a: 76 ms pending ≥ 25 ms: full for sheddable
//	sheddable 2 waits (b is the one free endpoint: reserved)
//	interactive → dispatched at once
//	a's first byte: a free again, 2 free > 1 → sheddable 2 goes to a
func TestBatchFillsPrefillToItsBudget(t *testing.T) {
	cfg := testConfig()
	cfg.Saturation.CapacityTokens = 1e6
	r := newRig(t, cfg, ep("a"), ep("b"))
	big := func() *scheduler.Request { return &scheduler.Request{Prompt: make([]byte, 4000)} }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, l, err := r.c.Pick(ctx, big(), Class{Band: 2}, 0)
	if err != nil || d.Endpoint.Address != "a" {
		t.Fatalf("sheddable: %v on %v, want a", err, d)
	}
	first := picked{d, l, nil}
	ch := r.pickAsync(ctx, big(), Class{Band: 2})
	r.waitQueued(t, 1)
	d, l, err = r.c.Pick(ctx, big(), Class{Band: 0}, 0)
	if err != nil {
		t.Fatalf("interactive next to a batch that filled its budget: %v, want dispatched at once", err)
	}
	finish(picked{d, l, nil})
	if r.c.Len() != 1 {
		t.Fatalf("queue holds %d, want the second sheddable request", r.c.Len())
	}
	first.d.FirstByte()
	r.c.Drain()
	if p := recv(t, ch); p.err != nil || p.d.Endpoint.Address != "a" {
		t.Fatalf("queued sheddable after a's prefill: %v on %v, want a", p.err, p.d)
	} else {
		finish(p)
	}
	finish(first)
}

// A lower band fills a smaller share of the KV capacity than the bands
// above (bands[].threshold): capacity 300 tokens, a request 100 (25 prompt
// + 75 output); sheddable may fill 0.5 × 300 = 150 (after two, 200 ≥ 150:
// full), standard 0.8 × 300 = 240 (200 < 240: room). Prompts of 100
// bytes: 2 ms of prefill, far below every budget; one endpoint, so no
// reserve applies.
func TestLowerBandFillsLessKV(t *testing.T) {
	cfg := testConfig()
	cfg.Saturation.CapacityTokens = 300
	r := newRig(t, cfg, ep("a"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var held []picked
	for range 2 {
		d, l, err := r.c.Pick(ctx, req(), Class{Band: 2}, 0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, picked{d, l, nil})
	}
	ch := r.pickAsync(ctx, req(), Class{Band: 2})
	r.waitQueued(t, 1)
	d, l, err := r.c.Pick(ctx, req(), Class{Band: 1}, 0)
	if err != nil {
		t.Fatalf("standard next to sheddable work at its share: %v, want dispatched at once", err)
	}
	held = append(held, picked{d, l, nil})
	for _, p := range held {
		finish(p)
	}
	r.c.Drain()
	if p := recv(t, ch); p.err != nil {
		t.Fatal(p.err)
	} else {
		finish(p)
	}
}

// A band's reserve stays on the same endpoints while its work runs on the
// others: the endpoints it keeps for the bands above are those carrying
// none of its (or lower bands') requests, not whichever has no prefill
// pending at the moment. Two endpoints, sheddable reserve 1
// (min(1, 2 − 1) = 1), prompts of 4,000 bytes (1,000 tokens: 76 ms of
// prefill at 13,100 tokens/s, over sheddable's 25 ms budget); the scorer
// prefers a:
//
//	sheddable 1 → b (its subset hint)        b carries sheddable work; a is clear
//	sheddable 2 waits                        b: 76 ms pending ≥ 25 ms; a: the one clear endpoint, reserved
//	b's first byte, drain: sheddable 2 → b   b has room again; a is still the one clear endpoint
//
// A reserve that moved with the prefill would see both endpoints free
// after b's first byte and send sheddable 2 to the preferred a, leaving
// the bands above an endpoint whose decodes and prefills are batch work.
func TestReserveStaysOnTheSameEndpoints(t *testing.T) {
	cfg := testConfig()
	cfg.Saturation.CapacityTokens = 1e6
	r, first, ch := sheddableBehindB(t, cfg)
	first.d.FirstByte()
	r.c.Drain()
	p := recv(t, ch)
	if p.err != nil {
		t.Fatal(p.err)
	}
	if got := p.d.Endpoint.Address; got != "b" {
		t.Fatalf("sheddable 2 after b's prefill went to %s, want b (a is the reserve: it carries no sheddable work)", got)
	}
	finish(p)
	finish(first)
}

// TestReserveRelease: a sheddable request kept off the reserve (a, clear)
// while b is saturated waits; with reserve_release 0.5 and a 10 s TTL it
// still waits 4 s in, and 6 s in (less than half its TTL left) it may use
// a.
func TestReserveRelease(t *testing.T) {
	cfg := testConfig()
	cfg.Saturation.CapacityTokens = 1e6
	cfg.Bands[2].TTL = 10 * time.Second
	cfg.Bands[2].ReserveRelease = 0.5
	r, first, ch := sheddableBehindB(t, cfg)
	r.clk.Step(4 * time.Second)
	r.c.Drain()
	if n := r.c.Len(); n != 1 {
		t.Fatalf("4 s into a 10 s TTL: %d queued, want 1 (the reserve holds)", n)
	}
	r.clk.Step(2 * time.Second)
	r.c.Drain()
	p := recv(t, ch)
	if p.err != nil {
		t.Fatal(p.err)
	}
	if got := p.d.Endpoint.Address; got != "a" {
		t.Fatalf("6 s into a 10 s TTL the request went to %s, want a (the reserve released)", got)
	}
	finish(p)
	finish(first)
}

// sheddableBehindB sets up a reserve's test on endpoints a and b: a
// sheddable request of 4,000 prompt bytes picked onto b (its prefill
// saturates b for the band) and a second one waiting in the queue, a
// being the reserve (clear). It returns the first pick and where the
// second's answer arrives.
func sheddableBehindB(t *testing.T, cfg Config) (*rig, picked, <-chan picked) {
	t.Helper()
	r := newRig(t, cfg, ep("a"), ep("b"))
	big := func() *scheduler.Request { return &scheduler.Request{Prompt: make([]byte, 4000)} }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	q := big()
	q.Subset = []string{"b"}
	d, l, err := r.c.Pick(ctx, q, Class{Band: 2}, 0)
	if err != nil || d.Endpoint.Address != "b" {
		t.Fatalf("sheddable 1: %v on %v, want b", err, d)
	}
	ch := r.pickAsync(ctx, big(), Class{Band: 2})
	r.waitQueued(t, 1)
	return r, picked{d, l, nil}, ch
}
