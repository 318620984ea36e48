package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
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
	// Trade is the trade law's reason when the tick moved the calm
	// weights' mix (adaptive.trade), else "".
	Trade string
	// Fill is the fill law's reason when the tick added or removed its
	// weights (adaptive.fill), else "".
	Fill string
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
	cfg       Config
	det       *detector.Detector
	conf      *configurator.Configurator
	prof      []scheduler.ScorerEntry // the profile the trade law mixes from
	trade     TradeState
	tradeNext time.Time // the trade law's next evaluation; zero: the first tick
	fill      FillState
	fillNext  time.Time              // the fill law's next evaluation
	filler    scheduler.FillReporter // the fill law's input; nil: none in the profile
	churn     churnWindow            // the fill law's recent reads of the index's evictions
	picks     pickReader             // the trade law's recent pick totals, for the KV slots and uncached prompt
	sawPool   bool                   // a tick has seen a non-empty pool: requests may have routed

	poolWake chan struct{} // PoolInstalled's wake-up for Run, buffered 1

	cfgSeen atomic.Pointer[Config]    // the config in force, for readers
	base    atomic.Pointer[[]float64] // the profile's base weights in force, for readers
	pending atomic.Pointer[reload]
	last    atomic.Pointer[Tick]

	reloadMu sync.Mutex
	gen      uint64  // reloads queued since New; guarded by reloadMu
	want     *reload // the newest profile, queued or in force; guarded by reloadMu
}

type reload struct {
	cfg     Config
	profile []scheduler.ScorerEntry
	reason  string // why, when not the operator's reload (ReloadCalm)
}

