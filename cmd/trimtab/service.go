package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/internal/status"
	"github.com/trimtab/trimtab/proxy"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

// service is one running trimtab: discovery and scraping feed the
// scheduler's pool; the detector and configurator retune its weights; the
// HTTP proxy, the ext_proc server and the admin server serve requests.
type service struct {
	log *slog.Logger
	reg *prometheus.Registry
	// registered lists every collector registered on reg, for the
	// generated metrics reference (docs/metrics.md).
	registered *recordingRegisterer
	clk        clock.WithTicker
	srv        proxy.Config
	sched      *scheduler.Scheduler
	fleet      *fleet.Fleet
	hist       *status.Recorder
	dec        *proxy.Recorder
	http       *proxy.HTTP
	ext        *proxy.ExtProc
	admin      *proxy.Admin

	// ctrlMetrics holds the current control-loop generation's metrics, so
	// a reload can replace the detector and configurator without
	// registering their metrics twice.
	ctrlMetrics *collectorSet

	mu      sync.Mutex
	running *configs.File // the profile in force
	reloads chan *configs.File
}

// serviceOptions are what tests and the demo change; zero values mean the
// production behaviour (listen on the configured addresses, discovery from
// the profile, real clock).
type serviceOptions struct {
	Logger                     *slog.Logger
	Discoverer                 fleet.Discoverer
	HTTP, ExtProc, Admin       net.Listener
	DisableExtProc, NoRuntimeM bool
}

