package configurator

import (
	"bytes"
	"flag"
	"math"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// TestMetricsGolden: after start (calm, D 0.5), landing on D 0.3 one second
// later, and a signal of s0 + ln 4/k = 0.15 + ln 4/25 = 0.20545 ≥ theta_on
// 0.2 at 2 s (rebalance, σ = 1/(1 + e^(−ln 4)) = 0.8, D 0.3 + 0.8·0.6 =
// 0.78, reached in the one second since the last step: prefix 6·0.22 =
// 1.32, lora 2·0.22 = 0.44, queue = kv = 4·0.78 = 3.12, bias 0.5), the
// exposition matches testdata/metrics.txt.
func TestMetricsGolden(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := mustNew(t, adaptive(), Deps{Registerer: reg})
	c.Step(t0, sig(0))
	c.Step(t0.Add(time.Second), sig(0))
	c.Step(t0.Add(2*time.Second), sig(0.15+math.Log(4)/25))
	const golden = "testdata/metrics.txt"
	if *update {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		for _, mf := range mfs {
			if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(golden)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(reg, f); err != nil {
		t.Error(err)
	}
}