// New builds a loop over target's profile. Versions continue from the
// target's current weights. It fails if cfg is invalid for the profile.
func New(cfg Config, target Target, deps Deps) (*Loop, error) {
	if target == nil {
		return nil, errors.New("control: no target")
	}
	l := &Loop{target: target, clock: deps.Clock, log: deps.Logger, observe: deps.Observe, tracer: deps.Tracer, poolWake: make(chan struct{}, 1)}
	if l.clock == nil {
		l.clock = clock.RealClock{}
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if err := l.build(cfg, target.Scorers()); err != nil {
		return nil, err
	}
	l.want = &reload{cfg: cfg, profile: target.Scorers()}
	l.m = newMetrics(deps.Registerer)
	w := target.Weights()
	l.m.published(w, l.conf.Budget(w))
	return l, nil
}

// build makes the detector and the configurator for cfg and profile,
// keeping the trade and fill laws' mixes when cfg's laws are on (a law's
// state is cleared when it is off).
func (l *Loop) build(cfg Config, profile []scheduler.ScorerEntry) error {
	det, err := detector.New(cfg.Detector)
	if err != nil {
		return err
	}
	// With the loop off the laws are idle and their shapes must go: the
	// roll-back (adaptive.enabled: false) publishes the profile's own
	// weights.
	ts, fs := l.trade, l.fill
	if !cfg.Enabled || !cfg.Trade.Enabled {
		ts = TradeState{}
	}
	if !cfg.Enabled || !cfg.Fill.Enabled {
		fs = FillState{}
	}
	mcfg, mixed := cfg.ShapedBy(profile, ts, fs.Mix)
	conf, err := configurator.New(mcfg.Config, mixed, l.target.Weights())
	if err != nil {
		return err
	}
	l.cfg, l.det, l.conf, l.prof, l.trade, l.fill = cfg, det, conf, profile, ts, fs
	l.filler = filler(profile)
	l.cfgSeen.Store(&cfg)
	l.storeBase(mixed)
	return nil
}

func (l *Loop) storeBase(profile []scheduler.ScorerEntry) {
	base := weightsOf(profile)
	l.base.Store(&base)
}

// weightsOf returns profile's weights, index-aligned, in a new slice.
func weightsOf(profile []scheduler.ScorerEntry) []float64 {
	w := make([]float64, len(profile))
	for i, e := range profile {
		w[i] = e.Weight
	}
	return w
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

// BaseWeights returns the base weights the loop runs over: the
// profile's (a reload's once a tick has applied it), blended by the trade
// law's mix when it has moved (adaptive.trade) and with the fill law's
// weights added while the caches are full (adaptive.fill), index-aligned with the
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
	l.reloadMu.Lock()
	defer l.reloadMu.Unlock()
	l.queue(&reload{cfg: cfg, profile: profile})
	return nil
}

// queue hands r to the next tick. The caller holds reloadMu.
func (l *Loop) queue(r *reload) {
	l.pending.Store(r)
	l.gen++
	l.want = r
}

// ErrReloaded is ReloadCalm's error when another reload was queued after
// the Calm it was given.
var ErrReloaded = errors.New("control: the profile was reloaded meanwhile")

// Calm returns the newest profile's base weights (a queued reload's, else
// those in force; index-aligned with the target's scorers), its adaptive
// configuration, and its generation, which every Reload and ReloadCalm
// advances. In adaptive mode the base weights are the calm weights. Safe
// for concurrent use; the weights are a copy.
func (l *Loop) Calm() (weights []float64, cfg Config, gen uint64) {
	l.reloadMu.Lock()
	defer l.reloadMu.Unlock()
	return weightsOf(l.want.profile), l.want.cfg, l.gen
}

// ReloadCalm queues new base weights under the newest profile's
// configuration, as Reload does, provided no reload was queued since Calm
// returned gen; otherwise it returns ErrReloaded and nothing changes, so
// an operator's reload is never overwritten by a change computed from the
// profile it replaced. reason is logged when a tick applies the weights.
// Invalid weights are refused, naming why. Safe for concurrent use.
func (l *Loop) ReloadCalm(gen uint64, weights []float64, reason string) error {
	l.reloadMu.Lock()
	defer l.reloadMu.Unlock()
	if gen != l.gen {
		return ErrReloaded
	}
	profile := slices.Clone(l.want.profile)
	if len(weights) != len(profile) {
		return fmt.Errorf("control: %d weights for %d scorers", len(weights), len(profile))
	}
	for i := range profile {
		profile[i].Weight = weights[i]
	}
	if err := (&scheduler.Weights{Values: weights}).Validate(len(profile)); err != nil {
		return fmt.Errorf("scorers: %w", err)
	}
	if err := l.want.cfg.CheckProfile(profile); err != nil {
		return err
	}
	l.queue(&reload{cfg: l.want.cfg, profile: profile, reason: reason})
	return nil
}

// Tick measures pool at now, steps the configurator and publishes a new
// weights version when it made one. It is deterministic for a sequence of
// (now, pool) and reloads, and must not be called concurrently with itself
// or Run.
func (l *Loop) Tick(now time.Time, pool []*scheduler.Endpoint) *Tick {
	if p := l.pending.Swap(nil); p != nil {
		switch err := l.build(p.cfg, p.profile); {
		case err != nil: // validated by Reload
			l.log.Error("control loop reload failed; keeping the running loop", "err", err)
		case p.reason != "":
			l.log.Info("control loop reconfigured", "adaptive", p.cfg.Enabled, "reason", p.reason,
				slog.Group("base", l.attrs(*l.base.Load())...))
		default:
			l.log.Info("control loop reconfigured", "adaptive", p.cfg.Enabled)
		}
		// A reload may have cleared a law's state (the law or the loop off).
		l.m.tradeMix.Set(l.trade.Mix)
		l.m.fillMix.Set(l.fill.Mix)
	}
	t := &Tick{At: now, Previous: l.target.Weights()}
	// The first evaluation is the first tick that sees a pool, before the
	// configurator's first step: the shape decides where the first
	// requests' prefixes live.
	// Both laws read the mode as the tick found it: a law that reshaped
	// leaves a new configurator in static mode, which is not the
	// configurator's first step for the other. fresh: before the first
	// step (the loop's first tick, or the first after a reload) or before
	// a tick has seen a pool, when a new shape is in force at once.
	mode := l.conf.Mode()
	fresh := mode == configurator.ModeStatic || !l.sawPool
	if l.cfg.Trade.Enabled && l.cfg.Enabled && !now.Before(l.tradeNext) && len(pool) > 0 {
		l.tradeNext = now.Add(l.cfg.Trade.Interval)
		t.Trade = l.stepTrade(pool, mode, fresh)
	}
	if l.cfg.Fill.Enabled && l.cfg.Enabled && !now.Before(l.fillNext) && len(pool) > 0 {
		l.fillNext = now.Add(l.cfg.Fill.Interval)
		t.Fill = l.stepFill(now, pool, mode, fresh)
	}
	if len(pool) > 0 {
		l.sawPool = true
	}
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

// PoolInstalled tells Run that the target has a new pool. Until a tick has
// seen a non-empty pool, Run then ticks at once instead of at its next
// interval, so the trade law's first shape is in force milliseconds after
// the first list (serve's first tick usually runs before discovery's);
// after that Run wakes and does nothing. Safe for concurrent use; it never
// blocks.
func (l *Loop) PoolInstalled() {
	select {
	case l.poolWake <- struct{}{}:
	default:
	}
}

// Run ticks once at once and then every Interval on Deps.Clock, over the
// target's installed pool, until ctx is done; it returns nil then; it also
// ticks when PoolInstalled reports the first pool. A reload that changes
// the interval takes effect after the tick that applies it. Run must not
// be called twice concurrently.
func (l *Loop) Run(ctx context.Context) error {
	cfg := l.Config()
	l.log.Info("control loop started", "adaptive", cfg.Enabled, "interval", cfg.Detector.Interval,
		"d_min", cfg.DMin, "d_max", cfg.DMax, "theta_on", cfg.ThetaOn, "theta_off", cfg.ThetaOff)
	interval := l.Interval()
	tk := l.clock.NewTicker(interval)
	defer func() { tk.Stop() }()
	tick := func(now time.Time) {
		l.Tick(now, l.target.Pool().Pointers())
		if iv := l.Interval(); iv != interval {
			tk.Stop()
			interval, tk = iv, l.clock.NewTicker(iv)
		}
	}
	l.Tick(l.clock.Now(), l.target.Pool().Pointers())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.poolWake:
			if !l.sawPool {
				tick(l.clock.Now())
			}
		case now := <-tk.C():
			tick(now)
		}
	}
}
