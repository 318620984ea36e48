package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"
)

// PathRetune is the admin path of Retune.Handler.
const PathRetune = "/debug/retune"

// SpanRetune is the name of the span recorded for every retune run; its
// attributes carry the decision (AttrRetuneAction, AttrReason, …) and, for
// an applied step, the new base weights (AttrWeightPrefix + name).
const SpanRetune = "trimtab.retune.decision"

// Attribute keys of SpanRetune besides AttrReason and AttrWeightPrefix.
const (
	AttrRetuneAction      = "trimtab.retune.action"
	AttrRetuneImprovement = "trimtab.retune.improvement"
	AttrRetuneRequests    = "trimtab.retune.window_requests"
)

// RetuneSource supplies a run's inputs; cmd implements it over the
// traffic recorder and the calibrator.
type RetuneSource interface {
	// TakeWindow returns the traffic recorded since the previous call as
	// Mooncake JSONL, and the pool size to replay it on, and starts a new
	// recording. An error says why there is none (recording is off).
	TakeWindow() (trace []byte, endpoints int, err error)
	// Engine returns the calibrated engine (the simulator's engine keys,
	// YAML) and how many endpoints' calibration is learned.
	Engine() (engine []byte, learned int)
}

// RetuneDeps are the slow loop's collaborators; all are optional.
type RetuneDeps struct {
	// Clock drives Run's ticker and times runs; nil means the real one.
	Clock clock.WithTicker
	// Registerer receives the trimtab_retune_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger receives one "retune" line per run; nil discards.
	Logger *slog.Logger
	// Tracer, when set, records every run as a SpanRetune span.
	Tracer trace.Tracer
}

// RetuneReport is one run: its inputs, every candidate with its score, and
// the decision with its reason. /debug/retune serves it as JSON.
type RetuneReport struct {
	At             time.Time `json:"at"`
	Mode           string    `json:"mode"`
	ElapsedSeconds float64   `json:"elapsed_seconds"`
	// Window: the replayed requests, the pool size, the trace's bytes.
	Window struct {
		Requests  int `json:"requests"`
		Endpoints int `json:"endpoints"`
		Bytes     int `json:"bytes"`
	} `json:"window"`
	// Engine: endpoints learned, and the engine file replayed on.
	Engine struct {
		Learned int    `json:"learned_endpoints"`
		File    string `json:"file,omitempty"`
	} `json:"engine"`
	Scorers    []string  `json:"scorers"`
	Calm       []float64 `json:"calm,omitempty"`
	Candidates []Scored  `json:"candidates,omitempty"`
	Current    int       `json:"current"`
	Best       int       `json:"best"`
	Invalid    int       `json:"invalid"`
	Decision   Decision  `json:"decision"`
}

// Retune is the slow loop: every Interval it takes the recorded window,
// replays it through the calibrated engine with a bounded search around the
// calm weights (Retuner), decides (Decide) and, in apply mode, queues a
// bounded step through Loop.ReloadCalm, the path a profile reload takes, so
// the fast loop keeps running on top. Every run is logged, traced, counted
// and kept for /debug/retune with its reason.
//
// Run and Step are not safe for concurrent use: one goroutine owns them.
// Last, LastProposal and Handler are safe from any goroutine.
type Retune struct {
	cfg    RetuneConfig
	loop   *Loop
	tuner  Retuner
	src    RetuneSource
	clock  clock.WithTicker
	log    *slog.Logger
	tracer trace.Tracer
	m      *retuneMetrics
	names  []string

	last, proposal atomic.Pointer[RetuneReport]
	skipping       bool // the previous run skipped (its line was logged at Info)
}

// NewRetune builds the slow loop over loop's profile. It fails if cfg is
// invalid or a collaborator is missing.
func NewRetune(cfg RetuneConfig, loop *Loop, tuner Retuner, src RetuneSource, deps RetuneDeps) (*Retune, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if loop == nil || tuner == nil || src == nil {
		return nil, errors.New("control: retune needs a loop, a retuner and a source")
	}
	r := &Retune{cfg: cfg, loop: loop, tuner: tuner, src: src, clock: deps.Clock, log: deps.Logger, tracer: deps.Tracer}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	for _, e := range loop.target.Scorers() {
		r.names = append(r.names, e.Name)
	}
	r.m = newRetuneMetrics(deps.Registerer)
	return r, nil
}

// Last returns the latest run's report, or nil before the first.
func (r *Retune) Last() *RetuneReport { return r.last.Load() }

// LastProposal returns the latest run that evaluated candidates, or nil.
func (r *Retune) LastProposal() *RetuneReport { return r.proposal.Load() }

