package scheduler

import (
	"context"
	"testing"
	"time"
)

// matchFake is a MatchProducer and MatchConsumer: the prompt is
// len(Prompt)/4 tokens, all indexed, and endpoint "a:1" holds cached of
// them.
type matchFake struct{ cached int64 }

func (matchFake) Category() Category { return CategoryAffinity }
func (matchFake) Score(_ *CycleState, _ *Request, _ []*Endpoint, out []float64) {
	clear(out)
}
func (m matchFake) Match(cs *CycleState, req *Request, eps []*Endpoint) {
	n := int64(len(req.Prompt) / 4)
	cs.SetMatch(n, n)
	for _, e := range eps {
		if e.Address == "a:1" {
			cs.SetCached(e, m.cached)
		}
	}
}
func (matchFake) ConsumesMatch() {}

func TestObservationRecordsTheWorkAhead(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prompt := make([]byte, 4000) // 1,000 tokens
	t.Run("matched", func(t *testing.T) {
		s := newTestScheduler(t, []ScorerEntry{{Name: "m", Scorer: matchFake{cached: 400}, Weight: 1}})
		s.SetEndpoints(eps("a:1"))
		ring := NewObservationRing(8)
		s.ObserveInto(ring)
		d1, _ := s.Pick(context.Background(), &Request{ID: "1", Prompt: prompt, Arrival: t0})
		d2, _ := s.Pick(context.Background(), &Request{ID: "2", Prompt: prompt, Arrival: t0.Add(time.Second)})
		u := Usage{PromptTokens: 1000, CachedTokens: 512, CachedReported: true, OutputTokens: 20}
		d2.Done(Outcome{Kind: OutcomeSuccess, TTFT: 300 * time.Millisecond, Latency: time.Second, Usage: u})
		d1.Done(Outcome{Kind: OutcomeSuccess})
		got := ring.Drain(nil)
		if len(got) != 2 {
			t.Fatalf("%d observations, want 2", len(got))
		}
		// Request 2 found request 1's uncached 1,000 − 400 = 600 tokens
		// pending and one request in flight (one pick before it: Seq 1);
		// its own uncached 600; the endpoint never scraped.
		want := Observation{Endpoint: "a:1", Arrival: t0.Add(time.Second), Kind: OutcomeSuccess, PromptTokens: 1000, UncachedTokens: 600,
			QueueTokens: 600, Matched: true, InFlight: 1, Seq: 1, TTFT: 300 * time.Millisecond, Latency: time.Second, Usage: u}
		if got[0] != want {
			t.Errorf("request 2:\n got %+v\nwant %+v", got[0], want)
		}
		// Request 1 found nothing ahead.
		if got[1].QueueTokens != 0 || got[1].InFlight != 0 || got[1].UncachedTokens != 600 {
			t.Errorf("request 1: %+v, want nothing ahead and 600 uncached", got[1])
		}
	})
	t.Run("unmatched", func(t *testing.T) {
		s := newTestScheduler(t, []ScorerEntry{{Name: "f", Scorer: fixedScorer{}, Weight: 1}})
		s.SetEndpoints(eps("a:1"))
		ring := NewObservationRing(8)
		s.ObserveInto(ring)
		d1, _ := s.Pick(context.Background(), &Request{ID: "1", Prompt: prompt})
		d1.FirstByte()
		d2, _ := s.Pick(context.Background(), &Request{ID: "2", Prompt: prompt[:2000]})
		d3, _ := s.Pick(context.Background(), &Request{ID: "3", Prompt: prompt})
		for _, d := range []*Decision{d3, d2, d1} {
			d.Done(Outcome{Kind: OutcomeSuccess})
		}
		got := ring.Drain(nil)
		// Request 3: request 1 answered already, request 2's 2,000 bytes
		// pending = 500 tokens; two requests in flight; its own prompt
		// 4,000 / 4 = 1,000 tokens, none known cached.
		if o := got[0]; o.Matched || o.QueueTokens != 500 || o.InFlight != 2 || o.PromptTokens != 1000 || o.UncachedTokens != 1000 {
			t.Errorf("request 3: %+v, want queue 500, in flight 2, 1,000 tokens unmatched", o)
		}
	})
}

func TestObservationRecordsTheScrapedStateAtThePick(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		state State
		want  Observation
	}{
		// Fresh metrics travel with the observation.
		{"fresh", StateFresh, Observation{Waiting: 3, KVUtil: 0.95, Scraped: true}},
		// Stale ones say nothing.
		{"stale", StateStale, Observation{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestScheduler(t, []ScorerEntry{{Name: "f", Scorer: fixedScorer{}, Weight: 1}})
			s.SetEndpoints([]Endpoint{{Address: "a:1", Waiting: 3, KVUtil: 0.95, ScrapedAt: t0, State: tc.state}})
			ring := NewObservationRing(8)
			s.ObserveInto(ring)
			d, _ := s.Pick(context.Background(), &Request{ID: "1", Prompt: make([]byte, 400), Arrival: t0})
			d.Done(Outcome{Kind: OutcomeSuccess})
			got := ring.Drain(nil)
			if len(got) != 1 || got[0].Waiting != tc.want.Waiting || got[0].KVUtil != tc.want.KVUtil || got[0].Scraped != tc.want.Scraped {
				t.Errorf("%+v, want waiting %v, KV %v, scraped %v", got, tc.want.Waiting, tc.want.KVUtil, tc.want.Scraped)
			}
		})
	}
}

