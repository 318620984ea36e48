package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/report"
)

func runRoot(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestSimAllFromClone: `trimtab sim --scenario all` works from the binary
// alone (every scenario, trace included, is embedded), writes a table per
// scenario, summary.json with a run per (scenario, level, policy) and
// compare.md with adaptive against both fair baselines.
func TestSimAllFromClone(t *testing.T) {
	if testing.Short() {
		t.Skip("sweeps every shipped scenario: skipped under -short")
	}
	out := t.TempDir()
	t.Chdir(t.TempDir()) // nothing may be read from the working tree
	if log, err := runRoot(t, "sim", "--scenario", "all", "--duration", "10s", "--policies", "adaptive,adaptive-off,tuned-static", "--no-plots", "--out", out); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	var f report.SummaryFile
	data, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, n := range sim.Shipped() {
		sc, err := sim.LoadScenario(n)
		if err != nil {
			t.Fatal(err)
		}
		want += 3 * len(sc.Load.Levels)
		if _, err := os.Stat(filepath.Join(out, n+".md")); err != nil {
			t.Error(err)
		}
	}
	if len(f.Runs) != want {
		t.Errorf("%d runs in summary.json, want %d", len(f.Runs), want)
	}
	cmp, err := os.ReadFile(filepath.Join(out, "compare.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"adaptive against adaptive-off", "adaptive against tuned-static", "| rotating-hot-prefix"} {
		if !strings.Contains(string(cmp), s) {
			t.Errorf("compare.md lacks %q", s)
		}
	}
}

// TestSimTune: `trimtab sim tune` writes its report and a profile that
// validates, with the loop off.
func TestSimTune(t *testing.T) {
	out := t.TempDir()
	if log, err := runRoot(t, "sim", "tune", "--scenario", "small-pool-burst", "--duration", "20s", "--budget", "7", "--out", out); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	md, err := os.ReadFile(filepath.Join(out, "tune.md"))
	if err != nil || !strings.Contains(string(md), "Best for the suite") {
		t.Fatalf("tune.md: %v\n%s", err, md)
	}
	f, err := configs.Load(filepath.Join(out, "tuned.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := configs.LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	if f.Adaptive.Enabled || len(f.Scorers) != len(shipped.Scorers) {
		t.Errorf("tuned.yaml: adaptive %v, %d scorers; want the loop off and configs/adaptive.yaml's %d", f.Adaptive.Enabled, len(f.Scorers), len(shipped.Scorers))
	}
	if _, err := runRoot(t, "sim", "tune", "--scenario", "small-pool-burst", "--seeds", "0", "--out", out); err == nil || !strings.Contains(err.Error(), "--seeds") {
		t.Errorf("--seeds 0: %v", err)
	}
}

// TestSimRouterFlags: --routers and --router-sync put router replicas in
// front of the simulated pool; the report and summary.json say so, and a
// bad value is an error naming the flag.
func TestSimRouterFlags(t *testing.T) {
	out := t.TempDir()
	if log, err := runRoot(t, "sim", "--scenario", "shared-prefix", "--duration", "10s", "--levels", "32", "--policies", "adaptive",
		"--routers", "2", "--router-sync", "off", "--no-plots", "--out", out); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	md, err := os.ReadFile(filepath.Join(out, "shared-prefix.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "Routed by 2 routers (round-robin spread, no sync).") {
		t.Errorf("report does not say how it was routed:\n%s", md)
	}
	var f report.SummaryFile
	data, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Runs) != 1 || f.Runs[0].Routers == nil || f.Runs[0].Routers.Replicas != 2 || f.Runs[0].Routers.Sync {
		t.Errorf("summary routers %+v, want 2 replicas without sync", f.Runs[0].Routers)
	}
	for _, bad := range [][]string{{"--router-sync", "maybe"}, {"--routers", "0"}, {"--router-spread", "random"}} {
		args := append([]string{"sim", "--scenario", "shared-prefix", "--duration", "1s", "--policies", "adaptive", "--no-plots", "--out", t.TempDir()}, bad...)
		if _, err := runRoot(t, args...); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(bad[0], "--")) && !strings.Contains(err.Error(), "routers.") {
			t.Errorf("%v: error %v, want one naming the setting", bad, err)
		}
	}
}

// TestSimEngineFlag: --engine applies a calibration to every scenario
// (summary.json and the report name it), a file with a bad key is an
// error naming the key, and --help lists the shipped calibrations.
func TestSimEngineFlag(t *testing.T) {
	out := t.TempDir()
	if log, err := runRoot(t, "sim", "--scenario", "small-pool", "--duration", "5s", "--levels", "2", "--policies", "round-robin",
		"--engine", "h100-80gb-llama-3.1-8b", "--slo-ttft", "500ms", "--no-plots", "--out", out); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	var f report.SummaryFile
	data, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Runs) != 1 || f.Runs[0].Engine != "h100-80gb-llama-3.1-8b" || f.Runs[0].SLO == nil || f.Runs[0].SLO.TTFTMS != 500 {
		t.Errorf("summary runs %+v, want one with engine h100-80gb-llama-3.1-8b and slo ttft_ms 500", f.Runs)
	}
	md, err := os.ReadFile(filepath.Join(out, "small-pool.md"))
	if err != nil || !strings.Contains(string(md), "Engine calibration `h100-80gb-llama-3.1-8b`") || !strings.Contains(string(md), "29205 KV blocks") {
		t.Errorf("report does not name the calibration or its KV size: %v\n%s", err, md)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("num_blocks: 100\nstep_fixd: 2ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--engine", bad}, "step_fixd"},
		{[]string{"--engine", "tpu-v9"}, "--engine"},
		{[]string{"--slo-tpot", "0s"}, "slo.tpot"},
	} {
		args := append([]string{"sim", "--scenario", "small-pool", "--duration", "1s", "--policies", "round-robin", "--no-plots", "--out", t.TempDir()}, tt.args...)
		if _, err := runRoot(t, args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one naming %q", tt.args, err, tt.want)
		}
	}
	help, _ := runRoot(t, "sim", "--help")
	for _, n := range sim.EngineNames() {
		if !strings.Contains(help, n) {
			t.Errorf("sim --help does not list calibration %s", n)
		}
	}
}
