package status

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// fullRecorder holds a full default window: 10 min at 500 ms = 1,201
// samples, each with the seven detector components and n scorer weights.
func fullRecorder(b *testing.B, n int) *Recorder {
	b.Helper()
	r, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("scorer-%d", i)
	}
	w := &scheduler.Weights{Version: 7, Values: make([]float64, n), Mode: "calm"}
	for i := 0; i < 12_000; i++ { // 10 min of 50 ms ticks
		s := Sample{At: t0.Add(time.Duration(i) * 50 * time.Millisecond), Signal: 0.25, Components: components()}
		s.SetWeights(w, names)
		r.Record(s)
	}
	return r
}

func components() map[string]float64 {
	return map[string]float64{"request_cv": 0.3, "kv_cv": 0.2, "raw": 0.3, "smoothed": 0.25,
		"pressure": 0.1, "endpoints": 16, "total_load": 120}
}

// BenchmarkRecord is the per-tick cost cmd pays (50 ms ticks), the map
// allocations of the sample included.
func BenchmarkRecord(b *testing.B) {
	r, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	w := &scheduler.Weights{Version: 1, Values: []float64{3, 2, 2, 1}, Mode: "calm"}
	names := []string{"prefix", "queue", "kvcache", "inflight"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s := Sample{At: t0.Add(time.Duration(i) * 50 * time.Millisecond), Signal: 0.25, Components: components()}
		s.SetWeights(w, names)
		r.Record(s)
	}
}

// BenchmarkHistory serves /debug/history over loopback: the page's first
// poll (the whole window) and its steady-state polls (from its last seq),
// reporting the response size.
func BenchmarkHistory(b *testing.B) {
	for _, n := range []int{4, 8} {
		r := fullRecorder(b, n)
		srv := httptest.NewServer(r.Handler())
		latest := r.History(Query{}).Latest.Seq
		for _, q := range []struct{ name, query string }{
			{"full", ""},
			{"incremental", fmt.Sprintf("?from=%d", latest-2)},
		} {
			b.Run(fmt.Sprintf("scorers=%d/%s", n, q.name), func(b *testing.B) {
				b.ReportAllocs()
				var size int64
				for b.Loop() {
					resp, err := srv.Client().Get(srv.URL + PathHistory + q.query)
					if err != nil {
						b.Fatal(err)
					}
					size, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
				b.ReportMetric(float64(size), "bytes/response")
			})
		}
		srv.Close()
	}
}
