package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/scheduler"
)

// Target is what the loop measures and retunes: *scheduler.Scheduler.
type Target interface {
	// Scorers are the profile's scorers with their base weights.
	Scorers() []scheduler.ScorerEntry
	// Pool is the installed pool, with router-local counters attached.
	Pool() *scheduler.Pool
	// Weights are the weights in force.
	Weights() *scheduler.Weights
	// Publish installs new weights or refuses them, keeping the old ones.
	Publish(*scheduler.Weights) error
}

var _ Target = (*scheduler.Scheduler)(nil)

// Deps are the loop's collaborators; all are optional.
type Deps struct {
	// Clock drives Run's ticker; nil means clock.RealClock{}.
	Clock clock.WithTicker
	// Registerer receives the loop's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger receives one "weights" line per new version (Info when the
	// mode changed, Debug otherwise) and reload messages; nil discards.
	Logger *slog.Logger
	// Observe, when set, is called at the end of every tick, on the
	// goroutine that ticks; it must not block or keep the pointer.
	Observe func(*Tick)
	// Tracer, when set, records every new weights version, and every
	// refused one, as a span at the tick's time (see trace.go); nil
	// records none.
	Tracer trace.Tracer
}

// Tick is what one tick did.
type Tick struct {
	// At is the tick's time.
	At time.Time
	// Signal is the detector's output, with every component.
	Signal detector.Signal
	// Mode is the configurator's mode after the tick.
	Mode string
	// Weights are in force after the tick; Previous before it. They are
	// the same pointer when the tick changed nothing.
	Weights, Previous *scheduler.Weights
	// Err is set when the scheduler refused a new version; Weights is
	// then the version it refused and Previous stays in force.
	Err error
}

// Changed reports whether the tick made a new weights version.
func (t *Tick) Changed() bool { return t.Weights != t.Previous }

// Loop is the adaptive control loop: every tick the detector measures the
// pool, the configurator maps the signal to weights, and a new version is
// published to the target. See the package documentation.
type Loop struct {
	target  Target
	clock   clock.WithTicker
	log     *slog.Logger
	observe func(*Tick)
	tracer  trace.Tracer
	m       *metrics

	// Owned by the ticking goroutine.
	cfg  Config
	det  *detector.Detector
	conf *configurator.Configurator

	cfgSeen atomic.Pointer[Config]    // the config in force, for readers
	base    atomic.Pointer[[]float64] // the profile's base weights in force, for readers
	pending atomic.Pointer[reload]
	last    atomic.Pointer[Tick]
}

type reload struct {
	cfg     Config
	profile []scheduler.ScorerEntry
}

