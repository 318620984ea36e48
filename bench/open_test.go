package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// runDirect plays sc straight against one fakeserver (no router).
func runDirect(t *testing.T, sc *scenario.Scenario) (*Report, report.RunSummary) {
	t.Helper()
	tg := serveFleet(t, sc, 1)
	cfg := Config{Scenario: sc, TimeScale: 1, Repeat: 1, Seed: 1, Targets: tg, RouterURL: "http://" + tg[0].Address, Policies: []Policy{{Name: "direct"}}}
	rep, err := Run(context.Background(), cfg, Deps{Salt: counter()})
	if err != nil {
		t.Fatal(err)
	}
	return rep, rep.Summaries()[0]
}

// TestOpenLoopChat: Poisson arrivals of chat turns at 40 req/s for 2 s.
// The count is Poisson with mean 40 × 1.8 s measured = 72 (sd ≈ 8.5):
// 40…110 holds with a wide margin; every request succeeds, later turns
// find their conversation cached, and no request leaves later than the
// scheduled arrival by more than a second.
func TestOpenLoopChat(t *testing.T) {
	sc, err := scenario.Parse([]byte(`
name: open-chat
duration: 2s
warmup: 200ms
servers: 1
timeout: 10s
workload: {kind: chat, groups: 2, system_tokens: 200, question_tokens: 30, output_tokens: 8, turns: 3}
load: {mode: open, levels: [40]}
`), "")
	if err != nil {
		t.Fatal(err)
	}
	rep, s := runDirect(t, sc)
	if s.Measured < 40 || s.Measured > 110 || s.Failed+s.TimedOut != 0 {
		t.Errorf("measured %d, failed %d, timed out %d", s.Measured, s.Failed, s.TimedOut)
	}
	if s.CachedTokenRatio == nil || *s.CachedTokenRatio <= 0 {
		t.Errorf("cached_token_ratio %v, want > 0 (system prompts and earlier turns repeat)", s.CachedTokenRatio)
	}
	if _, p99, _ := rep.Runs[0].Lateness(); p99.Seconds() > 1 {
		t.Errorf("lateness p99 %v", p99)
	}
}

// TestTraceReplay: a four-entry trace at speed-up 2 sends exactly its
// four requests; the two entries that share hash ids share a prefix.
func TestTraceReplay(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for i, ids := range []string{"[1,2]", "[1,2,3]", "[7]", "[8]"} {
		lines = append(lines, fmt.Sprintf(`{"timestamp": %d, "input_length": %d, "output_length": 4, "hash_ids": %s}`, i*300, 64*len(strings.Split(ids, ",")), ids))
	}
	if err := os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sc.yaml"), []byte(`
name: trace
duration: 2s
servers: 1
timeout: 10s
workload: {kind: trace, trace: t.jsonl, trace_tokens_per_id: 64}
load: {mode: trace, levels: [2]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := sim.LoadScenario(filepath.Join(dir, "sc.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rep, s := runDirect(t, sc)
	if s.Measured != 4 || s.Failed != 0 {
		t.Errorf("measured %d, failed %d; want 4, 0", s.Measured, s.Failed)
	}
	// 2 s of trace time at speed-up 2: the run's window is 1 s, and the
	// last entry (900 ms of trace time) leaves at 450 ms.
	var last time.Duration
	for _, q := range rep.Runs[0].Requests {
		last = max(last, q.Scheduled)
	}
	if r := rep.Runs[0]; r.End != time.Second || last != 450*time.Millisecond {
		t.Errorf("window end %v, last arrival %v; want 1s, 450ms", r.End, last)
	}
	// Entry 1 (sent at 150 ms) repeats entry 0's 128 tokens: cached
	// tokens appear once entry 0 has been admitted.
	cached := 0
	for _, q := range rep.Runs[0].Requests {
		cached += q.CachedTokens
	}
	if cached == 0 {
		t.Error("no cached tokens: the shared hash ids did not share a prefix")
	}
}
