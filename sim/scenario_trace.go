package sim

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
func TraceScenario(path string, cfg TraceConfig) (*Scenario, error) {
	if cfg.Servers < 1 || cfg.Servers > 4096 {
		return nil, fmt.Errorf("servers: %d, want 1…4096", cfg.Servers)
	}
	if cfg.OutputTokens < 0 {
		return nil, fmt.Errorf("output tokens: %d, want ≥ 0", cfg.OutputTokens)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	probe := &Scenario{Duration: time.Duration(math.MaxInt64), Workload: Workload{Trace: abs, OutputTokens: 1}}
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
	base := strings.TrimSuffix(filepath.Base(path), ".gz")
	name := "trace-" + strings.TrimSuffix(base, filepath.Ext(base))
	data := fmt.Sprintf(`name: %s
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
		strconv.Quote(fmt.Sprintf("Replay of the %d requests of %s on %d servers at their recorded pace; unknown output lengths are %d tokens.", len(entries), filepath.Base(path), cfg.Servers, out)),
		span, span/20, cfg.Servers, strconv.Quote(abs), out)
	return ParseScenario([]byte(data), "")
}
