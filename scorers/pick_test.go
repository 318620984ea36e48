package scorers

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

// pickFirstByteAllocatesNothing checks that s picks, releases at the first
// byte and finishes without allocating, warm, over 8k-token prompts; what
// names the profile in the error.
func pickFirstByteAllocatesNothing(t *testing.T, s *scheduler.Scheduler, what string) {
	t.Helper()
	reqs := scorertest.BenchWorkload(8<<10, 16, 8, 256, 1)
	scorertest.Warm(t, s, reqs)
	i := 0
	allocs := testing.AllocsPerRun(500, func() {
		d, err := s.Pick(t.Context(), &reqs[i%len(reqs)])
		if err != nil {
			t.Fatal(err)
		}
		d.FirstByte()
		d.Done(scheduler.Outcome{})
		i++
	})
	if allocs != 0 {
		t.Errorf("Pick+FirstByte+Done with %s allocates %v times per request, want 0", what, allocs)
	}
}

// checked wraps a scorer and records any score outside [0,1] (or NaN)
// before the scheduler's clamp hides it. It forwards the optional
// observer interfaces.
type checked struct {
	inner scheduler.Scorer
	bad   *atomic.Int64
}

func (c checked) Category() scheduler.Category { return c.inner.Category() }
func (c checked) Score(cs *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	c.inner.Score(cs, req, eps, out)
	for _, v := range out {
		if !(v >= 0 && v <= 1) {
			c.bad.Add(1)
		}
	}
}
func (c checked) Picked(cs *scheduler.CycleState, req *scheduler.Request, chosen *scheduler.Endpoint) {
	if o, ok := c.inner.(scheduler.PickObserver); ok {
		o.Picked(cs, req, chosen)
	}
}
func (c checked) PoolChanged(eps []*scheduler.Endpoint) {
	if o, ok := c.inner.(scheduler.PoolObserver); ok {
		o.PoolChanged(eps)
	}
}

// randomPool returns 1…20 endpoints with random loads, states and LoRA
// state, including NaN and out-of-range values.
func randomPool(rng *rand.Rand) []scheduler.Endpoint {
	es := scorertest.Eps(manyAddrs(1 + rng.IntN(20))...)
	odd := []float64{math.NaN(), -1, 2, math.Inf(1)}
	for i := range es {
		e := &es[i]
		e.Waiting = float64(rng.IntN(30))
		e.KVUtil = rng.Float64()
		if rng.IntN(10) == 0 {
			e.Waiting = odd[rng.IntN(len(odd))]
		}
		if rng.IntN(10) == 0 {
			e.KVUtil = odd[rng.IntN(len(odd))]
		}
		e.Capacity = float64(rng.IntN(3))
		e.State = scheduler.State(rng.IntN(3))
		e.LoRA = scheduler.LoRAState{Active: []string{fmt.Sprint("l", rng.IntN(3))}, Max: rng.IntN(3)}
		e.CacheBlocks, e.CacheBlockSize = rng.IntN(3)*1000, 16
	}
	return es
}

func randomRequest(rng *rand.Rand) *scheduler.Request {
	p := make([]byte, rng.IntN(8)*256+rng.IntN(300))
	for i := range p {
		p[i] = byte('a' + rng.IntN(2)) // few distinct bytes: prefixes repeat
	}
	return &scheduler.Request{
		Model:     "m",
		LoRA:      []string{"", "l0", "l1", "l9"}[rng.IntN(4)],
		Prompt:    p,
		SessionID: []string{"", "s1", "s2", fmt.Sprint("s", rng.IntN(100))}[rng.IntN(4)],
	}
}

// newProperty builds a scheduler with all six scorers (each wrapped in
// checked) at the given weights.
func newProperty(t *testing.T, seed uint64, w []float64, bad *atomic.Int64) *scheduler.Scheduler {
	t.Helper()
	types := []string{TypePrefix, TypeQueue, TypeKVCache, TypeInFlight, TypeSession, TypeLoRA}
	var entries []scheduler.ScorerEntry
	for i, typ := range types {
		sc, err := InTree()[typ](typ, nil, Deps{})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, scheduler.ScorerEntry{Name: typ, Type: typ, Scorer: checked{sc, bad}, Weight: w[i]})
	}
	cfg := scheduler.DefaultConfig()
	cfg.Seed = seed
	s, err := scheduler.New(cfg, entries, []scheduler.Filter{scheduler.ModelFilter{}, scheduler.HealthyFilter{}}, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPickProperties: for random pools, requests and weights, every
// scorer's raw score is in [0,1], every total is in [0, Σw], and two
// schedulers with the same seed fed the same history decide identically.
func TestPickProperties(t *testing.T) {
	var bad atomic.Int64
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 99))
		w := make([]float64, 6)
		for i := range w {
			w[i] = float64(rng.IntN(4))
		}
		w[0] += 0.5 // never all zero
		sum := 0.0
		for _, v := range w {
			sum += v
		}
		a, b := newProperty(t, seed, w, &bad), newProperty(t, seed, w, &bad)
		for step := range 60 {
			if step%20 == 0 {
				pool := randomPool(rng)
				a.SetEndpoints(pool)
				b.SetEndpoints(pool)
			}
			req := randomRequest(rng)
			da, err := a.Pick(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			db, err := b.Pick(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			for i := range da.Candidates() {
				if tot := da.Total(i); !(tot >= 0 && tot <= sum+1e-9) {
					t.Fatalf("seed %d step %d: total %v outside [0, %v]", seed, step, tot, sum)
				}
			}
			if da.Endpoint.Address != db.Endpoint.Address {
				t.Fatalf("seed %d step %d: same seed chose %s and %s", seed, step, da.Endpoint.Address, db.Endpoint.Address)
			}
			// Leave some requests in flight so the inflight scorer varies.
			if rng.IntN(3) > 0 {
				da.Done(scheduler.Outcome{})
				db.Done(scheduler.Outcome{})
			}
		}
	}
	if n := bad.Load(); n > 0 {
		t.Errorf("scorers returned %d scores outside [0,1]", n)
	}
}
