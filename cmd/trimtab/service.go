package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/internal/status"
	"github.com/trimtab/trimtab/proxy"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

// service is one running trimtab: discovery and scraping feed the
// scheduler's pool; the control loop retunes its weights; the HTTP proxy,
// the ext_proc server and the admin server serve requests.
type service struct {
	log *slog.Logger
	reg *prometheus.Registry
	// registered lists every collector registered on reg, for the
	// generated metrics reference (docs/metrics.md).
	registered *recordingRegisterer
	clk        clock.WithTicker
	srv        proxy.Config
	sched      *scheduler.Scheduler
	loop       *control.Loop
	fleet      *fleet.Fleet
	hist       *status.Recorder
	dec        *proxy.Recorder
	http       *proxy.HTTP
	ext        *proxy.ExtProc
	admin      *proxy.Admin

	mu      sync.Mutex
	running *configs.File // the profile in force
}

// serviceOptions are what tests and the demo change; zero values mean the
// production behaviour (listen on the configured addresses, discovery from
// the profile, real clock).
type serviceOptions struct {
	Logger                     *slog.Logger
	Clock                      clock.WithTicker
	Discoverer                 fleet.Discoverer
	HTTP, ExtProc, Admin       net.Listener
	DisableExtProc, NoRuntimeM bool
	// Tracer, when set, traces requests and weight changes (tracing.go).
	Tracer trace.Tracer
}

// serverConfig decodes the profile's raw server: section into the proxy's
// config, over its defaults, and reads server.admin.token_file into
// Admin.Token.
func serverConfig(f *configs.File) (proxy.Config, error) {
	cfg := proxy.DefaultConfig()
	if err := configs.Decode(f.Server, &cfg); err != nil {
		return cfg, fmt.Errorf("server: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("server: %w", err)
	}
	if path := cfg.Admin.TokenFile; path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("server.admin.token_file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return cfg, fmt.Errorf("server.admin.token_file: %s is empty", path)
		}
		cfg.Admin.Token, cfg.Admin.TokenFile = tok, ""
		if err := cfg.Validate(); err != nil {
			return cfg, fmt.Errorf("server (token from %s): %w", path, err)
		}
	}
	return cfg, nil
}

func newService(f *configs.File, opt serviceOptions) (*service, error) {
	if !f.HasEndpoints && opt.Discoverer == nil {
		return nil, errors.New("profile has no endpoints: section; serve needs to know where the model servers are (see docs/fleet.md)")
	}
	srv, err := serverConfig(f)
	if err != nil {
		return nil, err
	}
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &service{
		log:     log,
		reg:     prometheus.NewRegistry(),
		clk:     opt.Clock,
		srv:     srv,
		running: f,
	}
	if s.clk == nil {
		s.clk = clock.RealClock{}
	}
	if !opt.NoRuntimeM {
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s.registered = &recordingRegisterer{Registerer: s.reg}
	reg := s.registered

	s.sched, err = f.BuildScheduler(scorers.InTree(), scheduler.Deps{Registerer: reg, Logger: log, Clock: s.clk})
	if err != nil {
		return nil, err
	}
	fdeps := fleet.Deps{Clock: s.clk, Registerer: reg, Logger: log.With("component", "fleet"), Discoverer: opt.Discoverer}
	if opt.Discoverer == nil && f.Fleet.Endpoints.Mode != fleet.ModeStatic {
		fdeps.Kube, fdeps.Dynamic, err = fleet.NewKubeClients(f.Fleet.Endpoints.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubernetes discovery: %w", err)
		}
	}
	s.fleet, err = fleet.New(f.Fleet, fdeps)
	if err != nil {
		return nil, err
	}
	if s.hist, err = status.New(status.DefaultConfig()); err != nil {
		return nil, err
	}
	s.hist.SetScorers(s.sched.Scorers())
	names := make([]string, len(s.sched.Scorers()))
	for i, e := range s.sched.Scorers() {
		names[i] = e.Name
	}
	s.loop, err = control.New(f.Adaptive, s.sched, control.Deps{
		Clock:      s.clk,
		Registerer: reg,
		Logger:     log.With("component", "control"),
		Observe:    func(t *control.Tick) { s.record(t, names) },
		Tracer:     opt.Tracer,
	})
	if err != nil {
		return nil, err
	}
	s.dec = proxy.NewRecorder(srv.Admin.Decisions, srv.Admin.DecisionsEvery)

	pdeps := func(l net.Listener) proxy.Deps {
		return proxy.Deps{Scheduler: s.sched, View: s.sched, Gatherer: s.reg, Registerer: reg,
			Logger: log.With("component", "proxy"), Clock: s.clk, Recorder: s.dec, Control: controlView{s}, Listener: l, Tracer: opt.Tracer}
	}
	if srv.HTTP.Enabled {
		if s.http, err = proxy.NewHTTP(srv, pdeps(opt.HTTP)); err != nil {
			return nil, err
		}
	}
	if srv.ExtProc.Enabled && !opt.DisableExtProc {
		if s.ext, err = proxy.NewExtProc(srv, pdeps(opt.ExtProc)); err != nil {
			return nil, err
		}
	}
	if srv.Admin.Enabled {
		if s.admin, err = proxy.NewAdmin(srv, pdeps(opt.Admin)); err != nil {
			return nil, err
		}
		s.admin.Handle(status.PathHistory, s.hist.Handler())
		s.admin.Handle("/ui", status.UI())
		s.admin.Handle("/ui/", status.UI())
	}
	return s, nil
}

// Run runs every component until ctx is done, then shuts down in order:
// the data-path servers stop accepting and drain in-flight requests (SSE
// streams included, up to server.drain_timeout) while discovery, scraping
// and the control loop keep the pool view fresh for them; only then do the
// control loop and the fleet stop. If a background component fails, the
// servers are stopped too and its error is returned.
func (s *service) Run(ctx context.Context) error {
	frontCtx, stopFront := context.WithCancel(ctx)
	defer stopFront()
	backCtx, stopBack := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBack()

	back, bctx := errgroup.WithContext(backCtx)
	back.Go(func() error { return s.fleet.Run(bctx) })
	back.Go(func() error { return s.feedScheduler(bctx) })
	back.Go(func() error { return s.loop.Run(bctx) })
	go func() { <-bctx.Done(); stopFront() }() // a failing background part stops the servers

	front, fctx := errgroup.WithContext(frontCtx)
	if s.http != nil {
		front.Go(func() error { return s.http.Run(fctx) })
	}
	if s.ext != nil {
		front.Go(func() error { return s.ext.Run(fctx) })
	}
	if s.admin != nil {
		front.Go(func() error { return s.admin.Run(fctx) })
	}
	ferr := front.Wait()
	stopBack()
	berr := back.Wait()
	return errors.Join(ferr, berr)
}

// feedScheduler installs every fleet snapshot as the scheduler's pool.
func (s *service) feedScheduler(ctx context.Context) error {
	updates, cancel := s.fleet.Subscribe()
	defer cancel()
	if snap := s.fleet.Load(); snap != nil {
		s.sched.SetEndpoints(snap.Endpoints)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-updates:
			if snap := s.fleet.Load(); snap != nil {
				s.sched.SetEndpoints(snap.Endpoints)
			}
		}
	}
}

