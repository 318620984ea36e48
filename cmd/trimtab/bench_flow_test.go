package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/trimtab/trimtab/bench"
	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// TestBenchClassesThroughServe: bench plays an interactive stream and a
// batch job through an in-process serve with flow control on
// (adaptive-flow) in front of 2 fake servers on 127.0.0.1, and reports
// each class as the simulator does. The batch job's 32 clients start at
// once with a 1 ms TTL: a sheddable request saturates its endpoint (1,024
// prompt tokens pending ≥ the band's 25 ms budget at 13,100 tokens/s =
// 328 tokens) until its first byte, and the reserve keeps the other
// endpoint for the interactive band, so most of them wait past their TTL
// and are refused (429, X-Trimtab-Drop-Reason) — dropped, not failed; the
// job issues exactly its 120 requests. Interactive requests are never
// refused.
func TestBenchClassesThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("a real-time bench run through serve: skipped under -short")
	}
	rep, _, chat, batch := benchChatAndBatch(t, `
name: classes
duration: 3s
warmup: 300ms
servers: 2
timeout: 10s
workload: {kind: uniform, question_tokens: 128, output_tokens: 8, class: {name: chat, band: interactive, tenant: app}}
load: {mode: open, levels: [20]}
streams:
  - {name: batch, band: sheddable, tenant: job, ttl: 1ms, start: 500ms, requests: 120, concurrency: 32, timeout: 10s,
     workload: {kind: uniform, question_tokens: 1024, output_tokens: 8}}
`, 2, benchPolicies(t, sim.PolicyAdaptiveFlow))
	t.Logf("chat %+v; batch %+v", chat, batch)
	if chat.Issued < 20 || chat.Completed != chat.Issued || chat.Dropped != 0 || chat.TTFTP99 == nil || chat.E2EP99 == nil || chat.Goodput == nil || chat.Measured == 0 {
		t.Errorf("chat %+v: want ≥ 20 issued, all completed, none dropped, latencies and goodput", chat)
	}
	if batch.Issued != 120 || batch.Dropped == 0 || batch.Completed == 0 || batch.Completed+batch.Dropped != batch.Issued {
		t.Errorf("batch %+v: want 120 issued, some completed, some dropped, nothing else", batch)
	}
	for _, q := range rep.Runs[0].Requests {
		if q.DropReason != "" && (q.DropReason != "ttl-expired" || q.Err != "http_429") {
			t.Fatalf("dropped request: %s (%s), want ttl-expired with 429", q.DropReason, q.Err)
		}
	}
	// The fake servers report their own TTFT: every chat request completed,
	// so the servers' p99 is within the client's and what lies in front of
	// them is not negative; the report has the per-class table.
	if chat.ServerTTFTP99 == nil || chat.RouterTTFTP99 == nil || *chat.ServerTTFTP99 <= 0 || *chat.ServerTTFTP99 > *chat.TTFTP99 || *chat.RouterTTFTP99 < 0 {
		t.Errorf("chat server / in-front TTFT p99 %v / %v against the client's %v: want both, the server's in (0, client's]", chat.ServerTTFTP99, chat.RouterTTFTP99, *chat.TTFTP99)
	}
	var md strings.Builder
	if err := rep.WriteMarkdown(&md, "-", "cmd", "setup"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{": per class", "| chat | " + rep.Config.Policies[0].Name + " | ", "| batch | " + rep.Config.Policies[0].Name + " | "} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
}

