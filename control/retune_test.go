package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/configurator"
)

func closeAll(a, b []float64, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > tol {
			return false
		}
	}
	return true
}

// proposal is a hand-made search result: the current vector first, the
// best second.
func proposal(cur, best []float64, curScore, bestScore float64) *Proposal {
	return &Proposal{Candidates: []Scored{{Name: "current", Weights: cur, Score: curScore}, {Name: "search-2", Weights: best, Score: bestScore}}, Current: 0, Best: 1}
}

func TestDecide(t *testing.T) {
	advisory, apply := DefaultRetuneConfig(), DefaultRetuneConfig() // min_improvement 5 %, max_step 10 %
	apply.Mode = RetuneApply
	calm := []float64{2, 2}
	tests := []struct {
		name        string
		cfg         RetuneConfig
		best        []float64
		cur, score  float64
		mode        string
		learned     int
		action      string
		improvement float64
		target, to  []float64
		moved       float64
	}{
		// 0.83 / 0.80 − 1 = 3.75 % ≤ 5 %.
		{"below threshold", apply, []float64{3, 1}, 0.80, 0.83, "calm", 1, ActionKeep, 0.0375, nil, nil, 0},
		// 0.85 / 0.80 − 1 = 6.25 % > 5 %; advisory changes nothing.
		{"advisory", advisory, []float64{3, 1}, 0.80, 0.85, "calm", 1, ActionPropose, 0.0625, []float64{3, 1}, nil, 0},
		// Distance Σ|Δ| / (2·4) = (1 + 1) / 8 = 0.25 > 0.1: α = 0.1 / 0.25
		// = 0.4, to = 2 ± 0.4 × 1 = 2.4, 1.6.
		{"bounded step", apply, []float64{3, 1}, 0.80, 0.85, "calm", 1, ActionApply, 0.0625, []float64{3, 1}, []float64{2.4, 1.6}, 0.1},
		// Best 6, 2 (total 8) scaled to the calm total 4: 3, 1; same step.
		{"scaled target", apply, []float64{6, 2}, 0.80, 0.85, "static", 1, ActionApply, 0.0625, []float64{3, 1}, []float64{2.4, 1.6}, 0.1},
		// Distance (0.2 + 0.2) / 8 = 0.05 ≤ 0.1: the target is reached.
		{"small step", apply, []float64{2.2, 1.8}, 0.80, 0.85, "calm", 1, ActionApply, 0.0625, []float64{2.2, 1.8}, []float64{2.2, 1.8}, 0.05},
		{"rebalance holds", apply, []float64{3, 1}, 0.80, 0.85, configurator.ModeRebalance, 1, ActionHold, 0.0625, []float64{3, 1}, nil, 0},
		{"frozen holds", apply, []float64{3, 1}, 0.80, 0.85, configurator.ModeFrozen, 1, ActionHold, 0.0625, []float64{3, 1}, nil, 0},
		{"prior engine holds", apply, []float64{3, 1}, 0.80, 0.85, "calm", 0, ActionHold, 0.0625, []float64{3, 1}, nil, 0},
		// Current score 0 is floored at 0.001: 0.5 / 0.001 − 1 = 499.
		{"current failed", advisory, []float64{3, 1}, 0, 0.5, "calm", 1, ActionPropose, 499, []float64{3, 1}, nil, 0},
	}
	for _, tt := range tests {
		d := Decide(tt.cfg, RetuneInput{Calm: calm, Proposal: proposal(calm, tt.best, tt.cur, tt.score), LoopMode: tt.mode, EngineLearned: tt.learned})
		if d.Action != tt.action || math.Abs(d.Improvement-tt.improvement) > 1e-9 || !closeAll(d.Target, tt.target, 1e-9) ||
			!closeAll(d.To, tt.to, 1e-9) || math.Abs(d.Moved-tt.moved) > 1e-9 || d.Reason == "" {
			t.Errorf("%s: %+v\nwant action %s, improvement %v, target %v, to %v, moved %v", tt.name, d, tt.action, tt.improvement, tt.target, tt.to, tt.moved)
		}
	}
	// The current vector is the best: keep, whatever the scores say.
	p := proposal(calm, []float64{3, 1}, 0.9, 0.5)
	p.Best = 0
	if d := Decide(apply, RetuneInput{Calm: calm, Proposal: p, LoopMode: "calm", EngineLearned: 1}); d.Action != ActionKeep {
		t.Errorf("current best: %+v, want keep", d)
	}
}

