package configurator

import (
	"bytes"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// TestMetricsGolden: after start (calm, D 0.5), landing on D 0.3 one second
// later, and a signal of 0.35 = s0 at 2 s (rebalance, σ 0.5, D 0.3 +
// 0.5·0.6 = 0.6: prefix 6·0.4 = 2.4, lora 2·0.4 = 0.8, queue = kv =
// 4·0.6 = 2.4, bias 0.5), the exposition matches testdata/metrics.txt.
func TestMetricsGolden(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := mustNew(t, adaptive(), Deps{Registerer: reg})
	c.Step(t0, sig(0))
	c.Step(t0.Add(time.Second), sig(0))
	c.Step(t0.Add(2*time.Second), sig(0.35))
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
