package main

import (
	"encoding/json"
	"fmt"
	"net"
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
	log, err := runRoot(t, "bench", "--scenario", scen, "--fleet", "3", "--fleet-speed", "20", "--policies", "adaptive,adaptive-off", "--compare-sim",
		"--slo-ttft", "1500ms", "--out", out)
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
		"weight_changes", "watchdog_freezes", "cached_token_ratio", "errors", "phases", "misses", "goodput", "slo"}
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
		// --slo-ttft replaces the default 2 s; TPOT keeps the default 100 ms.
		if slo, _ := r["slo"].(map[string]any); slo == nil || slo["ttft_ms"] != 1500.0 || slo["tpot_ms"] != 100.0 || r["goodput"] == nil {
			t.Errorf("slo %v, goodput %v; want ttft 1500 ms, tpot 100 ms", r["slo"], r["goodput"])
		}
		phases := r["phases"].([]any)
		if len(phases) != 2 {
			t.Errorf("%d phases, want 2", len(phases))
		}
		for _, p := range phases {
			for _, k := range []string{"name", "rebalance_entries", "warmup_rebalance_entries", "ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms", "output_tokens_per_s", "measured", "onset_busiest_ratio", "misses", "goodput"} {
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

// tinyScenario writes a 1.5 s closed-loop scenario on servers pods.
func tinyScenario(t *testing.T, dir string, servers int) string {
	t.Helper()
	path := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
name: tiny
duration: 1500ms
warmup: 100ms
servers: %d
timeout: 10s
workload: {kind: shared-prefix, groups: 6, prompts_per_group: 8, system_tokens: 600, question_tokens: 40, output_tokens: 12}
load: {mode: closed, levels: [6]}
`, servers)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBenchRunsSimBaselines: the simulator's baselines that are not
// profiles run in real time — round-robin and sglang-switch on a fleet
// of two, through serve with the simulator's scheduler for each. Every
// request succeeds, and round-robin serves the two pods in turn (each
// between 45 and 55 % of the requests: a pick alternates, and at most
// the six requests in flight at the end can tip it).
func TestBenchRunsSimBaselines(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	log, err := runRoot(t, "bench", "--scenario", tinyScenario(t, dir, 2), "--fleet", "2", "--fleet-speed", "20",
		"--policies", "round-robin,sglang-switch", "--no-plots", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	var sf struct {
		Runs []struct {
			Policy           string
			Measured, Failed int
		}
	}
	data, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &sf); err != nil {
		t.Fatal(err)
	}
	if len(sf.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(sf.Runs))
	}
	for _, r := range sf.Runs {
		if r.Measured < 10 || r.Failed != 0 {
			t.Errorf("%s: measured %d, failed %d", r.Policy, r.Measured, r.Failed)
		}
	}
	var tl struct {
		Runs []struct {
			Policy string
			Served map[string]int `json:"served_by_pod"`
		}
	}
	if data, err = os.ReadFile(filepath.Join(out, "timeline-tiny.json")); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &tl); err != nil {
		t.Fatal(err)
	}
	for _, r := range tl.Runs {
		if r.Policy != "round-robin" {
			continue
		}
		var counts []int
		for _, k := range r.Served {
			counts = append(counts, k)
		}
		if len(counts) != 2 {
			t.Fatalf("round-robin served %v, want two pods", r.Served)
		}
		if a, n := counts[0], counts[0]+counts[1]; n < 10 || a*100 < n*45 || a*100 > n*55 {
			t.Errorf("round-robin served %v, want each pod 45–55 %%", r.Served)
		}
	}
}

// freePort returns a loopback address nothing listens on (it was free a
// moment ago).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestBenchRouterAddrs: --router-addr and --admin-addr set where each
// run's router listens (every run binds them afresh), each router's
// proxy, admin and status page URLs are printed when it starts, and a
// busy port is refused naming its flag.
func TestBenchRouterAddrs(t *testing.T) {
	dir := t.TempDir()
	scen := tinyScenario(t, dir, 2)
	proxy, admin := freePort(t), freePort(t)
	log, err := runRoot(t, "bench", "--scenario", scen, "--fleet", "2", "--fleet-speed", "20", "--policies", "round-robin,adaptive-off",
		"--router-addr", proxy, "--admin-addr", admin, "--no-plots", "--out", filepath.Join(dir, "out"))
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	for _, pol := range []string{"round-robin", "adaptive-off"} {
		want := fmt.Sprintf("router for %s started: proxy http://%s, admin http://%s, status page http://%s/ui", pol, proxy, admin, admin)
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, flag := range []string{"--router-addr", "--admin-addr"} {
		_, err := runRoot(t, "bench", "--scenario", scen, "--fleet", "2", "--policies", "round-robin", flag, busy.Addr().String(),
			"--no-plots", "--out", filepath.Join(dir, "busy"))
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s on a busy port: err %v, want one naming %s", flag, err, flag)
		}
	}
}