// TestBenchOneAddressForEveryClient: bench's load generator is one
// address standing for every client of the scenario, so the in-process
// router must not cap its connections per client address. The profile
// caps them at 8 (server.http.max_connections_per_client); a batch job
// keeps 24 requests outstanding beside an interactive stream, so with the
// cap in force the connections past 8 are refused (429
// too_many_client_connections, no X-Trimtab-Drop-Reason: failed, not
// dropped) and the job's clients run through most of its 96 requests that
// way. Every request completes: 24 + the stream's few in flight is far
// below the profile's max_connections (4096), which bench keeps.
func TestBenchOneAddressForEveryClient(t *testing.T) {
	if testing.Short() {
		t.Skip("a real-time bench run through serve: skipped under -short")
	}
	sc, err := sim.ParseScenario([]byte(`
name: one-address
duration: 2s
warmup: 200ms
servers: 2
timeout: 20s
workload: {kind: uniform, question_tokens: 128, output_tokens: 8, class: {name: chat, band: interactive, tenant: app}}
load: {mode: open, levels: [10]}
streams:
  - {name: batch, band: sheddable, tenant: job, start: 200ms, requests: 96, concurrency: 24, timeout: 20s,
     workload: {kind: uniform, question_tokens: 256, output_tokens: 32}}
`), "")
	if err != nil {
		t.Fatal(err)
	}
	pols := benchPolicies(t, sim.PolicyAdaptive)
	prof := *pols[0].Profile
	prof.Server.HTTP.MaxConnectionsPerClient = 8
	pols[0].Profile = &prof
	rep := benchThroughServe(t, sc, 2, pols)
	s := rep.Summaries()[0]
	if len(s.Classes) != 2 {
		t.Fatalf("classes %+v, want chat and batch", s.Classes)
	}
	for _, c := range s.Classes {
		t.Logf("%+v", c)
		if c.Issued == 0 || c.Completed != c.Issued {
			t.Errorf("%s: %d of %d completed (%d dropped, %d timed out, %d failed), want all", c.Name, c.Completed, c.Issued, c.Dropped, c.TimedOut, c.Failed)
		}
	}
	if s.Classes[1].Issued != 96 {
		t.Errorf("batch issued %d, want its 96", s.Classes[1].Issued)
	}
	if len(s.Errors) != 0 {
		t.Errorf("errors %v, want none", s.Errors)
	}
}

// TestBenchPlaysAJobWhole: a batch job (a closed-loop stream with
// requests) issues all of its requests even when the run's duration ends
// first, as the simulator plays it: 2 clients through 40 requests of 64
// output tokens each take longer than the 1 s run.
func TestBenchPlaysAJobWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("a real-time bench run through serve: skipped under -short")
	}
	rep, sc, _, b := benchChatAndBatch(t, `
name: job
duration: 1s
warmup: 100ms
servers: 1
timeout: 20s
workload: {kind: uniform, question_tokens: 64, output_tokens: 8, class: {name: chat, band: interactive, tenant: app}}
load: {mode: open, levels: [5]}
streams:
  - {name: batch, band: sheddable, tenant: job, start: 100ms, requests: 40, concurrency: 2, timeout: 20s,
     workload: {kind: uniform, question_tokens: 256, output_tokens: 64}}
`, 1, benchPolicies(t, sim.PolicyAdaptive))
	var last time.Duration
	for _, q := range rep.Runs[0].Requests {
		last = max(last, q.Sent)
	}
	if b.Issued != 40 || b.Completed != 40 {
		t.Errorf("batch %+v: want all 40 of the job issued and completed", b)
	}
	if last < sc.Duration {
		t.Errorf("the last request was sent %v in: the job fit in the %v run, so this test shows nothing", last, sc.Duration)
	}
}

// benchChatAndBatch plays the scenario in yamlText through serve
// (benchThroughServe) and returns the report, the scenario and its two
// classes, chat and batch, failing the test unless there are exactly
// those.
func benchChatAndBatch(t *testing.T, yamlText string, servers int, pols []bench.Policy) (*bench.Report, *scenario.Scenario, report.ClassSummary, report.ClassSummary) {
	t.Helper()
	sc, err := sim.ParseScenario([]byte(yamlText), "")
	if err != nil {
		t.Fatal(err)
	}
	rep := benchThroughServe(t, sc, servers, pols)
	s := rep.Summaries()[0]
	if len(s.Classes) != 2 || s.Classes[0].Name != "chat" || s.Classes[1].Name != "batch" {
		t.Fatalf("classes %+v, want chat and batch", s.Classes)
	}
	return rep, sc, s.Classes[0], s.Classes[1]
}

// benchThroughServe plays sc once per policy through an in-process serve
// (proxy and admin on 127.0.0.1:0) in front of a fleet of `servers`
// simulated vLLM servers at ×20, each run with a fresh salt, and returns
// bench's report. The fleet stops when the test ends.
func benchThroughServe(t *testing.T, sc *scenario.Scenario, servers int, pols []bench.Policy) *bench.Report {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	targets, err := bench.StartFleet(gctx, g, sc, servers, 20)
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(0)
	rep, err := bench.Run(ctx, bench.Config{Scenario: sc, TimeScale: 1, Repeat: 1, Seed: 1, Targets: targets, Policies: pols},
		bench.Deps{LaunchRouter: routerStarter(routerAddrs{Proxy: "127.0.0.1:0", Admin: "127.0.0.1:0"}), Salt: func() uint64 { n++; return n }})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// benchPolicies is bench.Policies for built-in names, failing the test on
// an error.
func benchPolicies(t *testing.T, names ...string) []bench.Policy {
	t.Helper()
	pols, err := bench.Policies(names, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pols
}