// record keeps each tick for /debug/history and /ui, and each new weights
// version as a change.
func (s *service) record(t *control.Tick, names []string) {
	s.hist.Record(sampleOf(&t.Signal, t.Weights, names))
	if t.Changed() && t.Err == nil {
		s.hist.RecordChange(t.Previous, t.Weights, names)
	}
}

func sampleOf(sig *detector.Signal, w *scheduler.Weights, names []string) status.Sample {
	comps := sig.Components()
	smp := status.Sample{
		At:         sig.At,
		Signal:     sig.Value,
		Gate:       string(sig.Gate),
		Components: make(map[string]float64, len(comps)),
	}
	for _, c := range comps {
		smp.Components[c.Name] = c.Value
	}
	smp.SetWeights(w, names)
	return smp
}

// reload applies a new profile. Weights and the adaptive section take
// effect at the control loop's next tick (weight versions continue); any
// other change needs a restart, so such a reload is refused and the
// running profile kept. The error says why.
func (s *service) reload(f *configs.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if section := restartSection(s.running, f); section != "" {
		return fmt.Errorf("%s changed: restart trimtab to apply it; the running profile is kept", section)
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("%w; the running profile is kept", err)
	}
	if _, err := serverConfig(f); err != nil {
		return err
	}
	weights := make([]float64, len(f.Scorers))
	for i, sc := range f.Scorers {
		weights[i] = *sc.Weight
	}
	if err := s.loop.Reload(f.Adaptive, weights); err != nil {
		return err
	}
	s.running = f
	return nil
}

// controlView shows the control loop on /debug/weights: the latest tick's
// signal and the base weights of the profile in force.
type controlView struct{ s *service }

func (c controlView) Signal() (float64, time.Time, bool) {
	t := c.s.loop.Last()
	if t == nil {
		return 0, time.Time{}, false
	}
	return t.Signal.Value, t.At, true
}

func (c controlView) BaseWeights() []float64 {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	base := make([]float64, len(c.s.running.Scorers))
	for i, sc := range c.s.running.Scorers {
		base[i] = *sc.Weight
	}
	return base
}

// restartSection names the first section that differs between two
// profiles in a way a running service cannot apply, or "".
func restartSection(old, nw *configs.File) string {
	if len(old.Scorers) != len(nw.Scorers) {
		return "scorers (the list)"
	}
	for i := range old.Scorers {
		a, b := old.Scorers[i], nw.Scorers[i]
		if a.Type != b.Type || a.Name != b.Name || !reflect.DeepEqual(a.Params, b.Params) {
			return fmt.Sprintf("scorers[%d] (type, name or params)", i)
		}
	}
	switch {
	case !reflect.DeepEqual(old.Scheduler, nw.Scheduler):
		return "scheduler"
	case !reflect.DeepEqual(old.Picker, nw.Picker):
		return "picker"
	case !reflect.DeepEqual(old.Filters, nw.Filters):
		return "filters"
	case !reflect.DeepEqual(old.Fleet, nw.Fleet):
		return "endpoints or scrape"
	case !reflect.DeepEqual(old.Server, nw.Server):
		return "server"
	case old.Tracing != nw.Tracing:
		return "tracing"
	}
	return ""
}

// recordingRegisterer registers on the wrapped Registerer and remembers
// what it registered.
type recordingRegisterer struct {
	prometheus.Registerer
	mu sync.Mutex
	cs []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cs = append(r.cs, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// collectors returns what was registered.
func (r *recordingRegisterer) collectors() []prometheus.Collector {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]prometheus.Collector(nil), r.cs...)
}
