package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		cfg      TraceConfig
		name     string
		duration time.Duration
		output   int
	}{
		// Last arrival 1999 ms → duration 2s; no known output → the default.
		{recorded, TraceConfig{Servers: 3}, "trace-recorded", 2 * time.Second, DefaultTraceOutputTokens},
		{recorded, TraceConfig{Servers: 3, OutputTokens: 64}, "trace-recorded", 2 * time.Second, 64},
		// Known outputs 10 and 21: mean (31 + 1) / 2 = 16 rounded; 10 ms.
		{mixed, TraceConfig{Servers: 1, OutputTokens: 64}, "trace-mixed", 10 * time.Millisecond, 16},
	}
	for _, tt := range tests {
		sc, err := TraceScenario(tt.path, tt.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tt.path, err)
		}
		if sc.Name != tt.name || sc.Duration != tt.duration || sc.Warmup != tt.duration/20 || sc.Servers != tt.cfg.Servers ||
			sc.Workload.OutputTokens != tt.output || sc.Load.Mode != ModeTrace || len(sc.Load.Levels) != 1 {
			t.Errorf("%s %+v: name %q duration %v warmup %v servers %d output %d mode %s levels %v", tt.path, tt.cfg,
				sc.Name, sc.Duration, sc.Warmup, sc.Servers, sc.Workload.OutputTokens, sc.Load.Mode, sc.Load.Levels)
		}
		entries, err := sc.LoadTrace("")
		if err != nil || len(entries) != strings.Count(mustRead(t, tt.path), "\n") {
			t.Errorf("%s: LoadTrace kept %d entries, %v; want every one", tt.path, len(entries), err)
		}
	}
	for _, cfg := range []TraceConfig{{Servers: 0}, {Servers: 4097}, {Servers: 1, OutputTokens: -1}} {
		if _, err := TraceScenario(recorded, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	if _, err := TraceScenario(filepath.Join(dir, "missing.jsonl"), TraceConfig{Servers: 1}); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
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
