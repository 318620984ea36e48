package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// TestCalibrationOnAdmin: serve wires the calibrator to the scheduler's
// observations and shows what it learned on /debug/calibration and as an
// engine file on /debug/calibration/engine.yaml.
func TestCalibrationOnAdmin(t *testing.T) {
	s, url := adminService(t, "")
	s.sched.SetEndpoints([]scheduler.Endpoint{{Address: "10.0.0.1:8000", Models: []string{"m"}, CacheBlockSize: 16, CacheBlocks: 500}})
	for i := range 30 {
		d, err := s.sched.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: make([]byte, 400*(i+1))})
		if err != nil {
			t.Fatal(err)
		}
		// 100·(i+1) tokens at 10,000 tokens/s after 20 ms.
		ttft := 20*time.Millisecond + time.Duration(i+1)*10*time.Millisecond
		d.Done(scheduler.Outcome{Kind: scheduler.OutcomeSuccess, TTFT: ttft, Latency: ttft + time.Second, Usage: scheduler.Usage{OutputTokens: 11}})
	}
	s.cal.Tick(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	get := func(path string) string {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	var v struct {
		Endpoints []struct {
			Address     string `json:"address"`
			Source      string `json:"source"`
			Calibration struct {
				PrefillTokensPerSecond float64
				KVCapacityTokens       float64
				Samples                int
			} `json:"calibration"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal([]byte(get("/debug/calibration")), &v); err != nil {
		t.Fatal(err)
	}
	// 30 samples ≥ min_samples 20: learned, 10,000 tokens/s; KV 500 × 16.
	if len(v.Endpoints) != 1 || v.Endpoints[0].Source != "learned" || v.Endpoints[0].Calibration.Samples != 30 ||
		v.Endpoints[0].Calibration.PrefillTokensPerSecond < 9990 || v.Endpoints[0].Calibration.PrefillTokensPerSecond > 10010 ||
		v.Endpoints[0].Calibration.KVCapacityTokens != 8000 {
		t.Errorf("/debug/calibration: %+v, want one endpoint learned at 10,000 tokens/s from 30 samples, 8,000 KV tokens", v)
	}
	if got := s.sched.Pool().Pointers()[0].Calibration(); got.Samples != 30 {
		t.Errorf("published calibration %+v, want 30 samples", got)
	}
	if eng := get("/debug/calibration/engine.yaml"); !strings.Contains(eng, "num_blocks: 500\n") || !strings.Contains(eng, "step_per_prefill_token: ") {
		t.Errorf("engine.yaml:\n%s", eng)
	}
}
