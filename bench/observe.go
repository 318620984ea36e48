package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/trimtab/trimtab/internal/status"
)

// PodSample is one scrape of every target.
type PodSample struct {
	// T is the offset from the run's start.
	T time.Duration
	// Load is running + waiting requests per target (NaN-free: a failed
	// scrape repeats the target's previous value).
	Load []float64
	// Hits and Queries are the targets' prefix-cache counters in tokens
	// (vLLM's vllm:prefix_cache_hits_total and …_queries_total), summed.
	Hits, Queries float64
}

// scrapeTarget reads the load and prefix-cache counters of one server's
// /metrics (vLLM names). ok is false when the scrape failed.
func scrapeTarget(ctx context.Context, hc *http.Client, addr string) (load, hits, queries float64, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, 0, 0, false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, 0, false
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, 0, 0, false
	}
	sum := func(name string) float64 {
		f := fams[name]
		if f == nil {
			return 0
		}
		v := 0.0
		for _, m := range f.Metric {
			v += value(m)
		}
		return v
	}
	load = sum("vllm:num_requests_running") + sum("vllm:num_requests_waiting")
	return load, sum("vllm:prefix_cache_hits_total"), sum("vllm:prefix_cache_queries_total"), true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// ModePoint is the router's state at one control tick.
type ModePoint struct {
	T      time.Duration
	Mode   string
	Signal float64
	// Weights by scorer name.
	Weights map[string]float64
}

// ModeChange is one change of the router's mode.
type ModeChange struct {
	T        time.Duration
	From, To string
}

// history reads the router's /debug/history; last bounds it ("" all).
func history(ctx context.Context, hc *http.Client, adminURL, last string) (*status.History, error) {
	u := strings.TrimSuffix(adminURL, "/") + status.PathHistory
	if last != "" {
		u += "?last=" + last
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d", u, resp.StatusCode)
	}
	var h status.History
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&h); err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return &h, nil
}

// timeline converts a history to offsets from start: the samples, the
// mode changes and the published weight versions after the first.
func timeline(h *status.History, start time.Time) (pts []ModePoint, changes []ModeChange, versions int) {
	for _, s := range h.Samples {
		pts = append(pts, ModePoint{T: s.At.Sub(start), Mode: s.Mode, Signal: s.Signal, Weights: s.Weights})
	}
	for _, c := range h.Changes {
		if c.FromVersion == 0 {
			continue
		}
		versions += c.Steps
		if c.FromMode != c.ToMode {
			changes = append(changes, ModeChange{T: c.At.Sub(start), From: c.FromMode, To: c.ToMode})
		}
	}
	return pts, changes, versions
}
