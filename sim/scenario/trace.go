package scenario

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultTraceOutputTokens is the output length TraceScenario replays a
// request of unknown output with when the trace knows none: 343, the mean
// output of the Mooncake conversation trace (sim/scenarios/data).
const DefaultTraceOutputTokens = 343

// TraceConfig says how TraceScenario replays a trace file.
type TraceConfig struct {
	// Servers is the pool size to replay on, 1…4096 (the size it was
	// recorded on is the Trimtab-Trace-Endpoints header of the
	// /debug/trace download).
	Servers int
	// OutputTokens replaces an unknown (0) output_length when the trace
	// has no known one to average; DefaultTraceOutputTokens when 0.
	OutputTokens int
}

// TraceScenario builds a scenario that replays a Mooncake-format trace
// file (".gz" is decompressed) once at its own pace on cfg.Servers
// default servers: the run spans the trace's last arrival, the first 5 %
// is warm-up, and entries whose output length is unknown (0, as in a
// trace recorded by `trimtab serve`) get the mean of the known ones, or
// cfg.OutputTokens when none is known. It is named "trace-" and the file's
// base name.
func FromTrace(path string, cfg TraceConfig) (*Scenario, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	base := strings.TrimSuffix(filepath.Base(path), ".gz")
	return traceScenario(abs, nil, "trace-"+strings.TrimSuffix(base, filepath.Ext(base)), filepath.Base(path), cfg)
}

// MaxTraceData bounds the trace TraceScenarioData takes: 256 MiB, more
// than the largest window `trimtab serve` records (1,000,000 requests
// of at most 256 ids).
const MaxTraceData = 256 << 20

// TraceScenarioData is TraceScenario for a trace held in memory (Mooncake
// JSONL, not compressed), such as a window taken from `trimtab serve`'s
// traffic recorder: the scenario keeps data (the caller must not modify
// it) and is named "trace-" and name.
func FromTraceData(name string, data []byte, cfg TraceConfig) (*Scenario, error) {
	if len(data) > MaxTraceData {
		return nil, fmt.Errorf("trace: %d bytes, want at most %d", len(data), MaxTraceData)
	}
	if data == nil {
		data = []byte{}
	}
	return traceScenario(name+".jsonl", data, "trace-"+name, name, cfg)
}

// traceScenario builds the replay of the trace at path, or of data when it
// is not nil (path then only names it).
func traceScenario(path string, data []byte, name, label string, cfg TraceConfig) (*Scenario, error) {
	if cfg.Servers < 1 || cfg.Servers > 4096 {
		return nil, fmt.Errorf("servers: %d, want 1…4096", cfg.Servers)
	}
	if cfg.OutputTokens < 0 {
		return nil, fmt.Errorf("output tokens: %d, want ≥ 0", cfg.OutputTokens)
	}
	probe := &Scenario{Duration: time.Duration(math.MaxInt64), Workload: Workload{Trace: path, OutputTokens: 1}, traceData: data}
	entries, err := probe.LoadTrace("")
	if err != nil {
		return nil, err
	}
	out := cfg.OutputTokens
	if out == 0 {
		out = DefaultTraceOutputTokens
	}
	var known, sum int
	for _, e := range entries {
		if e.OutputLength > 0 {
			known++
			sum += e.OutputLength
		}
	}
	if known > 0 {
		out = max(1, (sum+known/2)/known)
	}
	span := time.Duration(entries[len(entries)-1].Timestamp)*time.Millisecond + time.Millisecond
	text := fmt.Sprintf(`name: %s
description: %s
duration: %s
warmup: %s
servers: %d
timeout: 120s
workload:
  kind: trace
  trace: %s
  trace_tokens_per_id: 512
  output_tokens: %d
load:
  mode: trace
  levels: [1]
`, strconv.Quote(name),
		strconv.Quote(fmt.Sprintf("Replay of the %d requests of %s on %d servers at their recorded pace; unknown output lengths are %d tokens.", len(entries), label, cfg.Servers, out)),
		span, span/20, cfg.Servers, strconv.Quote(path), out)
	sc, err := Parse([]byte(text), "")
	if err != nil {
		return nil, err
	}
	sc.traceData = data
	return sc, nil
}
