package scheduler

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkSchedulerCore measures the scheduler's own overhead (subset,
// filters, weighted sum, ranking, Done) with trivial scorers; the full
// request path with real scorers is BenchmarkPick in package scorers.
func BenchmarkSchedulerCore(b *testing.B) {
	for _, n := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			s, err := New(DefaultConfig(), []ScorerEntry{
				{Name: "a", Scorer: fixedScorer{}, Weight: 3},
				{Name: "b", Scorer: fixedScorer{}, Weight: 2},
			}, []Filter{ModelFilter{}, HealthyFilter{}}, MaxScore{}, Deps{})
			if err != nil {
				b.Fatal(err)
			}
			pool := make([]Endpoint, n)
			for i := range pool {
				pool[i] = Endpoint{Address: fmt.Sprintf("10.0.0.%d:8000", i)}
			}
			s.SetEndpoints(pool)
			req := &Request{ID: "r", Model: "m"}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				d, err := s.Pick(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				d.Done(Outcome{})
			}
		})
	}
}
