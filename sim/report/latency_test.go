package report

import (
	"math"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim/scenario"
)

// TestLatenciesCountMisses: eight completed requests and two misses at a
// 60 s timeout. The percentiles are nearest rank over all ten values, so
// the misses move p90 and p99; leaving them out (the eight completed
// alone) would put p99 at 800 ms.
func TestLatenciesCountMisses(t *testing.T) {
	ms := time.Millisecond
	var l Latencies
	slo := scenario.DefaultSLO()
	// TTFT 100, 200, …, 800 ms; E2E = TTFT + 1 s over 11 tokens (decode
	// 1000 ms ≤ 10·100 ms: within SLO), except the 800 ms one, which
	// decodes 11 tokens in 2 s (2000 > 1000: outside SLO).
	for i := 1; i <= 8; i++ {
		ttft := time.Duration(i) * 100 * ms
		e2e := ttft + time.Second
		if i == 8 {
			e2e = ttft + 2*time.Second
		}
		l.Complete(ttft, e2e, 11, slo)
	}
	l.Miss(1500*ms, 60*time.Second) // timed out after its first token at 1.5 s
	l.Miss(0, 60*time.Second)       // failed or timed out without a token
	l.Sort()
	if l.Requests() != 10 || l.Misses != 2 || l.Good != 7 {
		t.Fatalf("requests %d, misses %d, good %d; want 10, 2, 7", l.Requests(), l.Misses, l.Good)
	}
	tests := []struct {
		name string
		v    []float64
		p    float64
		want float64
	}{
		// TTFT sorted: 100 200 300 400 500 600 700 800 1500 60000.
		{"TTFT p50", l.TTFT, 50, 500},   // rank ⌈0.5·10⌉ = 5
		{"TTFT p90", l.TTFT, 90, 1500},  // rank 9: the miss with a first token
		{"TTFT p99", l.TTFT, 99, 60000}, // rank ⌈9.9⌉ = 10: the miss at the timeout
		// E2E sorted: 1100 1200 1300 1400 1500 1600 1700 2800 60000 60000.
		{"E2E p50", l.E2E, 50, 1500},  // rank 5
		{"E2E p90", l.E2E, 90, 60000}, // rank 9: a miss at the timeout
		{"E2E p99", l.E2E, 99, 60000}, // rank 10
	}
	for _, tt := range tests {
		if got := Percentile(tt.v, tt.p); got != tt.want {
			t.Errorf("%s = %v ms, want %v", tt.name, got, tt.want)
		}
	}
	// 7 requests within SLO in a 10 s window: 0.7 req/s.
	if got := l.Goodput(10 * time.Second); math.Abs(got-0.7) > 1e-12 {
		t.Errorf("goodput %v req/s, want 0.7", got)
	}
	if got := l.Goodput(0); !math.IsNaN(got) {
		t.Errorf("goodput over no window %v, want NaN", got)
	}
	// A first token after the timeout cannot be: it counts at the timeout.
	var c Latencies
	c.Miss(90*time.Second, 60*time.Second)
	if c.TTFT[0] != 60000 || c.E2E[0] != 60000 {
		t.Errorf("miss with first token past the timeout: TTFT %v, E2E %v ms; want 60000, 60000", c.TTFT[0], c.E2E[0])
	}
}

func TestPercentile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct{ p, want float64 }{
		{50, 5},  // rank ⌈0.5 × 10⌉ = 5
		{90, 9},  // rank 9
		{99, 10}, // rank ⌈9.9⌉ = 10
		{0, 1},   // rank 0 → clamped to the first
	}
	for _, tt := range tests {
		if got := Percentile(v, tt.p); got != tt.want {
			t.Errorf("Percentile(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
}
