package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim/scenario"
)

func TestTraceScenario(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	recorded := write("recorded.jsonl", `{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [0, 1]}
{"timestamp": 1999, "input_length": 100, "output_length": 0, "hash_ids": [0]}
`)
	mixed := write("mixed.jsonl", `{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [0, 1]}
{"timestamp": 5, "input_length": 600, "output_length": 0, "hash_ids": [0, 2]}
{"timestamp": 9, "input_length": 100, "output_length": 21, "hash_ids": [0]}
`)
	tests := []struct {
		path     string
		cfg      scenario.TraceConfig
		name     string
		duration time.Duration
		output   int
	}{
		// Last arrival 1999 ms → duration 2s; no known output → the default.
		{recorded, scenario.TraceConfig{Servers: 3}, "trace-recorded", 2 * time.Second, scenario.DefaultTraceOutputTokens},
		{recorded, scenario.TraceConfig{Servers: 3, OutputTokens: 64}, "trace-recorded", 2 * time.Second, 64},
		// Known outputs 10 and 21: mean (31 + 1) / 2 = 16 rounded; 10 ms.
		{mixed, scenario.TraceConfig{Servers: 1, OutputTokens: 64}, "trace-mixed", 10 * time.Millisecond, 16},
	}
	for _, tt := range tests {
		sc, err := scenario.FromTrace(tt.path, tt.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tt.path, err)
		}
		if sc.Name != tt.name || sc.Duration != tt.duration || sc.Warmup != tt.duration/20 || sc.Servers != tt.cfg.Servers ||
			sc.Workload.OutputTokens != tt.output || sc.Load.Mode != scenario.ModeTrace || len(sc.Load.Levels) != 1 {
			t.Errorf("%s %+v: name %q duration %v warmup %v servers %d output %d mode %s levels %v", tt.path, tt.cfg,
				sc.Name, sc.Duration, sc.Warmup, sc.Servers, sc.Workload.OutputTokens, sc.Load.Mode, sc.Load.Levels)
		}
		entries, err := sc.LoadTrace("")
		if err != nil || len(entries) != strings.Count(mustRead(t, tt.path), "\n") {
			t.Errorf("%s: LoadTrace kept %d entries, %v; want every one", tt.path, len(entries), err)
		}
	}
	for _, cfg := range []scenario.TraceConfig{{Servers: 0}, {Servers: 4097}, {Servers: 1, OutputTokens: -1}} {
		if _, err := scenario.FromTrace(recorded, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	if _, err := scenario.FromTrace(filepath.Join(dir, "missing.jsonl"), scenario.TraceConfig{Servers: 1}); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Errorf("missing file: %v", err)
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTraceScenarioData(t *testing.T) {
	data := []byte(`{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [0, 1]}
{"timestamp": 1999, "input_length": 100, "output_length": 0, "hash_ids": [0]}
`)
	sc, err := scenario.FromTraceData("window", data, scenario.TraceConfig{Servers: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Last arrival 1999 ms → duration 2s, warm-up 2s / 20 = 100ms; no known
	// output → the default.
	if sc.Name != "trace-window" || sc.Duration != 2*time.Second || sc.Warmup != 100*time.Millisecond || sc.Servers != 2 ||
		sc.Workload.OutputTokens != scenario.DefaultTraceOutputTokens || sc.Load.Mode != scenario.ModeTrace {
		t.Errorf("name %q duration %v warmup %v servers %d output %d mode %s", sc.Name, sc.Duration, sc.Warmup, sc.Servers, sc.Workload.OutputTokens, sc.Load.Mode)
	}
	if _, err := os.Stat(sc.Workload.Trace); err == nil {
		t.Fatalf("a file %s exists; the test cannot tell the data from it", sc.Workload.Trace)
	}
	entries, err := sc.LoadTrace("")
	if err != nil || len(entries) != 2 || entries[1].Timestamp != 1999 || entries[0].InputLength != 600 {
		t.Errorf("LoadTrace: %+v, %v; want both entries from the data", entries, err)
	}
	pols, err := Policies([]string{PolicyLeastQueue})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(RunConfig{Scenario: sc, Policy: pols[0], Level: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Issued != 2 || res.Completed != 2 {
		t.Errorf("the replay issued %d and completed %d requests, want the trace's 2", res.Issued, res.Completed)
	}
	for _, bad := range [][]byte{nil, []byte("not json\n"), make([]byte, scenario.MaxTraceData+1)} {
		if _, err := scenario.FromTraceData("bad", bad, scenario.TraceConfig{Servers: 1}); err == nil {
			t.Errorf("%d bytes accepted", len(bad))
		}
	}
	if _, err := scenario.FromTraceData("window", data, scenario.TraceConfig{Servers: 0}); err == nil {
		t.Error("servers 0 accepted")
	}
}
