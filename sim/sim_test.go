package sim

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

var update = flag.Bool("update", false, "rewrite golden files")

// smallScenario is a 4-server, 12-second shared-prefix run: big enough to
// exercise affinity, queueing and the control loop, small enough for -race.
func smallScenario(t testing.TB) *scenario.Scenario {
	t.Helper()
	sc, err := ParseScenario([]byte(`
name: small
description: test
duration: 12s
warmup: 1s
servers: 4
timeout: 30s
engine:
  num_blocks: 1500
workload:
  kind: shared-prefix
  groups: 6
  prompts_per_group: 8
  system_tokens: 1500
  hot_fraction: 0.9
  hot_system_tokens: 3000
  question_tokens: 100
  output_tokens: 60
  jitter: 0.5
load:
  mode: closed
  levels: [24]
  burst: {base: 4, start: 3s, end: 9s}
`), "")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func allPolicies(t testing.TB) []Policy {
	t.Helper()
	ps, err := Policies(nil)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestConservation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*scenario.Scenario)
		// wantTimeouts: the scenario is built to time requests out.
		wantTimeouts bool
	}{
		{"closed loop", func(*scenario.Scenario) {}, false},
		{"open loop", func(s *scenario.Scenario) { s.Load.Mode, s.Load.Levels = scenario.ModeOpen, []float64{30} }, false},
		// 200 ms timeout under a 48-client burst: many requests give up.
		{"timeouts", func(s *scenario.Scenario) { s.Timeout, s.Load.Levels = 200*time.Millisecond, []float64{48} }, true},
		// Prompts longer than the KV cache are rejected by the engine.
		{"too long", func(s *scenario.Scenario) { s.Engine.NumBlocks = 150 }, false},
		{"chat", func(s *scenario.Scenario) {
			s.Workload = scenario.Workload{Kind: scenario.KindChat, Groups: 2, SystemTokens: 500, Turns: 3, QuestionTokens: 50, OutputTokens: 40}
		}, false},
		{"uniform open", func(s *scenario.Scenario) {
			s.Workload = scenario.Workload{Kind: scenario.KindUniform, QuestionTokens: 300, OutputTokens: 40, Jitter: 0.5}
			s.Load = scenario.Load{Mode: scenario.ModeOpen, Levels: []float64{20}}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := smallScenario(t)
			tt.mutate(sc)
			if err := sc.Validate(); err != nil {
				t.Fatal(err)
			}
			for _, p := range allPolicies(t) {
				r, err := Run(RunConfig{Scenario: sc, Policy: p, Level: sc.Load.Levels[0], Seed: 7})
				if err != nil {
					t.Fatalf("%s: %v", p.Name, err)
				}
				if r.Issued == 0 {
					t.Fatalf("%s: no requests issued", p.Name)
				}
				if got := r.Completed + r.Failed + r.TimedOut; got != r.Issued {
					t.Errorf("%s: completed %d + failed %d + timed out %d = %d, issued %d",
						p.Name, r.Completed, r.Failed, r.TimedOut, got, r.Issued)
				}
				if tt.wantTimeouts && r.TimedOut == 0 {
					t.Errorf("%s: no timeouts with a 200 ms timeout", p.Name)
				}
				if sc.Engine.NumBlocks == 150 && r.Failed == 0 {
					t.Errorf("%s: prompts longer than the KV cache did not fail", p.Name)
				}
				// Every measured request is in the percentiles, a miss at
				// the client timeout.
				if len(r.TTFT) != r.Measured || len(r.E2E) != r.Measured {
					t.Errorf("%s: %d TTFTs, %d E2Es for %d measured", p.Name, len(r.TTFT), len(r.E2E), r.Measured)
				}
				if r.Misses != r.MeasuredFailed+r.MeasuredTimedOut {
					t.Errorf("%s: misses %d, want failed %d + timed out %d", p.Name, r.Misses, r.MeasuredFailed, r.MeasuredTimedOut)
				}
				if to := float64(sc.Timeout) / 1e6; r.Misses > 0 && r.E2E[len(r.E2E)-1] != to {
					t.Errorf("%s: %d misses, slowest E2E %v ms; want the timeout, %v ms", p.Name, r.Misses, r.E2E[len(r.E2E)-1], to)
				}
				// More misses than 1 % of the requests put E2E p99 at the
				// timeout: a collapsing policy cannot read fast.
				if to := float64(sc.Timeout) / 1e6; float64(r.Misses) > 0.01*float64(r.Measured) && report.Percentile(r.E2E, 99) != to {
					t.Errorf("%s: %d of %d missed, E2E p99 %v ms; want the timeout, %v ms", p.Name, r.Misses, r.Measured, report.Percentile(r.E2E, 99), to)
				}
				if r.Good > r.Measured-r.Misses {
					t.Errorf("%s: %d within SLO, but only %d of %d measured completed", p.Name, r.Good, r.Measured-r.Misses, r.Measured)
				}
			}
		})
	}
}

