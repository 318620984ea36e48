package sim

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim/scenario"
)

func mustPolicy(t *testing.T, name string) Policy {
	t.Helper()
	p, ok := builtinPolicy(name)
	if !ok {
		t.Fatalf("no policy %s", name)
	}
	return p
}

func shippedScaled(t *testing.T, name string, d time.Duration) *scenario.Scenario {
	t.Helper()
	sc, err := ShippedScenario(name)
	if err != nil {
		t.Fatal(err)
	}
	return sc.Scaled(d)
}

// A run through the flow controller conserves requests overall and per
// class, releases every lease (each router's ledger ends at zero), and
// is deterministic.
func TestFlowRunConservesAndReleases(t *testing.T) {
	sc := shippedScaled(t, "batch-interference", time.Minute)
	cfg := RunConfig{Scenario: sc, Policy: mustPolicy(t, PolicyAdaptiveFlow), Level: 15, Seed: 1}
	var runs []*Result
	for range 2 {
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, res)
	}
	res := runs[0]
	if res.Completed+res.Failed+res.TimedOut != res.Issued {
		t.Fatalf("completed %d + failed %d + timed out %d != issued %d", res.Completed, res.Failed, res.TimedOut, res.Issued)
	}
	names := []string{"interactive", "batch-1", "batch-2", "batch-3"}
	if len(res.Classes) != len(names) {
		t.Fatalf("classes %d, want %v", len(res.Classes), names)
	}
	issued := 0
	for i, c := range res.Classes {
		if c.Name != names[i] {
			t.Errorf("class %d: %s, want %s", i, c.Name, names[i])
		}
		if c.Completed+c.Dropped+c.TimedOut+c.Failed != c.Issued {
			t.Errorf("%s: completed %d + dropped %d + timed out %d + failed %d != issued %d", c.Name, c.Completed, c.Dropped, c.TimedOut, c.Failed, c.Issued)
		}
		if c.Measured != c.Requests() {
			t.Errorf("%s: measured %d, latencies of %d", c.Name, c.Measured, c.Requests())
		}
		issued += c.Issued
	}
	if issued != res.Issued {
		t.Errorf("classes issued %d, run issued %d", issued, res.Issued)
	}
	if res.Classes[1].Issued == 0 {
		t.Error("batch-1 issued nothing")
	}
	if !reflect.DeepEqual(runs[0].Summary(), runs[1].Summary()) {
		t.Error("two runs of one RunConfig differ")
	}
}

// TestStreamJobIssuesAll: a closed-loop stream with requests is a job and
// issues every one of them even when the run's duration ends first (the
// batch-interference scenario scaled to one minute holds the jobs in the
// router for longer than that); the interactive stream stops at the end.
func TestStreamJobIssuesAll(t *testing.T) {
	sc := shippedScaled(t, "batch-interference", time.Minute)
	res, err := Run(RunConfig{Scenario: sc, Policy: mustPolicy(t, PolicyAdaptiveFlow), Level: 15, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Classes[1:] {
		if c.Issued != 1000 || c.Completed != 1000 {
			t.Errorf("%s: issued %d, completed %d; want all 1000 of the job", c.Name, c.Issued, c.Completed)
		}
	}
	if i := res.Classes[0]; i.Issued > 15*60*3/2 {
		t.Errorf("interactive issued %d in a one-minute run at 15 req/s", i.Issued)
	}
}

// Every lease is released: after a run, each flow controller's ledger
// holds no tokens and its queue is empty.
func TestFlowLedgerEmptyAfterRun(t *testing.T) {
	sc := shippedScaled(t, "overload-open", 40*time.Second)
	r := &runner{cfg: RunConfig{Scenario: sc, Policy: mustPolicy(t, PolicyAdaptiveFlow), Level: 88, Seed: 2}}
	res, err := runWith(r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Classes[0].Dropped == 0 {
		t.Fatal("the overload dropped nothing: flow control never queued")
	}
	for _, rt := range r.routers {
		if rt.flow == nil {
			t.Fatal("adaptive-flow built no flow controller")
		}
		if n := rt.flow.Len(); n != 0 {
			t.Errorf("%s: %d requests still queued", rt.name, n)
		}
		for _, e := range rt.sched.Pool().Pointers() {
			if l := rt.flow.Load(e.Address); l != 0 {
				t.Errorf("%s: %s's ledger holds %d tokens after the run", rt.name, e.Address, l)
			}
		}
	}
}

// The Done-when of the open-loop overload, shortened: goodput with flow
// control is at least 1.2 × without.
func TestFlowOverloadGoodput(t *testing.T) {
	if testing.Short() {
		t.Skip("two 90 s runs")
	}
	sc := shippedScaled(t, "overload-open", 90*time.Second)
	good := map[string]float64{}
	for _, p := range []string{PolicyAdaptive, PolicyAdaptiveFlow} {
		res, err := Run(RunConfig{Scenario: sc, Policy: mustPolicy(t, p), Level: 88, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		good[p] = res.Goodput
	}
	if !(good[PolicyAdaptiveFlow] >= 1.2*good[PolicyAdaptive]) || good[PolicyAdaptiveFlow] <= 0 {
		t.Fatalf("goodput with flow %.1f/s, without %.1f/s; want ≥ 1.2×", good[PolicyAdaptiveFlow], good[PolicyAdaptive])
	}
}

func TestStreamValidation(t *testing.T) {
	base := `
name: s
duration: 1m
servers: 2
workload: {kind: uniform, question_tokens: 10, output_tokens: 10}
load: {mode: open, levels: [1]}
`
	for _, tc := range []struct{ yaml, want string }{
		{"streams: [{name: b, concurrency: 2, rate: 1, workload: {kind: uniform, question_tokens: 1, output_tokens: 1}}]", "streams[0].concurrency, rate: set exactly one"},
		{"streams: [{name: b, rate: 1, start: 2m, workload: {kind: uniform, question_tokens: 1, output_tokens: 1}}]", "streams[0].start"},
		{"streams: [{name: b, rate: 1, workload: {kind: trace}}]", "streams[0].workload.kind"},
		{"streams: [{name: b, rate: 1, ttl: -1s, workload: {kind: uniform, question_tokens: 1, output_tokens: 1}}]", "streams[0].ttl"},
		{"streams: [{name: b, rate: 1, workload: {kind: uniform, question_tokens: 0, output_tokens: 1}}]", "streams[0].workload.question_tokens"},
	} {
		_, err := ParseScenario([]byte(base+tc.yaml), "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.yaml, err, tc.want)
		}
	}
	if _, err := ParseScenario([]byte(base+"streams: [{name: b, rate: 1, band: sheddable, tenant: t, ttl: 2s, workload: {kind: uniform, question_tokens: 1, output_tokens: 1}}]"), ""); err != nil {
		t.Errorf("a valid stream: %v", err)
	}
}
