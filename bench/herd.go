package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// herdMetric counts an endpoint's herd picks: guarded picks whose calm
// choice was over the guard's bound.
const herdMetric = "trimtab_scheduler_endpoint_herd_picks_total"

// herdPicks reads the router's herd picks, summed over its endpoints,
// from its admin server's /metrics.
func herdPicks(ctx context.Context, hc *http.Client, adminURL string) (int64, error) {
	u := strings.TrimSuffix(adminURL, "/") + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: status %d", u, resp.StatusCode)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", u, err)
	}
	var n float64
	if f := fams[herdMetric]; f != nil {
		for _, m := range f.Metric {
			n += value(m)
		}
	}
	return int64(n), nil
}