func TestObservationRingDropsWhenFull(t *testing.T) {
	r := NewObservationRing(2)
	for i := range 5 {
		r.Record(Observation{InFlight: int64(i)})
	}
	got := r.Drain(nil)
	// Two kept (0, 1), three dropped.
	if len(got) != 2 || got[0].InFlight != 0 || got[1].InFlight != 1 || r.Dropped() != 3 || r.Recorded() != 5 {
		t.Fatalf("kept %+v, dropped %d of %d; want 0 and 1 kept, 3 of 5 dropped", got, r.Dropped(), r.Recorded())
	}
	r.Record(Observation{InFlight: 9})
	if got = r.Drain(got); len(got) != 1 || got[0].InFlight != 9 {
		t.Fatalf("after a drain: %+v, want the one new observation", got)
	}
}

func TestPickWithObservationsAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race; CI runs this test in its no-race pass")
	}
	s := newTestScheduler(t, []ScorerEntry{{Name: "m", Scorer: matchFake{cached: 16}, Weight: 1}}, ModelFilter{}, HealthyFilter{})
	s.SetEndpoints(eps("a:1", "b:1", "c:1", "d:1"))
	ring := NewObservationRing(4096)
	s.ObserveInto(ring)
	req := &Request{ID: "r", Model: "m", Prompt: make([]byte, 256)}
	ctx := context.Background()
	var spare []Observation
	allocs := testing.AllocsPerRun(1000, func() {
		d, err := s.Pick(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		d.FirstByte()
		d.Done(Outcome{Kind: OutcomeSuccess, TTFT: time.Millisecond, Usage: Usage{PromptTokens: 64}})
		if len(spare) == 0 || ring.Recorded()%512 == 0 {
			spare = ring.Drain(spare)
		}
	})
	if allocs != 0 {
		t.Errorf("Pick+Done with observations allocates %v times per request, want 0", allocs)
	}
}

// TestPickedTokens: each pick adds the request's KV to its endpoint's
// picked tokens — its uncached tokens by the MatchProducer, or without one
// its prompt bytes ÷ 4 — and the count stays after the request ends.
func TestPickedTokens(t *testing.T) {
	prompt := make([]byte, 4000) // 1,000 tokens
	matched := newTestScheduler(t, []ScorerEntry{{Name: "m", Scorer: matchFake{cached: 400}, Weight: 1}})
	matched.SetEndpoints(eps("a:1"))
	unmatched := newTestScheduler(t, []ScorerEntry{{Name: "f", Scorer: fixedScorer{}, Weight: 1}})
	unmatched.SetEndpoints(eps("a:1"))
	for _, tt := range []struct {
		name string
		s    *Scheduler
		want uint64
	}{
		{"matched", matched, 2 * 600},
		{"unmatched", unmatched, 2 * 1000},
	} {
		for range 2 {
			d, err := tt.s.Pick(context.Background(), &Request{Prompt: prompt})
			if err != nil {
				t.Fatal(err)
			}
			d.FirstByte()
			d.Done(Outcome{Kind: OutcomeSuccess})
		}
		e := tt.s.Pool().Pointers()[0]
		if got := e.PickedTokens(); got != tt.want || e.Picks() != 2 {
			t.Errorf("%s: %d tokens over %d picks, want %d over 2", tt.name, got, e.Picks(), tt.want)
		}
	}
	// A request moved after its first byte (a gateway that served it
	// from another endpoint) counts on the endpoint it moved to, like its
	// pick: 1,000 tokens over one pick.
	two := newTestScheduler(t, []ScorerEntry{{Name: "f", Scorer: fixedScorer{}, Weight: 1}})
	two.SetEndpoints(eps("a:1", "b:1"))
	d, err := two.Pick(context.Background(), &Request{Prompt: prompt})
	if err != nil {
		t.Fatal(err)
	}
	d.FirstByte()
	other := "a:1"
	if d.Endpoint.Address == "a:1" {
		other = "b:1"
	}
	if !d.MoveTo(other) {
		t.Fatalf("MoveTo(%s) refused", other)
	}
	d.Done(Outcome{Kind: OutcomeSuccess})
	for _, e := range two.Pool().Pointers() {
		if e.Address == other && (e.Picks() != 1 || e.PickedTokens() != 1000) {
			t.Errorf("moved after the first byte: %s has %d tokens over %d picks, want 1,000 over 1", other, e.PickedTokens(), e.Picks())
		}
	}
	if got := (&Endpoint{}).PickedTokens(); got != 0 {
		t.Errorf("an endpoint never installed: %d, want 0", got)
	}
}