func TestRetuneConfigValidate(t *testing.T) {
	if err := DefaultRetuneConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct {
		key string
		set func(*RetuneConfig)
	}{
		{"retune.mode", func(c *RetuneConfig) { c.Mode = "on" }},
		{"retune.interval", func(c *RetuneConfig) { c.Interval = 59 * time.Second }},
		{"retune.interval", func(c *RetuneConfig) { c.Interval = 25 * time.Hour }},
		{"retune.min_requests", func(c *RetuneConfig) { c.MinRequests = 0 }},
		{"retune.min_requests", func(c *RetuneConfig) { c.MinRequests = c.MaxRequests + 1 }},
		{"retune.max_requests", func(c *RetuneConfig) { c.MaxRequests = 100_001 }},
		{"retune.budget", func(c *RetuneConfig) { c.Budget = 1 }},
		{"retune.budget", func(c *RetuneConfig) { c.Budget = 101 }},
		{"retune.seeds", func(c *RetuneConfig) { c.Seeds = 9 }},
		{"retune.timeout", func(c *RetuneConfig) { c.Timeout = c.Interval + time.Second }},
		{"retune.timeout", func(c *RetuneConfig) { c.Timeout = 0 }},
		{"retune.min_improvement", func(c *RetuneConfig) { c.MinImprovement = 0 }},
		{"retune.min_improvement", func(c *RetuneConfig) { c.MinImprovement = math.NaN() }},
		{"retune.max_step", func(c *RetuneConfig) { c.MaxStep = 1.5 }},
	}
	for _, tt := range tests {
		c := DefaultRetuneConfig()
		tt.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("%+v: %v, want an error naming %s", c, err, tt.key)
		}
	}
}

// fakeTuner returns its proposal and keeps the window it was given.
type fakeTuner struct {
	p      *Proposal
	err    error
	during func() // runs inside Propose
	got    *Window
}

func (f *fakeTuner) Propose(ctx context.Context, w *Window) (*Proposal, error) {
	f.got = w
	if f.during != nil {
		f.during()
	}
	if f.err != nil {
		return nil, f.err
	}
	return f.p, nil
}

// fakeSource hands out a fixed window of n requests.
type fakeSource struct {
	n, endpoints, learned int
	err                   error
	takes                 int
}

func (f *fakeSource) TakeWindow() ([]byte, int, error) {
	f.takes++
	if f.err != nil {
		return nil, 0, f.err
	}
	var b bytes.Buffer
	for i := range f.n {
		b.WriteString(`{"timestamp": ` + strconv.Itoa(i) + `, "input_length": 100, "output_length": 0, "hash_ids": [0]}` + "\n")
	}
	return b.Bytes(), f.endpoints, nil
}

func (f *fakeSource) Engine() ([]byte, int) { return []byte("block_size: 16\n"), f.learned }

