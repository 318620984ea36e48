package detector

import (
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsGolden: the exposition after three steps — one gated by low
// load, one by too few endpoints, one measuring loads 3,1 (request CV 0.5,
// smoothed with α = 1) — matches testdata/metrics.txt.
func TestMetricsGolden(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := DefaultConfig()
	c.Smoothing = 1
	c.MinLoad = 4
	d, err := New(c, Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	d.Step(t0, pool([]float64{1, 1}, nil))            // total 2 < 4: low_load
	d.Step(t0, pool([]float64{9}, nil))               // 1 endpoint: too_few_endpoints
	eps := pool([]float64{3, 1}, []float64{0.5, 0.5}) // request CV 0.5, KV CV 0
	eps[0].Running, eps[0].Waiting = 1, 2             // pressure 2/4 = 0.5
	d.Step(t0, eps)
	f, err := os.Open("testdata/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(reg, f); err != nil {
		t.Error(err)
	}
}