// Run runs Step every Interval on the clock, the first one Interval after
// the start, until ctx is done; it returns nil then, and at once in mode
// off. A run executes on Run's goroutine: runs never overlap.
func (r *Retune) Run(ctx context.Context) error {
	if r.cfg.Mode == RetuneOff {
		return nil
	}
	r.log.Info("retune started", "mode", r.cfg.Mode, "interval", r.cfg.Interval, "budget", r.cfg.Budget,
		"seeds", r.cfg.Seeds, "max_requests", r.cfg.MaxRequests, "min_improvement", r.cfg.MinImprovement, "max_step", r.cfg.MaxStep)
	tk := r.clock.NewTicker(r.cfg.Interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tk.C():
			r.Step(ctx, now)
		}
	}
}

// Step runs once at now and returns its report (also kept as Last). When
// ctx is done during the replay the run is recorded as skipped.
func (r *Retune) Step(ctx context.Context, now time.Time) *RetuneReport {
	rep := &RetuneReport{At: now, Mode: r.cfg.Mode, Scorers: r.names}
	r.run(ctx, rep)
	rep.ElapsedSeconds = r.clock.Since(now).Seconds()
	r.finish(rep)
	return rep
}

func (r *Retune) run(ctx context.Context, rep *RetuneReport) {
	skip := func(format string, args ...any) {
		rep.Decision = Decision{Action: ActionSkip, Reason: fmt.Sprintf(format, args...)}
	}
	data, eps, err := r.src.TakeWindow()
	if err != nil {
		skip("no traffic window: %v", err)
		return
	}
	data, n := firstLines(data, r.cfg.MaxRequests)
	rep.Window.Requests, rep.Window.Endpoints, rep.Window.Bytes = n, eps, len(data)
	r.m.requests.Set(float64(n))
	if n < r.cfg.MinRequests {
		skip("the window holds %d requests, fewer than min_requests %d", n, r.cfg.MinRequests)
		return
	}
	if eps < 1 {
		skip("the pool has no endpoints to replay on")
		return
	}
	engine, learned := r.src.Engine()
	rep.Engine.Learned, rep.Engine.File = learned, string(engine)
	calm, acfg, gen := r.loop.Calm()
	rep.Calm = calm
	rctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	p, err := r.tuner.Propose(rctx, &Window{Trace: data, Requests: n, Endpoints: eps, Engine: engine, EngineLearned: learned,
		Calm: calm, Adaptive: acfg, Budget: r.cfg.Budget, Seeds: r.cfg.Seeds})
	switch {
	case err != nil && ctx.Err() != nil:
		skip("stopped during the replay")
		return
	case errors.Is(err, context.DeadlineExceeded):
		skip("the replay overran retune.timeout %v; lower retune.budget, retune.seeds or retune.max_requests", r.cfg.Timeout)
		return
	case err != nil:
		skip("the replay failed: %v", err)
		return
	}
	if err := p.check(len(calm)); err != nil {
		skip("the replay returned %v", err)
		return
	}
	rep.Candidates, rep.Current, rep.Best, rep.Invalid = p.Candidates, p.Current, p.Best, p.Invalid
	mode := ""
	if t := r.loop.Last(); t != nil {
		mode = t.Mode
	}
	rep.Decision = Decide(r.cfg, RetuneInput{Calm: calm, Proposal: p, LoopMode: mode, EngineLearned: learned})
	r.m.improvement.Set(rep.Decision.Improvement)
	if rep.Decision.Action == ActionApply {
		if err := r.loop.ReloadCalm(gen, rep.Decision.To, "retune: "+rep.Decision.Reason); err != nil {
			rep.Decision.Action = ActionRefused
			rep.Decision.Reason += "; refused: " + err.Error()
			rep.Decision.To, rep.Decision.Moved = nil, 0
		}
	}
}

// check reports whether p is a well-formed proposal over k scorers.
func (p *Proposal) check(k int) error {
	if p == nil || len(p.Candidates) == 0 {
		return errors.New("no candidates")
	}
	if p.Current < 0 || p.Current >= len(p.Candidates) || p.Best < 0 || p.Best >= len(p.Candidates) {
		return fmt.Errorf("current %d or best %d outside the %d candidates", p.Current, p.Best, len(p.Candidates))
	}
	var sum float64
	for _, v := range p.Candidates[p.Best].Weights {
		sum += v
	}
	if len(p.Candidates[p.Best].Weights) != k || !(sum > 0) {
		return fmt.Errorf("a best vector of %d weights summing to %v, want %d summing to > 0", len(p.Candidates[p.Best].Weights), sum, k)
	}
	return nil
}