func TestDeterminism(t *testing.T) {
	sc := smallScenario(t)
	cfg := SweepConfig{Scenario: sc, Policies: allPolicies(t), Seed: 3, Seeds: 1, Parallel: 2}
	a, err := RunSweep(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Parallel = 1
	b, err := RunSweep(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.GoldenSummary() != b.GoldenSummary() {
		t.Errorf("same seeds, different results:\n%s\nvs\n%s", a.GoldenSummary(), b.GoldenSummary())
	}
	// Another seed must change the outcome (else the seed is unused).
	cfg.Seed, cfg.Policies = 4, cfg.Policies[len(cfg.Policies)-1:]
	c, err := RunSweep(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	last := len(a.Policies) - 1
	ra, rc := a.Runs[0][last][0], c.Runs[0][0][0]
	if ra.Policy != rc.Policy {
		t.Fatalf("compared %s with %s", ra.Policy, rc.Policy)
	}
	if ra.Issued == rc.Issued && slices.Equal(ra.TTFT, rc.TTFT) {
		t.Error("seeds 3 and 4 gave identical results; the seed is not used")
	}
}

func TestGoldenSummary(t *testing.T) {
	sw, err := RunSweep(context.Background(), SweepConfig{Scenario: smallScenario(t), Policies: allPolicies(t), Seed: 1, Seeds: 1, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := sw.GoldenSummary()
	path := filepath.Join("testdata", "golden_summary.txt")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./sim -run TestGoldenSummary -update)", err)
	}
	if got != string(want) {
		t.Errorf("summary changed (if intended, rerun with -update):\ngot:\n%s\nwant:\n%s", got, want)
	}
}

// TestAdaptiveReactsToHerd plays the shipped hot-prefix-burst scenario at
// 64 clients: under the profile's weights the burst's hot prefix loads its
// holders unevenly, so the loop must enter rebalance in the burst, never
// in the calm phases, and beat the same profile with the loop off on the
// burst's E2E p99 and output tokens per second.
func TestAdaptiveReactsToHerd(t *testing.T) {
	sc, err := LoadScenario("hot-prefix-burst")
	if err != nil {
		t.Fatal(err)
	}
	pols, _ := Policies([]string{PolicyAdaptive, PolicyAdaptiveOff})
	var res [2]*Result
	for i, p := range pols {
		if res[i], err = Run(RunConfig{Scenario: sc, Policy: p, Level: 64, Seed: 1}); err != nil {
			t.Fatal(err)
		}
	}
	ad, off := res[0], res[1]
	for _, ph := range ad.Phases {
		calm := strings.HasPrefix(ph.Name, "calm")
		if calm && ph.RebalanceEntries != 0 {
			t.Errorf("phase %s: %d rebalance entries in a calm phase", ph.Name, ph.RebalanceEntries)
		}
		if !calm && ph.RebalanceEntries == 0 {
			t.Errorf("phase %s: the loop never left calm during the burst", ph.Name)
		}
	}
	if ad.Freezes != 0 {
		t.Errorf("watchdog tripped %d times", ad.Freezes)
	}
	a, o := report.Percentile(ad.Phases[1].E2E, 99), report.Percentile(off.Phases[1].E2E, 99)
	if !(a < o) {
		t.Errorf("burst E2E p99: adaptive %.1f ms, adaptive-off %.1f ms; want adaptive lower", a, o)
	}
	if a, o := ad.Phases[1].OutputTokensPerSec, off.Phases[1].OutputTokensPerSec; !(a > o) {
		t.Errorf("burst output tokens/s: adaptive %.0f, adaptive-off %.0f; want adaptive higher", a, o)
	}
}

func TestTraceReplay(t *testing.T) {
	sc, err := LoadScenario(filepath.Join("testdata", "trace-small.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pols, _ := Policies([]string{PolicyRoundRobin, PolicyStatic322})
	for _, p := range pols {
		r, err := Run(RunConfig{Scenario: sc, Policy: p, Level: 4, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		// 40 lines, replayed 4× faster than their 3 s spacing: all issued
		// within the 60 s run.
		if r.Issued != 40 {
			t.Errorf("%s: issued %d, want the 40 trace lines", p.Name, r.Issued)
		}
		if r.Completed+r.Failed+r.TimedOut != r.Issued {
			t.Errorf("%s: requests lost", p.Name)
		}
		// Every line starts with hash id 0: the same 512 tokens, so some
		// prompt tokens must hit the cache.
		if r.PrefixHitRate <= 0 {
			t.Errorf("%s: prefix hit rate %v, want > 0 (hash id 0 is shared)", p.Name, r.PrefixHitRate)
		}
	}
}

func TestShippedScenariosValid(t *testing.T) {
	names := Shipped()
	if len(names) < 5 {
		t.Fatalf("shipped scenarios %v, want at least 5", names)
	}
	for _, n := range names {
		if _, err := ShippedScenario(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

func TestScenarioErrors(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{"name: x\nduration: 0s\nworkload: {kind: uniform, question_tokens: 1, output_tokens: 1}\nload: {levels: [1]}", "duration: must be > 0"},
		{"name: x\nduration: 1m\nworkload: {kind: nope}\nload: {levels: [1]}", `workload.kind: "nope"`},
		{"name: x\nduration: 1m\nworkload: {kind: uniform, question_tokens: 1, output_tokens: 1}\nload: {levels: [1.5]}", "load.levels[0]: a concurrency must be a whole number"},
		{"name: x\nduration: 1m\nbogus: 1\n", "field bogus not found"},
		{"name: x\nduration: 1m\nworkload: {kind: uniform, question_tokens: 1, output_tokens: 1}\nload: {levels: [1]}\npolicies: [fastest]", `policies[0]: unknown policy "fastest"`},
		{"name: x\nduration: 1m\nworkload: {kind: uniform, question_tokens: 1, output_tokens: 1}\nengine: {num_blocks: -1}\nload: {levels: [1]}", "engine.num_blocks: must be > 0"},
		{"name: x\nduration: 1m\nworkload: {kind: uniform, question_tokens: 1, output_tokens: 1}\nload: {levels: [1], arrivals: constant}", "load.arrivals: constant applies to load.mode open only"},
		{"name: x\nduration: 1m\nworkload: {kind: uniform, question_tokens: 1, output_tokens: 1}\nload: {mode: open, levels: [1], arrivals: bursty}", `load.arrivals: "bursty"`},
		{"name: x\nduration: 1m\nworkload: {kind: shared-prefix, groups: 1, prompts_per_group: 1, question_tokens: 1, output_tokens: 1, order: sorted}\nload: {levels: [1]}", `workload.order: "sorted"`},
		{"name: x\nduration: 1m\nworkload: {kind: shared-prefix, groups: 1, prompts_per_group: 1, question_tokens: 1, output_tokens: 1, order: group-major, hot_fraction: 0.5, hot_system_tokens: 10}\nload: {levels: [1]}", "workload.order: group-major takes no hot_fraction"},
	}
	for _, tt := range tests {
		_, err := ParseScenario([]byte(tt.yaml), "")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseScenario(%q) = %v, want an error containing %q", tt.yaml, err, tt.want)
		}
	}
}

func TestReportAndPlots(t *testing.T) {
	sw, err := RunSweep(context.Background(), SweepConfig{Scenario: smallScenario(t), Policies: allPolicies(t), Seed: 1, Seeds: 1, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := sw.WriteMarkdown(&b, "img/", "trimtab sim --scenario small"); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{"## small", "| static-3-2-2 |", "| adaptive |", "Adaptive against the best policy", "![", "trimtab sim --scenario small"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	dir := t.TempDir()
	if err := sw.WriteImages(dir); err != nil {
		t.Fatal(err)
	}
	for _, img := range sw.Images() {
		st, err := os.Stat(filepath.Join(dir, img.File))
		if err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v (size %v)", img.File, err, st)
		}
	}
}

// BenchmarkRun is the simulator's speed target: 16 servers at concurrency
// 125 on the hot-prefix workload, per simulated minute.
func BenchmarkRun(b *testing.B) {
	sc, err := ShippedScenario("hot-prefix-burst")
	if err != nil {
		b.Fatal(err)
	}
	sc.Duration, sc.Warmup, sc.Load.Burst = time.Minute, 0, nil
	for _, name := range []string{PolicyStatic322, PolicyAdaptive} {
		p, _ := Policies([]string{name})
		b.Run("servers=16/concurrency=125/minute/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Run(RunConfig{Scenario: sc, Policy: p[0], Level: 125, Seed: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// pendingProbe is a test scorer that records, at every decision, whether
// some endpoint had requests in flight but no pending prefill — which
// happens only if the driver releases prompts at their first token
// (Decision.FirstByte) rather than at Done.
type pendingProbe struct {
	decisions      int
	decodingOnly   int   // decisions where some endpoint was only decoding
	maxPending     int64 // largest PendingPrefill seen on one endpoint
	negativeOrLeak bool  // a negative count, or pending with nothing in flight
}

func (*pendingProbe) Category() scheduler.Category { return scheduler.CategoryNone }

func (p *pendingProbe) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	p.decisions++
	only := false
	for i, e := range eps {
		out[i] = 0
		pp, inf := e.PendingPrefill(), e.InFlight()
		p.maxPending = max(p.maxPending, pp)
		if pp < 0 || (pp > 0 && inf == 0) {
			p.negativeOrLeak = true
		}
		if inf > 0 && pp == 0 {
			only = true
		}
	}
	if only {
		p.decodingOnly++
	}
}

func TestFirstByteReleasesPendingPrefill(t *testing.T) {
	probe := &pendingProbe{}
	var sched *scheduler.Scheduler
	pol := Policy{Name: "probe", Build: func(seed uint64, _ *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
		cfg := scheduler.DefaultConfig()
		cfg.Seed = seed
		s, err := scheduler.New(cfg, []scheduler.ScorerEntry{{Name: "probe", Type: "probe", Scorer: probe, Weight: 1}}, nil, scheduler.MaxScore{}, scheduler.Deps{})
		sched = s
		return s, nil, err
	}}
	sc := smallScenario(t)
	r, err := Run(RunConfig{Scenario: sc, Policy: pol, Level: sc.Load.Levels[0], Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	// Requests decode 60 tokens (≈ 30 steps) after a one- or two-step
	// prefill, so a pod that holds only decoding requests is the common
	// case; with the prompts released only at Done it could never occur.
	if probe.decodingOnly == 0 {
		t.Errorf("%d decisions, none saw an endpoint with requests in flight and no pending prefill: first tokens do not release prompts", probe.decisions)
	}
	if probe.maxPending == 0 {
		t.Error("pending prefill never counted")
	}
	if probe.negativeOrLeak {
		t.Error("pending prefill went negative or stayed with nothing in flight")
	}
	if r.Completed == 0 {
		t.Fatal("nothing completed")
	}
	for _, e := range sched.Pool().Pointers() {
		if e.PendingPrefill() != 0 || e.InFlight() != 0 {
			t.Errorf("%s after the run: pending prefill %d, in flight %d, want 0 and 0", e.Address, e.PendingPrefill(), e.InFlight())
		}
	}
}

// TestTracePhases replays the shipped Mooncake trace split into two named
// phases: every phase renders from the one trace, in trace order, so the
// run issues exactly the entries before 60 s of trace time (162: 87 in the
// first 30 s, 75 in the next) and reports requests in both phases.
func TestTracePhases(t *testing.T) {
	sc, err := ParseScenario([]byte(`
name: trace-phases
duration: 60s
servers: 4
timeout: 120s
workload:
  kind: trace
  trace: scenarios/data/mooncake_conversation_trace.jsonl.gz
  trace_tokens_per_id: 512
load:
  mode: trace
  levels: [1]
phases:
  - {name: first, duration: 30s}
  - {name: second, duration: 30s}
`), ".")
	if err != nil {
		t.Fatal(err)
	}
	pols, _ := Policies([]string{PolicyRoundRobin})
	r, err := Run(RunConfig{Scenario: sc, Policy: pols[0], Level: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Issued != 162 {
		t.Errorf("issued %d, want the 162 trace entries before 60 s", r.Issued)
	}
	if r.Completed+r.Failed+r.TimedOut != r.Issued {
		t.Errorf("requests lost: %d completed + %d failed + %d timed out ≠ %d issued", r.Completed, r.Failed, r.TimedOut, r.Issued)
	}
	if got := []int{r.Phases[0].Measured, r.Phases[1].Measured}; got[0] != 87 || got[1] != 75 {
		t.Errorf("measured per phase %v, want [87 75] (entries before 30 s, then the rest)", got)
	}
}

// TestTraceUnknownOutput: an entry with output_length 0 (unknown, as
// trimtab serve records them) replays with workload.output_tokens; a
// scenario without it is refused naming the setting.
func TestTraceUnknownOutput(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.jsonl")
	if err := os.WriteFile(trace, []byte(`{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [0, 1]}
{"timestamp": 10, "input_length": 100, "output_length": 7, "hash_ids": [0]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := func(extra string) string {
		return "name: t\nduration: 1s\nservers: 1\nload:\n  levels: [1]\nworkload:\n  kind: trace\n  trace: t.jsonl\n" + extra
	}
	sc, err := ParseScenario([]byte(yaml("")), dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.NewGenerator(sc, &sc.Workload, 1, ""); err == nil || !strings.Contains(err.Error(), "workload.output_tokens") {
		t.Errorf("no output_tokens: %v; want an error naming workload.output_tokens", err)
	}
	sc, err = ParseScenario([]byte(yaml("  output_tokens: 123\n")), dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := scenario.NewGenerator(sc, &sc.Workload, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	var r scenario.Request
	for i, want := range []int{123, 7} { // unknown → output_tokens; known kept
		g.Next(nil, 0, &r)
		if r.Out.Tokens != want {
			t.Errorf("entry %d: output %d tokens, want %d", i, r.Out.Tokens, want)
		}
	}
}