// serverConfig decodes the profile's raw server: section into the proxy's
// config, over its defaults.
func serverConfig(f *configs.File) (proxy.Config, error) {
	cfg := proxy.DefaultConfig()
	if err := configs.Decode(f.Server, &cfg); err != nil {
		return cfg, fmt.Errorf("server: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("server: %w", err)
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
		log:         log,
		reg:         prometheus.NewRegistry(),
		clk:         clock.RealClock{},
		srv:         srv,
		running:     f,
		reloads:     make(chan *configs.File, 1),
		ctrlMetrics: &collectorSet{},
	}
	if !opt.NoRuntimeM {
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s.reg.MustRegister(s.ctrlMetrics)
	s.registered = &recordingRegisterer{Registerer: s.reg}
	reg := s.registered

	s.sched, err = f.BuildScheduler(scorers.InTree(), scheduler.Deps{Registerer: reg, Logger: log})
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
	s.dec = proxy.NewRecorder(srv.Admin.Decisions, srv.Admin.DecisionsEvery)

	pdeps := func(l net.Listener) proxy.Deps {
		return proxy.Deps{Scheduler: s.sched, View: s.sched, Gatherer: s.reg, Registerer: reg,
			Logger: log.With("component", "proxy"), Clock: s.clk, Recorder: s.dec, Listener: l}
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
	back.Go(func() error { return s.runControl(bctx) })
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

// runControl runs the detector and configurator of the profile in force,
// and rebuilds them when a reload changes the weights or the adaptive
// section. Weight versions continue across generations.
func (s *service) runControl(ctx context.Context) error {
	for {
		s.mu.Lock()
		f := s.running
		s.mu.Unlock()
		gen, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- s.runControlGeneration(gen, f) }()
		select {
		case <-ctx.Done():
			cancel()
			return <-errc
		case err := <-errc:
			cancel()
			return err
		case <-s.reloads:
			cancel()
			if err := <-errc; err != nil {
				return err
			}
		}
	}
}

func (s *service) runControlGeneration(ctx context.Context, f *configs.File) error {
	s.ctrlMetrics.reset()
	entries := append([]scheduler.ScorerEntry(nil), s.sched.Scorers()...)
	for i := range entries {
		entries[i].Weight = *f.Scorers[i].Weight
	}
	sigs := make(chan detector.Signal, 1)
	det, err := detector.New(f.Adaptive.Detector, detector.Deps{
		Clock:      s.clk,
		Source:     func() []*scheduler.Endpoint { return s.sched.Pool().Pointers() },
		Signals:    sigs,
		Registerer: s.ctrlMetrics,
		Logger:     s.log.With("component", "detector"),
	})
	if err != nil {
		return err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name
	}
	conf, err := configurator.New(f.Adaptive.Config, entries, configurator.Deps{
		Start:      s.sched.Weights(),
		Publisher:  publisherFunc(func(w *scheduler.Weights) error { return s.publish(w, names) }),
		Clock:      s.clk,
		Registerer: s.ctrlMetrics,
		Logger:     s.log.With("component", "configurator"),
	})
	if err != nil {
		return err
	}
	in := make(chan detector.Signal, 1)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return det.Run(gctx) })
	g.Go(func() error { return conf.Run(gctx, in) })
	g.Go(func() error {
		// Tee: record each tick for /debug/history and /ui, then hand the
		// signal to the configurator.
		for {
			select {
			case <-gctx.Done():
				return nil
			case sig := <-sigs:
				s.hist.Record(sampleOf(sig, s.sched.Weights(), names))
				select {
				case in <- sig:
				case <-gctx.Done():
					return nil
				}
			}
		}
	})
	return g.Wait()
}

func (s *service) publish(w *scheduler.Weights, names []string) error {
	old := s.sched.Weights()
	if err := s.sched.Publish(w); err != nil {
		return err
	}
	s.hist.RecordChange(old, w, names)
	return nil
}

func sampleOf(sig detector.Signal, w *scheduler.Weights, names []string) status.Sample {
	smp := status.Sample{
		At:     sig.At,
		Signal: sig.Value,
		Gate:   string(sig.Gate),
		Mode:   w.Mode,
		Components: map[string]float64{
			"request_cv": sig.RequestCV, "request_cv_uncorrected": sig.RequestCVUncorrected,
			"kv_cv": sig.KVCV, "kv_max": sig.KVMax, "raw": sig.Raw, "smoothed": sig.Smoothed,
			"pressure": sig.Pressure, "endpoints": float64(sig.Endpoints), "total_load": sig.TotalLoad,
			"requests": sig.Requests,
		},
	}
	smp.SetWeights(w, names)
	return smp
}

// publisherFunc adapts a function to configurator.Publisher.
type publisherFunc func(*scheduler.Weights) error

func (f publisherFunc) Publish(w *scheduler.Weights) error { return f(w) }

// reload applies a new profile. Weights and the adaptive section take
// effect at once (the control loop is rebuilt, weight versions continue);
// any other change needs a restart, so such a reload is refused and the
// running profile kept. The error says why.
func (s *service) reload(f *configs.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if section := restartSection(s.running, f); section != "" {
		return fmt.Errorf("%s changed: restart trimtab to apply it; the running profile is kept", section)
	}
	if _, err := serverConfig(f); err != nil {
		return err
	}
	s.running = f
	select {
	case s.reloads <- f:
	default: // a rebuild is already pending; it reads s.running
	}
	return nil
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
	}
	return ""
}

// collectorSet is a Registerer whose collectors can be dropped and
// replaced, itself registered once as an unchecked Collector. Each control
// loop generation registers into it afresh.
type collectorSet struct {
	mu sync.Mutex
	cs []prometheus.Collector
}

func (c *collectorSet) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cs = nil
}

// snapshot returns the current generation's collectors.
func (c *collectorSet) snapshot() []prometheus.Collector {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]prometheus.Collector(nil), c.cs...)
}

func (c *collectorSet) Register(col prometheus.Collector) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cs = append(c.cs, col)
	return nil
}

func (c *collectorSet) MustRegister(cols ...prometheus.Collector) {
	for _, col := range cols {
		_ = c.Register(col)
	}
}

func (c *collectorSet) Unregister(col prometheus.Collector) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.cs {
		if x == col {
			c.cs = append(c.cs[:i], c.cs[i+1:]...)
			return true
		}
	}
	return false
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

// Describe sends nothing: the set is an unchecked collector.
func (c *collectorSet) Describe(chan<- *prometheus.Desc) {}

func (c *collectorSet) Collect(ch chan<- prometheus.Metric) {
	for _, col := range c.snapshot() {
		col.Collect(ch)
	}
}