// New builds a loop over target's profile. Versions continue from the
// target's current weights. It fails if cfg is invalid for the profile.
func New(cfg Config, target Target, deps Deps) (*Loop, error) {
	if target == nil {
		return nil, errors.New("control: no target")
	}
	l := &Loop{target: target, clock: deps.Clock, log: deps.Logger, observe: deps.Observe, tracer: deps.Tracer}
	if l.clock == nil {
		l.clock = clock.RealClock{}
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if err := l.build(cfg, target.Scorers()); err != nil {
		return nil, err
	}
	l.m = newMetrics(deps.Registerer)
	w := target.Weights()
	l.m.published(w, l.conf.Budget(w))
	return l, nil
}

func (l *Loop) build(cfg Config, profile []scheduler.ScorerEntry) error {
	det, err := detector.New(cfg.Detector)
	if err != nil {
		return err
	}
	conf, err := configurator.New(cfg.Config, profile, l.target.Weights())
	if err != nil {
		return err
	}
	l.cfg, l.det, l.conf = cfg, det, conf
	l.cfgSeen.Store(&cfg)
	base := make([]float64, len(profile))
	for i, e := range profile {
		base[i] = e.Weight
	}
	l.base.Store(&base)
	return nil
}

// Config returns the configuration in force (a reload takes effect at the
// next tick). Safe for concurrent use.
func (l *Loop) Config() Config { return *l.cfgSeen.Load() }

// Interval is the time between ticks of Run (adaptive.detector.interval).
func (l *Loop) Interval() time.Duration { return l.Config().Detector.Interval }

// Last returns the latest tick, or nil before the first. Safe for
// concurrent use.
func (l *Loop) Last() *Tick { return l.last.Load() }

// Signal returns the latest tick's signal value, in [0,1], and its time;
// ok is false before the first tick. Safe for concurrent use.
func (l *Loop) Signal() (value float64, at time.Time, ok bool) {
	if t := l.Last(); t != nil {
		return t.Signal.Value, t.At, true
	}
	return 0, time.Time{}, false
}

// BaseWeights returns the profile's base weights the loop runs over
// (a reload's once a tick has applied it), index-aligned with the
// target's scorers. Safe for concurrent use; the caller must not modify
// the slice.
func (l *Loop) BaseWeights() []float64 { return *l.base.Load() }

// Reload validates cfg with the profile's new base weights (index-aligned
// with the target's scorers) and queues them; the next tick rebuilds the
// detector and configurator from them, continuing the weight versions
// from those in force. On error nothing changes. Safe for concurrent use.
func (l *Loop) Reload(cfg Config, weights []float64) error {
	scorers := l.target.Scorers()
	if len(weights) != len(scorers) {
		return fmt.Errorf("control: %d weights for %d scorers", len(weights), len(scorers))
	}
	profile := append([]scheduler.ScorerEntry(nil), scorers...)
	for i := range profile {
		profile[i].Weight = weights[i]
	}
	if err := (&scheduler.Weights{Values: weights}).Validate(len(profile)); err != nil {
		return fmt.Errorf("scorers: %w", err)
	}
	if err := cfg.CheckProfile(profile); err != nil {
		return err
	}
	l.pending.Store(&reload{cfg: cfg, profile: profile})
	return nil
}

// Tick measures pool at now, steps the configurator and publishes a new
// weights version when it made one. It is deterministic for a sequence of
// (now, pool) and reloads, and must not be called concurrently with itself
// or Run.
func (l *Loop) Tick(now time.Time, pool []*scheduler.Endpoint) *Tick {
	if p := l.pending.Swap(nil); p != nil {
		if err := l.build(p.cfg, p.profile); err != nil { // validated by Reload
			l.log.Error("control loop reload failed; keeping the running loop", "err", err)
		} else {
			l.log.Info("control loop reconfigured", "adaptive", p.cfg.Enabled)
		}
	}
	t := &Tick{At: now, Previous: l.target.Weights()}
	t.Signal = l.det.Step(now, pool)
	from := l.conf.Mode()
	before := l.conf.Weights()
	w := l.conf.Step(now, configurator.Input{Value: t.Signal.Value, Pressure: t.Signal.Pressure})
	t.Mode = l.conf.Mode()
	l.m.observe(&t.Signal)
	if t.Mode != from {
		l.m.transition(from, t.Mode)
	}
	t.Weights = t.Previous
	if w != before && w != t.Previous {
		if err := l.target.Publish(w); err != nil {
			t.Err = err
			l.m.publishErrs.Inc()
			l.log.Error("publishing weights failed; the previous weights stay in force", "version", w.Version, "err", err)
			l.traceChange(t, w)
		} else {
			t.Weights = w
			l.m.published(w, l.conf.Budget(w))
			l.logChange(t)
			l.traceChange(t, w)
		}
	}
	l.last.Store(t)
	if l.observe != nil {
		l.observe(t)
	}
	return t
}

// logChange writes the "weights" line for a new version.
func (l *Loop) logChange(t *Tick) {
	level := slog.LevelDebug
	if t.Weights.Mode != t.Previous.Mode {
		level = slog.LevelInfo
	}
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	comps := t.Signal.Components()
	sig := make([]any, 0, len(comps)+3)
	sig = append(sig, slog.Float64("value", t.Signal.Value), slog.Bool("kv_used", t.Signal.KVUsed), slog.String("gate", string(t.Signal.Gate)))
	for _, c := range comps {
		sig = append(sig, slog.Float64(c.Name, c.Value))
	}
	l.log.Log(ctx, level, "weights",
		"version", t.Weights.Version, "mode", t.Weights.Mode, "from_mode", t.Previous.Mode, "reason", t.Weights.Reason,
		"distribution_budget", l.conf.Budget(t.Weights),
		slog.Group("old", l.attrs(t.Previous.Values)...), slog.Group("new", l.attrs(t.Weights.Values)...),
		slog.Group("signal", sig...))
}

func (l *Loop) attrs(v []float64) []any {
	names := l.conf.Names()
	out := make([]any, 0, len(v))
	for i, x := range v {
		if i < len(names) {
			out = append(out, slog.Float64(names[i], x))
		}
	}
	return out
}

// Run ticks once at once and then every Interval on Deps.Clock, over the
// target's installed pool, until ctx is done; it returns nil then. A
// reload that changes the interval takes effect after the tick that
// applies it. Run must not be called twice concurrently.
func (l *Loop) Run(ctx context.Context) error {
	cfg := l.Config()
	l.log.Info("control loop started", "adaptive", cfg.Enabled, "interval", cfg.Detector.Interval,
		"d_min", cfg.DMin, "d_max", cfg.DMax, "theta_on", cfg.ThetaOn, "theta_off", cfg.ThetaOff)
	interval := l.Interval()
	tk := l.clock.NewTicker(interval)
	defer func() { tk.Stop() }()
	l.Tick(l.clock.Now(), l.target.Pool().Pointers())
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tk.C():
			l.Tick(now, l.target.Pool().Pointers())
			if iv := l.Interval(); iv != interval {
				tk.Stop()
				interval, tk = iv, l.clock.NewTicker(iv)
			}
		}
	}
}