// TestRetuneStep drives the slow loop over a real loop and scheduler with
// hand-made proposals: skips with their reasons, advisory, an applied
// bounded step that the loop's next tick installs as its base weights, and
// a step refused because the profile was reloaded during the run.
func TestRetuneStep(t *testing.T) {
	s := target(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l := mustNew(t, adaptive(), s, Deps{Logger: log})
	l.Tick(t0, twoPods(0)) // calm
	calm := []float64{3, 2, 0.5, 2, 1}
	// Best 5, 2, 0.5, 0, 1 (total 8.5, the calm total): distance
	// (2 + 2) / 17 = 0.2353 > 0.1, α = 0.1 / 0.2353 = 0.425: prefix
	// 3 + 0.425·2 = 3.85, kv 2 − 0.85 = 1.15.
	best := []float64{5, 2, 0.5, 0, 1}
	moved := []float64{3.85, 2, 0.5, 1.15, 1}
	tuner := &fakeTuner{p: proposal(calm, best, 0.8, 0.9)}
	src := &fakeSource{err: errors.New("traffic recording is off")}
	reg := prometheus.NewRegistry()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	clk := clocktesting.NewFakeClock(t0)
	cfg := DefaultRetuneConfig()
	cfg.MinRequests, cfg.MaxRequests = 5, 6
	r, err := NewRetune(cfg, l, tuner, src, RetuneDeps{Clock: clk, Registerer: reg, Logger: log, Tracer: tp.Tracer("test")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	if rep := r.Step(ctx, t0); rep.Decision.Action != ActionSkip || !strings.Contains(rep.Decision.Reason, "recording is off") || tuner.got != nil {
		t.Errorf("no window: %+v (tuner ran: %v)", rep.Decision, tuner.got != nil)
	}
	src.err, src.n, src.endpoints = nil, 3, 2
	if rep := r.Step(ctx, t0); rep.Decision.Action != ActionSkip || !strings.Contains(rep.Decision.Reason, "3 requests, fewer than min_requests 5") {
		t.Errorf("small window: %+v", rep.Decision)
	}
	// Advisory: 10 requests cut to max_requests 6; 0.9 / 0.8 − 1 = 12.5 %.
	src.n = 10
	rep := r.Step(ctx, t0)
	if rep.Decision.Action != ActionPropose || math.Abs(rep.Decision.Improvement-0.125) > 1e-9 || rep.Decision.To != nil {
		t.Errorf("advisory: %+v", rep.Decision)
	}
	if w := tuner.got; w.Requests != 6 || bytes.Count(w.Trace, []byte("\n")) != 6 || w.Endpoints != 2 || !slices.Equal(w.Calm, calm) ||
		w.Budget != cfg.Budget || w.Seeds != cfg.Seeds || !w.Adaptive.Enabled {
		t.Errorf("window handed to the retuner: requests %d, lines %d, endpoints %d, calm %v, budget %d, seeds %d",
			w.Requests, bytes.Count(w.Trace, []byte("\n")), w.Endpoints, w.Calm, w.Budget, w.Seeds)
	}
	if base := l.BaseWeights(); !slices.Equal(base, calm) {
		t.Errorf("advisory changed the base weights to %v", base)
	}
	if src.takes != 3 {
		t.Errorf("the window was taken %d times, want once per run (3)", src.takes)
	}

	// Apply, but the calibrator has learned nothing: hold.
	cfg.Mode = RetuneApply
	r, err = NewRetune(cfg, l, tuner, src, RetuneDeps{Clock: clk, Logger: log, Tracer: tp.Tracer("test")})
	if err != nil {
		t.Fatal(err)
	}
	if rep := r.Step(ctx, t0); rep.Decision.Action != ActionHold || !strings.Contains(rep.Decision.Reason, "learned no endpoint") {
		t.Errorf("prior engine: %+v", rep.Decision)
	}
	// Apply: the bounded step is queued and the next tick installs it.
	src.learned = 2
	rep = r.Step(ctx, t0)
	if rep.Decision.Action != ActionApply || !closeAll(rep.Decision.To, moved, 1e-9) || math.Abs(rep.Decision.Moved-0.1) > 1e-9 {
		t.Fatalf("apply: %+v, want to %v", rep.Decision, moved)
	}
	l.Tick(t0.Add(tick), twoPods(0))
	if base := l.BaseWeights(); !closeAll(base, moved, 1e-9) {
		t.Errorf("base weights after the tick: %v, want %v", base, moved)
	}
	if !strings.Contains(logs.String(), `msg="control loop reconfigured"`) || !strings.Contains(logs.String(), "reason=\"retune: best search-2") {
		t.Errorf("the reload's log line does not carry the retune's reason:\n%s", logs.String())
	}
	// The next run starts from the moved weights (the fake keeps saying
	// the old calm vector is current; the decision's reference is Calm).
	if rep := r.Step(ctx, t0); !closeAll(rep.Calm, moved, 1e-9) || !closeAll(tuner.got.Calm, moved, 1e-9) {
		t.Errorf("second run's calm weights %v, want %v", rep.Calm, moved)
	}
	l.Tick(t0.Add(2*tick), twoPods(0))

	// An operator's reload during the run wins; the step is refused.
	tuner.during = func() {
		if err := l.Reload(adaptive(), calm); err != nil {
			t.Error(err)
		}
	}
	rep = r.Step(ctx, t0)
	if rep.Decision.Action != ActionRefused || !strings.Contains(rep.Decision.Reason, ErrReloaded.Error()) || rep.Decision.To != nil {
		t.Errorf("reload during the run: %+v", rep.Decision)
	}
	l.Tick(t0.Add(3*tick), twoPods(0))
	if base := l.BaseWeights(); !slices.Equal(base, calm) {
		t.Errorf("base weights %v after the operator's reload, want theirs %v", base, calm)
	}
	tuner.during = nil

	// A replay that overruns, and one that fails.
	tuner.err = context.DeadlineExceeded
	if rep := r.Step(ctx, t0); rep.Decision.Action != ActionSkip || !strings.Contains(rep.Decision.Reason, "retune.timeout") {
		t.Errorf("overrun: %+v", rep.Decision)
	}
	tuner.err = errors.New("engine: bad")
	if rep := r.Step(ctx, t0); rep.Decision.Action != ActionSkip || !strings.Contains(rep.Decision.Reason, "engine: bad") {
		t.Errorf("failure: %+v", rep.Decision)
	}
	tuner.err, tuner.p = nil, &Proposal{Candidates: []Scored{{Weights: []float64{1}}}, Best: 0}
	if rep := r.Step(ctx, t0); rep.Decision.Action != ActionSkip || !strings.Contains(rep.Decision.Reason, "1 weights") {
		t.Errorf("malformed proposal: %+v", rep.Decision)
	}

	// The first registry counted the advisory retune's three runs.
	for action, want := range map[string]float64{ActionSkip: 2, ActionPropose: 1, ActionApply: 0} {
		if got := runs(t, reg, action); got != want {
			t.Errorf("trimtab_retune_runs_total{action=%q} = %v, want %v", action, got, want)
		}
	}
	// Every run was traced with its decision; the applied one with its
	// new weights.
	var applied bool
	for _, sp := range exp.GetSpans().Snapshots() {
		a := spanAttrs(sp)
		if sp.Name() != SpanRetune || a[AttrRetuneAction].AsString() == "" || a[AttrReason].AsString() == "" {
			t.Errorf("span %s %v", sp.Name(), a)
		}
		if a[AttrRetuneAction].AsString() == ActionApply {
			applied = applied || math.Abs(a[AttrWeightPrefix+"prefix"].AsFloat64()-3.85) < 1e-9
		}
	}
	if n := len(exp.GetSpans()); n != 10 || !applied {
		t.Errorf("%d spans (want 10, one per run), applied with prefix 3.85: %v", n, applied)
	}

	// /debug/retune: the latest run and the latest proposal.
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", PathRetune, nil))
	var got struct {
		Config       RetuneConfig
		Last         RetuneReport
		LastProposal RetuneReport `json:"last_proposal"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, rec.Body.String())
	}
	if got.Config.Mode != RetuneApply || got.Last.Decision.Action != ActionSkip || got.LastProposal.Decision.Action != ActionRefused ||
		len(got.LastProposal.Candidates) != 2 || got.LastProposal.Window.Requests != 6 || got.LastProposal.Engine.Learned != 2 {
		t.Errorf("/debug/retune:\n%s", rec.Body.String())
	}
}

// runs returns trimtab_retune_runs_total{action} from reg.
func runs(t *testing.T, reg *prometheus.Registry, action string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "trimtab_retune_runs_total" && m.GetLabel()[0].GetValue() == action {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no trimtab_retune_runs_total{action=%q}", action)
	return 0
}

// TestRetuneRun: Run steps once per interval on the clock, the first one
// an interval after the start, and returns when its context is done; in
// mode off it returns at once.
func TestRetuneRun(t *testing.T) {
	l := mustNew(t, adaptive(), target(t), Deps{})
	clk := clocktesting.NewFakeClock(t0)
	src := &fakeSource{err: errors.New("off")}
	cfg := DefaultRetuneConfig()
	r, err := NewRetune(cfg, l, &fakeTuner{}, src, RetuneDeps{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, clk.HasWaiters)
	if r.Last() != nil {
		t.Error("a run before the first interval")
	}
	clk.Step(cfg.Interval)
	waitFor(t, func() bool { return r.Last() != nil })
	if at := r.Last().At; !at.Equal(t0.Add(cfg.Interval)) {
		t.Errorf("first run at %v, want %v", at, t0.Add(cfg.Interval))
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	cfg.Mode = RetuneOff
	off, err := NewRetune(cfg, l, &fakeTuner{}, src, RetuneDeps{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := off.Run(context.Background()); err != nil || src.takes != 1 {
		t.Errorf("off: Run = %v after %d window takes, want nil at once and none", err, src.takes-1)
	}
}