// firstLines returns data cut after its first n non-blank lines and how
// many it kept.
func firstLines(data []byte, n int) ([]byte, int) {
	kept, off := 0, 0
	for off < len(data) && kept < n {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			end = len(data) - off - 1
		}
		if len(bytes.TrimSpace(data[off:off+end+1])) > 0 {
			kept++
		}
		off += end + 1
	}
	return data[:off], kept
}

// finish keeps, counts, logs and traces a finished run.
func (r *Retune) finish(rep *RetuneReport) {
	r.last.Store(rep)
	if len(rep.Candidates) > 0 {
		r.proposal.Store(rep)
	}
	d := &rep.Decision
	r.m.runs[d.Action].Inc()
	r.m.duration.Set(rep.ElapsedSeconds)
	level := slog.LevelInfo
	if d.Action == ActionSkip && r.skipping {
		level = slog.LevelDebug // the first skip of a run of them is at Info
	}
	r.skipping = d.Action == ActionSkip
	attrs := []any{"mode", rep.Mode, "action", d.Action, "reason", d.Reason, "requests", rep.Window.Requests,
		"learned_endpoints", rep.Engine.Learned, "elapsed", time.Duration(rep.ElapsedSeconds * float64(time.Second))}
	if len(rep.Candidates) > 0 {
		attrs = append(attrs, "improvement", d.Improvement, "evaluated", len(rep.Candidates),
			slog.Group("best", named(r.names, rep.Candidates[rep.Best].Weights)...))
	}
	if d.To != nil {
		attrs = append(attrs, slog.Group("old", named(r.names, rep.Calm)...), slog.Group("new", named(r.names, d.To)...))
	}
	r.log.Log(context.Background(), level, "retune", attrs...)
	r.trace(rep)
}

func named(names []string, v []float64) []any {
	out := make([]any, 0, len(v))
	for i, x := range v {
		if i < len(names) {
			out = append(out, slog.Float64(names[i], x))
		}
	}
	return out
}

func (r *Retune) trace(rep *RetuneReport) {
	if r.tracer == nil {
		return
	}
	_, span := r.tracer.Start(context.Background(), SpanRetune,
		trace.WithNewRoot(), trace.WithTimestamp(rep.At), trace.WithSpanKind(trace.SpanKindInternal))
	end := rep.At.Add(time.Duration(rep.ElapsedSeconds * float64(time.Second)))
	if !span.IsRecording() {
		span.End(trace.WithTimestamp(end))
		return
	}
	d := &rep.Decision
	span.SetAttributes(attribute.String(AttrRetuneAction, d.Action), attribute.String(AttrReason, d.Reason),
		attribute.Float64(AttrRetuneImprovement, d.Improvement), attribute.Int(AttrRetuneRequests, rep.Window.Requests))
	for i, v := range d.To {
		if i < len(r.names) {
			span.SetAttributes(attribute.Float64(AttrWeightPrefix+r.names[i], v))
		}
	}
	if d.Action == ActionRefused {
		span.SetStatus(codes.Error, d.Reason)
	}
	span.End(trace.WithTimestamp(end))
}

// Handler serves PathRetune: the configuration, the latest run and the
// latest run that evaluated candidates, as JSON.
func (r *Retune) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Config       RetuneConfig  `json:"config"`
			Last         *RetuneReport `json:"last"`
			LastProposal *RetuneReport `json:"last_proposal"`
		}{r.cfg, r.Last(), r.LastProposal()})
	})
}

// retuneMetrics are the slow loop's metrics.
type retuneMetrics struct {
	runs                            map[string]prometheus.Counter
	improvement, duration, requests prometheus.Gauge
}

func newRetuneMetrics(reg prometheus.Registerer) *retuneMetrics {
	m := &retuneMetrics{
		runs: map[string]prometheus.Counter{},
		improvement: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_retune_improvement_ratio",
			Help: "Best replayed vector's score over the current calm weights' score, less 1, at the latest run that evaluated candidates.",
		}),
		duration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_retune_run_duration_seconds",
			Help: "Wall time of the latest retune run.",
		}),
		requests: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_retune_window_requests",
			Help: "Requests in the latest retune run's window (at most retune.max_requests).",
		}),
	}
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_retune_runs_total",
		Help: "Retune runs by decision: skip, keep, propose (advisory), hold, apply, refused.",
	}, []string{"action"})
	for _, a := range RetuneActions {
		m.runs[a] = runs.WithLabelValues(a)
	}
	if reg != nil {
		reg.MustRegister(runs, m.improvement, m.duration, m.requests)
	}
	return m
}
