package sim

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/sim/scenario"
)

// slowLoopProfile is the shipped adaptive profile with the slow loop in
// apply mode every minute, a budget of 3 vectors and a minimum
// improvement so small that any better vector is applied; its calm
// weights start at a poor vector (scraped queue depth and prefix,
// equal), so the
// replay has something to find.
func slowLoopProfile(t *testing.T) *configs.File {
	t.Helper()
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	f.Retune.Mode, f.Retune.Interval, f.Retune.Timeout = control.RetuneApply, time.Minute, time.Minute
	f.Retune.Budget, f.Retune.MinRequests, f.Retune.MinImprovement = 3, 50, 1e-9
	f.Server.Admin.Record.Enabled = true
	for i := range f.Scorers {
		w := 0.0
		switch f.Scorers[i].Type {
		case "queue":
			w = 1
		case "prefix":
			w = 1
		}
		f.Scorers[i].Weight = &w
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSlowLoopInARun: a profile with retune.mode apply runs the slow loop
// in a simulated run, as serve would: every interval of virtual time on
// the run's own recorded traffic; its steps are in the result and the
// summary; an apply moves the loop's calm weights by at most max_step of
// their total; the run is deterministic (the nested replays too, which
// run no slow loop of their own); and a static policy asked for one is an
// error.
func TestSlowLoopInARun(t *testing.T) {
	scs, err := LoadScenarios([]string{"chat"}, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := slowLoopProfile(t)
	run := func() (*runner, *Result) {
		r := &runner{cfg: RunConfig{Scenario: scs[0], Policy: ProfilePolicy("retune", "", f), Level: 32, Seed: 1}}
		res, err := runWith(r)
		if err != nil {
			t.Fatal(err)
		}
		return r, res
	}
	r, res := run()
	if len(res.Retune) < 2 {
		t.Fatalf("%d slow-loop steps in a 3-minute run with interval 1m, want ≥ 2: %+v", len(res.Retune), res.Retune)
	}
	applied := 0
	for i, st := range res.Retune {
		if st.At != time.Duration(i+1)*time.Minute || st.Reason == "" {
			t.Errorf("step %d: %+v, want one a minute with a reason", i, st)
		}
		if st.Action == control.ActionApply {
			applied++
		}
	}
	if applied == 0 {
		t.Fatalf("no step applied from the queue-only start: %+v", res.Retune)
	}
	got, _, _ := r.ctl.Calm()
	var moved, total float64
	for i, s := range f.Scorers {
		moved += abs(got[i] - *s.Weight)
		total += *s.Weight
	}
	if moved == 0 || moved/2 > float64(applied)*f.Retune.MaxStep*total+1e-9 {
		t.Errorf("calm weights %v after %d applied steps: moved %v of total %v, want 0 < moved/2 ≤ steps × max_step × total", got, applied, moved, total)
	}
	if s := res.Summary(); len(s.Retune) != len(res.Retune) || s.Retune[0].Action != res.Retune[0].Action {
		t.Errorf("summary's retune %+v, result's %+v", s.Retune, res.Retune)
	}
	if _, again := run(); !reflect.DeepEqual(again.Retune, res.Retune) {
		t.Errorf("two runs differ:\n%+v\n%+v", res.Retune, again.Retune)
	}
	rr, _ := builtinPolicy(PolicyRoundRobin)
	static := &runner{cfg: RunConfig{Scenario: scs[0], Policy: rr, Level: 32, Seed: 1, Retune: &f.Retune}}
	if _, err := runWith(static); !errors.Is(err, errRetuneNoLoop) {
		t.Errorf("the slow loop on round robin: %v, want errRetuneNoLoop", err)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestTrafficWindow: the window writes the recorder's Mooncake JSONL —
// times from its first request, input tokens (bytes ÷ 4), the output
// length set at completion, chained 512-token block ids numbered in order
// of first appearance (a shared first block shares its id) — which the
// replay's trace parser reads, and it keeps at most max requests.
func TestTrafficWindow(t *testing.T) {
	block := func(c byte) []byte { return bytes.Repeat([]byte{c}, windowBlockTokens*windowBytesPerToken) }
	w := newTrafficWindow(2)
	a := w.record(10*time.Second, append(block('s'), block('a')...))
	b := w.record(10*time.Second+250*time.Millisecond, append(block('s'), []byte("short question")...))
	if c := w.record(11*time.Second, block('x')); a != 0 || b != 1 || c != -1 {
		t.Fatalf("indexes %d %d %d, want 0 1 -1", a, b, c)
	}
	w.setOutput(b, 80)
	want := `{"timestamp": 0, "input_length": 1024, "output_length": 0, "hash_ids": [0, 1]}
{"timestamp": 250, "input_length": 515, "output_length": 80, "hash_ids": [0, 2]}
`
	if got := string(w.jsonl()); got != want {
		t.Errorf("window:\n%s\nwant:\n%s", got, want)
	}
	sc, err := scenario.FromTraceData("window", w.jsonl(), scenario.TraceConfig{Servers: 2})
	if err != nil || sc == nil {
		t.Fatalf("the replay's parser: %v", err)
	}
}
