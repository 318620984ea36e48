package scheduler

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fixedScorer returns a fixed score per endpoint address (0.5 when absent).
type fixedScorer struct {
	cat    Category
	scores map[string]float64
}

func (f fixedScorer) Category() Category { return f.cat }
func (f fixedScorer) Score(_ *CycleState, _ *Request, eps []*Endpoint, out []float64) {
	for i, e := range eps {
		v, ok := f.scores[e.Address]
		if !ok {
			v = 0.5
		}
		out[i] = v
	}
}

// countingScorer records observer calls.
type countingScorer struct {
	mu      sync.Mutex
	picked  []string
	done    []OutcomeKind
	pools   int
	slotHit int
}

func (c *countingScorer) Category() Category { return CategoryNone }
func (c *countingScorer) Score(cs *CycleState, _ *Request, _ []*Endpoint, out []float64) {
	p, _ := (*cs.Slot()).(*int)
	if p == nil {
		p = new(int)
		*cs.Slot() = p
	}
	*p = 42
	for i := range out {
		out[i] = 0
	}
}
func (c *countingScorer) Picked(cs *CycleState, _ *Request, chosen *Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, _ := (*cs.Slot()).(*int); p != nil && *p == 42 {
		c.slotHit++
	}
	c.picked = append(c.picked, chosen.Address)
}
func (c *countingScorer) Done(_ *Request, _ *Endpoint, o Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = append(c.done, o.Kind)
}
func (c *countingScorer) PoolChanged([]*Endpoint) { c.pools++ }

func eps(addrs ...string) []Endpoint {
	out := make([]Endpoint, len(addrs))
	for i, a := range addrs {
		out[i] = Endpoint{Address: a}
	}
	return out
}

