package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchFleetSummary: a short bench against a 3-server fleet writes
// summary.json in sim's schema with every field set (cached_token_ratio
// and errors included), the tables, a plot per policy, and with
// --compare-sim both rankings.
func TestBenchFleetSummary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real-time bench against a fleet: skipped under -short")
	}
	dir := t.TempDir()
	scen := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(scen, []byte(`
name: tiny
duration: 3s
warmup: 300ms
servers: 3
timeout: 10s
workload: {kind: shared-prefix, groups: 6, prompts_per_group: 8, system_tokens: 600, question_tokens: 40, output_tokens: 12}
load: {mode: closed, levels: [6]}
phases:
  - {name: calm, duration: 1s, level: 2}
  - {name: burst, duration: 2s, workload: {hot_fraction: 0.8, hot_system_tokens: 1200}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	log, err := runRoot(t, "bench", "--scenario", scen, "--fleet", "3", "--fleet-speed", "20", "--policies", "adaptive,adaptive-off", "--compare-sim", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	data, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Runs []map[string]any }
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Runs) != 2 {
		t.Fatalf("%d runs, want 2 (one per policy)", len(f.Runs))
	}
	keys := []string{"scenario", "level", "policy", "seed", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
		"output_tokens_per_s", "prefix_hit_ratio", "failed", "timed_out", "busiest_pod_share", "busiest_pod_ratio", "measured",
		"weight_changes", "watchdog_freezes", "cached_token_ratio", "errors", "phases"}
	for _, r := range f.Runs {
		for _, k := range keys {
			if v, ok := r[k]; !ok || v == nil {
				t.Errorf("%v: %s missing or null", r["policy"], k)
			}
		}
		if r["measured"].(float64) < 10 || r["failed"].(float64) != 0 || r["output_tokens_per_s"].(float64) <= 0 ||
			r["prefix_hit_ratio"].(float64) <= 0 || r["busiest_pod_share"].(float64) <= 0 {
			t.Errorf("implausible run: %v", r)
		}
		phases := r["phases"].([]any)
		if len(phases) != 2 {
			t.Errorf("%d phases, want 2", len(phases))
		}
		for _, p := range phases {
			for _, k := range []string{"name", "rebalance_entries", "warmup_rebalance_entries", "ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms", "output_tokens_per_s", "measured", "onset_busiest_ratio"} {
				if v, ok := p.(map[string]any)[k]; !ok || v == nil {
					t.Errorf("%v phase %v: %s missing or null", r["policy"], p.(map[string]any)["name"], k)
				}
			}
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "tiny.md"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "timeline-tiny.json")); err != nil {
		t.Error(err)
	}
	for _, want := range []string{"concurrency 6: overall", "| burst | adaptive-off |", "### Load generator", "Simulator against real time", "img/bench-real-tiny-adaptive-6-ttft.png"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("tiny.md lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "img", "bench-real-tiny-adaptive-off-6-ttft.png")); err != nil {
		t.Error(err)
	}
	if !strings.Contains(log, "| rank | sim | sim p99 | real | real p99 |") {
		t.Errorf("no ranking printed:\n%s", log)
	}
}

func TestBenchRejectsSimOnlyPolicy(t *testing.T) {
	_, err := runRoot(t, "bench", "--scenario", "small-pool", "--policies", "round-robin", "--out", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "simulator-only") {
		t.Errorf("err = %v, want a simulator-only policy error", err)
	}
}