func newTestScheduler(t testing.TB, entries []ScorerEntry, filters ...Filter) *Scheduler {
	t.Helper()
	s, err := New(DefaultConfig(), entries, filters, MaxScore{}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPickWeightedSum(t *testing.T) {
	aff := fixedScorer{CategoryAffinity, map[string]float64{"a:1": 1, "b:1": 0, "c:1": 0.5}}
	dist := fixedScorer{CategoryDistribution, map[string]float64{"a:1": 0, "b:1": 1, "c:1": 0.5}}
	tests := []struct {
		name        string
		wAff, wDist float64
		want        string
		wantTotals  []float64
	}{
		// a: 3*1 + 2*0 = 3; b: 3*0 + 2*1 = 2; c: 3*.5 + 2*.5 = 2.5
		{"affinity heavy", 3, 2, "a:1", []float64{3, 2, 2.5}},
		// a: 1*1 + 4*0 = 1; b: 0 + 4*1 = 4; c: .5 + 2 = 2.5
		{"distribution heavy", 1, 4, "b:1", []float64{1, 4, 2.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestScheduler(t, []ScorerEntry{
				{Name: "aff", Scorer: aff, Weight: tt.wAff},
				{Name: "dist", Scorer: dist, Weight: tt.wDist},
			})
			s.SetEndpoints(eps("a:1", "b:1", "c:1"))
			d, err := s.Pick(context.Background(), &Request{ID: "r1"})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Done(Outcome{})
			if d.Endpoint.Address != tt.want {
				t.Errorf("chose %s, want %s", d.Endpoint.Address, tt.want)
			}
			for i, want := range tt.wantTotals {
				if got := d.Total(i); math.Abs(got-want) > 1e-12 {
					t.Errorf("total[%d] = %v, want %v", i, got, want)
				}
			}
			// Fallbacks are ranked by total: the remaining two, best first.
			if d.Ranked() != 3 || d.Fallbacks() != 2 {
				t.Fatalf("ranked %d fallbacks %d, want 3 and 2", d.Ranked(), d.Fallbacks())
			}
			if d.Total(d.RankedIndex(1)) < d.Total(d.RankedIndex(2)) {
				t.Errorf("fallbacks out of order")
			}
		})
	}
}

func TestPickClampsScores(t *testing.T) {
	bad := fixedScorer{CategoryNone, map[string]float64{"a:1": 7, "b:1": math.NaN(), "c:1": -1}}
	reg := prometheus.NewRegistry()
	s, err := New(DefaultConfig(), []ScorerEntry{{Name: "bad", Scorer: bad, Weight: 1}}, nil, MaxScore{}, Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(eps("a:1", "b:1", "c:1"))
	d, err := s.Pick(context.Background(), &Request{})
	if err != nil {
		t.Fatal(err)
	}
	// 7 → 1, NaN → 0, −1 → 0
	for i, want := range []float64{1, 0, 0} {
		if got := d.Score(0, i); got != want {
			t.Errorf("score[%d] = %v, want %v", i, got, want)
		}
	}
	d.Done(Outcome{})
	if got := testutil.ToFloat64(s.m.clamped[0]); got != 3 {
		t.Errorf("clamped counter = %v, want 3", got)
	}
}

func TestFilters(t *testing.T) {
	pool := []Endpoint{
		{Address: "a:1", Models: []string{"llama"}, State: StateFresh},
		{Address: "b:1", Models: []string{"llama"}, State: StateStale},
		{Address: "c:1", Models: []string{"qwen"}, State: StateUnhealthy},
		{Address: "d:1", State: StateFresh}, // serves any model
	}
	tests := []struct {
		name    string
		req     Request
		want    []string
		wantErr error
	}{
		{"model and health", Request{Model: "llama"}, []string{"a:1", "d:1"}, nil},
		// qwen is only on an unhealthy endpoint and the any-model one: d is fresh.
		{"fresh wins", Request{Model: "qwen"}, []string{"d:1"}, nil},
		{"subset", Request{Model: "llama", Subset: []string{"a:1", "zz:9"}}, []string{"a:1"}, nil},
		// the only llama endpoint in the subset is stale: fail open keeps it.
		{"fail open", Request{Model: "llama", Subset: []string{"b:1"}}, []string{"b:1"}, nil},
		{"subset matches none", Request{Subset: []string{"zz:9"}}, nil, ErrNoEndpoints},
		{"unknown model", Request{Model: "mistral", Subset: []string{"a:1", "b:1"}}, nil, ErrUnknownModel},
		// qwen's only endpoints in the subset: c is unreachable, never kept.
		{"unreachable only", Request{Model: "qwen", Subset: []string{"c:1"}}, nil, ErrUnreachable},
		// no fresh endpoint: fail open keeps stale b, still drops unreachable c.
		{"fail open skips unreachable", Request{Subset: []string{"b:1", "c:1"}}, []string{"b:1"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestScheduler(t, []ScorerEntry{{Name: "f", Scorer: fixedScorer{}, Weight: 1}}, ModelFilter{}, HealthyFilter{})
			s.SetEndpoints(pool)
			d, err := s.Pick(context.Background(), &tt.req)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			defer d.Done(Outcome{})
			var got []string
			for _, c := range d.Candidates() {
				got = append(got, c.Address)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("candidates %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEmptyPool(t *testing.T) {
	s := newTestScheduler(t, []ScorerEntry{{Name: "f", Scorer: fixedScorer{}, Weight: 1}})
	if _, err := s.Pick(context.Background(), &Request{}); !errors.Is(err, ErrNoEndpoints) {
		t.Fatalf("err = %v, want ErrNoEndpoints", err)
	}
}

func TestInFlightAccountingAndObservers(t *testing.T) {
	c := &countingScorer{}
	s := newTestScheduler(t, []ScorerEntry{{Name: "c", Scorer: c, Weight: 1}})
	s.SetEndpoints(eps("a:1", "b:1"))
	if c.pools != 1 {
		t.Fatalf("PoolChanged called %d times, want 1", c.pools)
	}
	d1, _ := s.Pick(context.Background(), &Request{ID: "1"})
	d2, _ := s.Pick(context.Background(), &Request{ID: "2"})
	var total int64
	for _, e := range s.Pool().Pointers() {
		total += e.InFlight()
	}
	if total != 2 {
		t.Fatalf("in flight = %d, want 2", total)
	}
	// A retry moves the count to the fallback and tells observers again.
	first := d1.Endpoint
	if !d1.Advance() {
		t.Fatal("Advance: no fallback")
	}
	if d1.Endpoint == first || first.InFlight()+d1.Endpoint.InFlight() != 2 && d2.Endpoint != first {
		t.Errorf("advance did not move the request")
	}
	if d1.Advance() {
		t.Errorf("Advance past the last fallback succeeded")
	}
	// A new pool keeps the counters of endpoints that stay.
	s.SetEndpoints(eps("a:1", "b:1", "c:1"))
	total = 0
	for _, e := range s.Pool().Pointers() {
		total += e.InFlight()
	}
	if total != 2 {
		t.Fatalf("in flight after pool change = %d, want 2", total)
	}
	// Picks: d1, d2 and d1's retry.
	var picks uint64
	for _, e := range s.Pool().Pointers() {
		picks += e.Picks()
	}
	if picks != 3 {
		t.Errorf("picks = %d, want 3", picks)
	}
	d1.Done(Outcome{Kind: OutcomeError})
	d1.Done(Outcome{Kind: OutcomeSuccess}) // ignored
	d2.Done(Outcome{Kind: OutcomeCanceled})
	for _, e := range s.Pool().Pointers() {
		if e.InFlight() != 0 {
			t.Errorf("%s in flight = %d after Done, want 0", e.Address, e.InFlight())
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// picked: d1, d2, d1's retry = 3; done: two (the second Done is ignored).
	if len(c.picked) != 3 || len(c.done) != 2 || c.slotHit != 3 {
		t.Errorf("picked %d done %d slot hits %d, want 3, 2, 3", len(c.picked), len(c.done), c.slotHit)
	}
}

func TestSameSeedSameDecision(t *testing.T) {
	// Every endpoint ties; only the seeded tie-break decides.
	pick := func(seed uint64) []string {
		cfg := DefaultConfig()
		cfg.Seed = seed
		s, err := New(cfg, []ScorerEntry{{Name: "f", Scorer: fixedScorer{}, Weight: 1}}, nil, MaxScore{}, Deps{})
		if err != nil {
			t.Fatal(err)
		}
		s.SetEndpoints(eps("a:1", "b:1", "c:1", "d:1", "e:1", "f:1", "g:1", "h:1"))
		var out []string
		for i := 0; i < 64; i++ {
			d, err := s.Pick(context.Background(), &Request{})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d.Endpoint.Address)
			d.Done(Outcome{})
		}
		return out
	}
	a, b, c := pick(1), pick(1), pick(2)
	if strings.Join(a, ",") != strings.Join(b, ",") {
		t.Errorf("same seed, different decisions")
	}
	if strings.Join(a, ",") == strings.Join(c, ",") {
		t.Errorf("different seeds, identical 64 tie-breaks: tie-break ignores the seed")
	}
	// Ties are spread, not all on the first endpoint: 64 picks over 8
	// tied endpoints land on at least 4 of them.
	seen := map[string]bool{}
	for _, x := range a {
		seen[x] = true
	}
	if len(seen) < 4 {
		t.Errorf("tie-break used only %d endpoints", len(seen))
	}
}

func TestPublishRejectsBadWeights(t *testing.T) {
	s := newTestScheduler(t, []ScorerEntry{{Name: "a", Scorer: fixedScorer{}, Weight: 1}, {Name: "b", Scorer: fixedScorer{}, Weight: 1}})
	for _, w := range []*Weights{
		{Values: []float64{1}},
		{Values: []float64{1, math.NaN()}},
		{Values: []float64{-1, 2}},
		{Values: []float64{0, 0}},
	} {
		if err := s.Publish(w); err == nil {
			t.Errorf("Publish(%v) accepted", w.Values)
		}
	}
	if s.Weights().Version != 1 {
		t.Errorf("weights changed after rejected publishes")
	}
	if err := s.Publish(&Weights{Version: 2, Values: []float64{0, 1}}); err != nil || s.Weights().Version != 2 {
		t.Errorf("valid publish: err %v version %d", err, s.Weights().Version)
	}
}

func TestNewValidates(t *testing.T) {
	f := fixedScorer{}
	for name, entries := range map[string][]ScorerEntry{
		"none":      nil,
		"duplicate": {{Name: "a", Scorer: f, Weight: 1}, {Name: "a", Scorer: f, Weight: 1}},
		"zero":      {{Name: "a", Scorer: f}},
		"negative":  {{Name: "a", Scorer: f, Weight: -1}, {Name: "b", Scorer: f, Weight: 2}},
		"nil":       {{Name: "a", Weight: 1}},
	} {
		if _, err := New(DefaultConfig(), entries, nil, MaxScore{}, Deps{}); err == nil {
			t.Errorf("%s: New accepted", name)
		}
	}
}

func TestWeightedRandomPicker(t *testing.T) {
	p, err := NewWeightedRandom(0.5)
	if err != nil {
		t.Fatal(err)
	}
	// exp((t−max)/T): totals 2, 1, 0 with T=0.5 → weights 1, e^−2, e^−4,
	// so P(first) = 1/(1+0.1353+0.0183) ≈ 0.8668.
	totals := []float64{2, 1, 0}
	rnd := NewRand(7)
	order := make([]int, 3)
	var first int
	const n = 20000
	for i := 0; i < n; i++ {
		p.Rank(totals, &rnd, order)
		if order[0] == 0 {
			first++
		}
		if order[0] == order[1] || order[1] == order[2] || order[0] == order[2] {
			t.Fatalf("order %v repeats a candidate", order)
		}
	}
	if got := float64(first) / n; math.Abs(got-0.8668) > 0.02 {
		t.Errorf("P(best) = %.4f, want ≈ 0.8668", got)
	}
	if _, err := NewWeightedRandom(0); err == nil {
		t.Error("temperature 0 accepted")
	}
}

func TestExplain(t *testing.T) {
	s := newTestScheduler(t, []ScorerEntry{
		{Name: "aff", Scorer: fixedScorer{CategoryAffinity, map[string]float64{"a:1": 1}}, Weight: 3},
	})
	s.SetEndpoints(eps("a:1", "b:1"))
	d, _ := s.Pick(context.Background(), &Request{ID: "x", Model: "m"})
	x := d.Explain()
	d.Done(Outcome{})
	// a: 3*1 = 3, b: 3*0.5 = 1.5
	if x.Chosen != "a:1" || x.RequestID != "x" || x.Candidates[0].Total != 3 || x.Candidates[1].Scores["aff"] != 0.5 {
		t.Errorf("explanation %+v", x)
	}
	if len(x.Fallbacks) != 1 || x.Fallbacks[0] != "b:1" {
		t.Errorf("fallbacks %v", x.Fallbacks)
	}
}

func TestConcurrentPicksAndPoolChanges(t *testing.T) {
	c := &countingScorer{}
	s := newTestScheduler(t, []ScorerEntry{{Name: "c", Scorer: c, Weight: 1}, {Name: "f", Scorer: fixedScorer{}, Weight: 1}})
	s.SetEndpoints(eps("a:1", "b:1", "c:1"))
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				d, err := s.Pick(context.Background(), &Request{Arrival: time.Unix(int64(i), 0)})
				if err != nil {
					t.Error(err)
					return
				}
				d.Done(Outcome{})
			}
		}()
	}
	for i := 0; i < 50; i++ {
		if i%2 == 0 {
			s.SetEndpoints(eps("a:1", "b:1", "c:1"))
		} else {
			s.SetEndpoints(eps("a:1", "c:1", "d:1"))
		}
		_ = s.Publish(&Weights{Version: uint64(i + 2), Values: []float64{1, float64(i%3) + 1}})
	}
	wg.Wait()
	for _, e := range s.Pool().Pointers() {
		if e.InFlight() != 0 {
			t.Errorf("%s in flight %d after all Done", e.Address, e.InFlight())
		}
	}
}

func TestPickAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race; CI runs this test in its no-race pass")
	}
	s := newTestScheduler(t, []ScorerEntry{{Name: "f", Scorer: fixedScorer{}, Weight: 1}}, ModelFilter{}, HealthyFilter{})
	s.SetEndpoints(eps("a:1", "b:1", "c:1", "d:1"))
	req := &Request{ID: "r", Model: "m", Subset: []string{"a:1", "c:1"}}
	allocs := pickDoneAllocs(t, s, req)
	if allocs != 0 {
		t.Errorf("Pick+Done allocates %v times per request, want 0", allocs)
	}
}

func TestMetricsExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(DefaultConfig(), []ScorerEntry{{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity}, Weight: 3}}, nil, MaxScore{}, Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints([]Endpoint{{Address: "a:1"}, {Address: "b:1", State: StateStale}})
	d, _ := s.Pick(context.Background(), &Request{ID: "x"})
	want := `
# HELP trimtab_scheduler_endpoints Endpoints in the installed pool, by metrics state.
# TYPE trimtab_scheduler_endpoints gauge
trimtab_scheduler_endpoints{state="fresh"} 1
trimtab_scheduler_endpoints{state="stale"} 1
trimtab_scheduler_endpoints{state="unhealthy"} 0
# HELP trimtab_scheduler_picks_total Decisions made by the scheduler.
# TYPE trimtab_scheduler_picks_total counter
trimtab_scheduler_picks_total 1
# HELP trimtab_scheduler_weight Weight in force for each scorer, with its category.
# TYPE trimtab_scheduler_weight gauge
trimtab_scheduler_weight{category="affinity",scorer="aff"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"trimtab_scheduler_endpoints", "trimtab_scheduler_picks_total", "trimtab_scheduler_weight"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(reg, "trimtab_scheduler_inflight_requests"); got != 2 {
		t.Errorf("inflight series = %d, want 2", got)
	}
	d.Done(Outcome{})
}

func TestTopKOrder(t *testing.T) {
	// 50 candidates with totals i%10: the ranking must be non-increasing,
	// hold distinct indexes, and skip the excluded one. 40 > the stack
	// buffer of 32 keys, so the heap path runs too.
	totals := make([]float64, 50)
	for i := range totals {
		totals[i] = float64(i % 10)
	}
	for _, k := range []int{1, 3, 40} {
		order := make([]int, k)
		n := topK(totals, 99, order, 9)
		if n != k {
			t.Fatalf("k=%d: wrote %d", k, n)
		}
		seen := map[int]bool{}
		for r := 0; r < n; r++ {
			if seen[order[r]] || order[r] == 9 {
				t.Fatalf("k=%d: order %v repeats or includes the skipped index", k, order)
			}
			seen[order[r]] = true
			if r > 0 && totals[order[r]] > totals[order[r-1]] {
				t.Fatalf("k=%d: order %v not sorted", k, order)
			}
		}
		// Best is a 9 (indexes 19, 29, 39, 49; 9 is skipped).
		if totals[order[0]] != 9 {
			t.Errorf("k=%d: best total %v, want 9", k, totals[order[0]])
		}
	}
}

func TestPendingPrefillAccounting(t *testing.T) {
	s := newTestScheduler(t, []ScorerEntry{{Name: "f", Scorer: fixedScorer{}, Weight: 1}})
	s.SetEndpoints(eps("a:1", "b:1"))
	pending := func() (total int64) {
		for _, e := range s.Pool().Pointers() {
			total += e.PendingPrefill()
		}
		return total
	}
	d1, _ := s.Pick(context.Background(), &Request{ID: "1", Prompt: make([]byte, 1000)})
	d2, _ := s.Pick(context.Background(), &Request{ID: "2", Prompt: make([]byte, 300)})
	// Both prompts wait for their first byte: 1000 + 300.
	if got := pending(); got != 1300 {
		t.Fatalf("pending = %d, want 1300", got)
	}
	// A retry moves d1's 1000 bytes with it.
	first := d1.Endpoint
	before := first.PendingPrefill()
	if !d1.Advance() {
		t.Fatal("no fallback")
	}
	if first.PendingPrefill() != before-1000 || pending() != 1300 {
		t.Errorf("advance: old endpoint %d (was %d), total %d", first.PendingPrefill(), before, pending())
	}
	// The first byte of d1 releases 1000; a second call changes nothing.
	d1.FirstByte()
	d1.FirstByte()
	if got := pending(); got != 300 {
		t.Errorf("after first byte: pending = %d, want 300", got)
	}
	// Done releases a prompt whose first byte never came (d2), and does
	// not release d1's twice.
	d1.Done(Outcome{})
	d2.Done(Outcome{Kind: OutcomeError})
	if got := pending(); got != 0 {
		t.Errorf("after Done: pending = %d, want 0", got)
	}
}

func TestMoveToCreditsServedEndpoint(t *testing.T) {
	c := &countingScorer{}
	s, err := New(Config{MaxFallbacks: 1}, []ScorerEntry{{Name: "c", Scorer: c, Weight: 1}}, nil, MaxScore{}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(eps("a:1", "b:1", "c:1"))
	d, err := s.Pick(context.Background(), &Request{ID: "1", Prompt: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	first, fallback := d.Endpoint, d.RankedEndpoint(1)
	var other *Endpoint // the candidate that is neither ranked
	for _, e := range d.Candidates() {
		if e != first && e != fallback {
			other = e
		}
	}
	if d.MoveTo("zz:9") || d.Endpoint != first {
		t.Fatal("MoveTo an address outside the candidates moved the request")
	}
	if !d.MoveTo(first.Address) || d.Endpoint != first {
		t.Fatal("MoveTo the current endpoint must be a no-op that succeeds")
	}
	if !d.MoveTo(fallback.Address) || d.Endpoint != fallback || d.Fallbacks() != 0 {
		t.Fatalf("MoveTo the fallback: endpoint %s, %d fallbacks left; want %s, 0", d.Endpoint.Address, d.Fallbacks(), fallback.Address)
	}
	// in flight and pending prefill (5 prompt bytes) move: first 0/0, fallback 1/5
	if first.InFlight() != 0 || first.PendingPrefill() != 0 || fallback.InFlight() != 1 || fallback.PendingPrefill() != 5 {
		t.Errorf("after MoveTo: first %d/%d, fallback %d/%d; want 0/0, 1/5",
			first.InFlight(), first.PendingPrefill(), fallback.InFlight(), fallback.PendingPrefill())
	}
	d.FirstByte()
	if !d.MoveTo(other.Address) || d.Endpoint != other {
		t.Fatal("MoveTo an unranked candidate failed")
	}
	// after the first byte only the in-flight count moves
	if fallback.InFlight() != 0 || other.InFlight() != 1 || other.PendingPrefill() != 0 {
		t.Errorf("after MoveTo past first byte: fallback %d, other %d/%d; want 0, 1/0", fallback.InFlight(), other.InFlight(), other.PendingPrefill())
	}
	d.Done(Outcome{})
	c.mu.Lock()
	defer c.mu.Unlock()
	// learning scorers see the pick and both moves
	if want := []string{first.Address, fallback.Address, other.Address}; strings.Join(c.picked, ",") != strings.Join(want, ",") {
		t.Errorf("picked %v, want %v", c.picked, want)
	}
}

// secondsScorer scores 1/(1+i) and reports 0.1·(i+1) seconds for
// candidate i, stashed in its slot as a time-unit scorer does.
type secondsScorer struct{}

func (secondsScorer) Category() Category { return CategoryDistribution }
func (secondsScorer) Score(cs *CycleState, _ *Request, eps []*Endpoint, out []float64) {
	buf, _ := (*cs.Slot()).(*[]float64)
	if buf == nil {
		buf = new([]float64)
		*cs.Slot() = buf
	}
	*buf = (*buf)[:0]
	for i := range eps {
		*buf = append(*buf, 0.1*float64(i+1))
		out[i] = 1 / float64(1+i)
	}
}
func (secondsScorer) Seconds(cs *CycleState, i int) (float64, bool) {
	buf, _ := (*cs.Slot()).(*[]float64)
	if buf == nil || i >= len(*buf) {
		return 0, false
	}
	return (*buf)[i], true
}

// TestExplainSeconds: a SecondsReporter's estimates reach the
// explanation under its name; other scorers add none.
func TestExplainSeconds(t *testing.T) {
	s := newTestScheduler(t, []ScorerEntry{
		{Name: "cost", Scorer: secondsScorer{}, Weight: 1},
		{Name: "aff", Scorer: fixedScorer{cat: CategoryAffinity}, Weight: 1},
	})
	s.SetEndpoints(eps("a:1", "b:1"))
	d, _ := s.Pick(context.Background(), &Request{Model: "m"})
	x := d.Explain()
	if v, ok := d.Seconds(1, 0); ok {
		t.Errorf("fixed scorer reported %v seconds", v)
	}
	d.Done(Outcome{})
	// a: 0.1·1 s, b: 0.1·2 s.
	for i, want := range []float64{0.1, 0.2} {
		c := x.Candidates[i]
		if got, ok := c.Seconds["cost"]; !ok || math.Abs(got-want) > 1e-12 || len(c.Seconds) != 1 {
			t.Errorf("%s seconds %v, want cost %v only", c.Address, c.Seconds, want)
		}
	}
}

// pickDoneAllocs is the allocations of one Pick and Done of req on s,
// averaged over 1,000 (testing.AllocsPerRun).
func pickDoneAllocs(t *testing.T, s *Scheduler, req *Request) float64 {
	t.Helper()
	ctx := context.Background()
	return testing.AllocsPerRun(1000, func() {
		d, err := s.Pick(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		d.Done(Outcome{})
	})
}
