package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/internal/status"
	"github.com/trimtab/trimtab/proxy"
	"github.com/trimtab/trimtab/replica"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
	"github.com/trimtab/trimtab/sim/retune"
)

// service is one running trimtab: discovery and scraping feed the
// scheduler's pool; the control loop retunes its weights; the HTTP proxy,
// the ext_proc server and the admin server serve requests.
type service struct {
	log   *slog.Logger
	reg   *prometheus.Registry
	clk   clock.WithTicker
	srv   proxy.Config
	sched *scheduler.Scheduler
	loop  *control.Loop
	cal   *fleet.Calibrator // learns the endpoints' speed from the requests served
	fleet *fleet.Fleet
	hist  *status.Recorder
	http  *proxy.HTTP
	ext   *proxy.ExtProc
	admin *proxy.Admin
	repl  *replica.Replica // nil without replica sync
	flow  *flow.Controller // nil with flow control off
	// retune re-tunes the calm weights on the recorded traffic; nil with
	// retune.mode: off.
	retune *control.Retune
	// peers finds the replicas in Kubernetes (replicas.discovery); nil
	// without.
	peers *replica.PeerDiscovery
	// stopperExit is serviceOptions.StopperExit.
	stopperExit func()

	mu      sync.Mutex
	running *configs.File // the profile in force
}

// serviceOptions are what tests and the demo change; zero values mean the
// production behaviour (listen on the configured addresses, discovery from
// the profile, real clock, components registering on the service's
// registry).
type serviceOptions struct {
	Logger               *slog.Logger
	Clock                clock.WithTicker
	Discoverer           fleet.Discoverer
	HTTP, ExtProc, Admin net.Listener
	// Replica is where replica sync listens (default: replicas.listen).
	Replica net.Listener
	// PeerDiscoverer, when set, replaces Kubernetes discovery of the
	// replicas (replicas.discovery).
	PeerDiscoverer             fleet.Discoverer
	DisableExtProc, NoRuntimeM bool
	// Registerer, when set, wraps the registry the components register
	// on (the metrics reference test records what is registered).
	Registerer func(prometheus.Registerer) prometheus.Registerer
	// Tracer, when set, traces requests and weight changes (tracing.go).
	Tracer trace.Tracer
	// Scheduler, when set, replaces the one built from the profile's
	// scorers (bench's simulator baselines that are not profiles).
	Scheduler *scheduler.Scheduler
	// StopperExit, when set, is called by Run's stopper goroutine (the
	// one that stops the servers when a background part fails) as it
	// exits (tests).
	StopperExit func()
}

func newService(f *configs.File, opt serviceOptions) (*service, error) {
	if !f.HasEndpoints && opt.Discoverer == nil {
		return nil, errors.New("profile has no endpoints: section; serve needs to know where the model servers are (see docs/fleet.md)")
	}
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &service{
		log:     log,
		reg:     prometheus.NewRegistry(),
		clk:     opt.Clock,
		srv:     f.Server,
		running: f,

		stopperExit: opt.StopperExit,
	}
	if s.clk == nil {
		s.clk = clock.RealClock{}
	}
	if !opt.NoRuntimeM {
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	var reg prometheus.Registerer = s.reg
	if opt.Registerer != nil {
		reg = opt.Registerer(reg)
	}
	var err error
	if s.sched = opt.Scheduler; s.sched == nil {
		s.sched, err = f.BuildScheduler(scorers.InTree(), scheduler.Deps{Registerer: reg, Logger: log, Clock: s.clk})
	}
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
	s.cal, err = fleet.NewCalibrator(fleet.DefaultCalibrationConfig(), s.sched, fleet.CalibrationDeps{Clock: s.clk, Registerer: reg, Logger: log.With("component", "calibration")})
	if err != nil {
		return nil, err
	}
	s.sched.ObserveInto(s.cal.Ring())
	if f.Replicas.Enabled {
		rc := f.Replicas
		if rc.ID == "" {
			if rc.ID, err = os.Hostname(); err != nil {
				return nil, fmt.Errorf("replicas.id: unset, and the host name is unknown: %w", err)
			}
		}
		s.repl, err = replica.New(rc, s.sched, replica.Deps{Clock: s.clk, Registerer: reg,
			Logger: log.With("component", "replica"), Listener: opt.Replica})
		if err != nil {
			return nil, err
		}
		if rc.Discovery.Enabled() {
			kube := fdeps.Kube
			if kube == nil && opt.PeerDiscoverer == nil {
				if kube, _, err = fleet.NewKubeClients(f.Fleet.Endpoints.Kubeconfig); err != nil {
					return nil, fmt.Errorf("replicas.discovery: %w", err)
				}
			}
			if s.peers, err = replica.NewPeerDiscovery(rc, replica.DiscoveryDeps{Replica: s.repl, Kube: kube,
				Discoverer: opt.PeerDiscoverer, Logger: log.With("component", "replica-discovery")}); err != nil {
				return nil, err
			}
		}
	}
	if f.Flow.Enabled {
		if s.flow, err = flow.New(f.Flow, flow.Deps{Scheduler: s.sched, Clock: s.clk, Registerer: reg,
			Logger: log.With("component", "flow")}); err != nil {
			return nil, err
		}
	}
	srv, dec := f.Server, proxy.NewRecorder(f.Server.Admin.Decisions, f.Server.Admin.DecisionsEvery)
	traffic := proxy.NewTrafficRecorder(srv.Admin.Record, reg)
	if f.Retune.Mode != control.RetuneOff {
		rt, err := retune.New(f)
		if err == nil {
			s.retune, err = control.NewRetune(f.Retune, s.loop, rt, retuneSource{traffic: traffic, cal: s.cal, sched: s.sched},
				control.RetuneDeps{Clock: s.clk, Registerer: reg, Logger: log.With("component", "retune"), Tracer: opt.Tracer})
		}
		if err != nil {
			return nil, err
		}
	}
	pdeps := func(l net.Listener) proxy.Deps {
		return proxy.Deps{Scheduler: s.sched, Flow: s.flow, View: s.sched, Gatherer: s.reg, Registerer: reg,
			Logger: log.With("component", "proxy"), Clock: s.clk, Recorder: dec, Traffic: traffic, Control: s.loop, Listener: l, Tracer: opt.Tracer}
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
		s.admin.Handle("GET "+fleet.PathCalibration, s.cal.Handler())
		s.admin.Handle("GET "+fleet.PathCalibrationEngine, s.cal.EngineHandler())
		if s.retune != nil {
			s.admin.Handle("GET "+control.PathRetune, s.retune.Handler())
		}
		ui := status.NewUI(status.UIConfig{AdminAddr: srv.Admin.Addr, AdminToken: srv.Admin.Token != ""})
		s.admin.Handle("/ui", ui)
		s.admin.Handle("/ui/", ui)
		if s.repl != nil {
			s.admin.Handle(replica.PathPeers, s.repl.Handler())
		} else {
			s.admin.Handle(replica.PathPeers, replica.OffHandler())
		}
		if s.flow != nil {
			s.admin.Handle(flow.PathFlow, s.flow.Handler())
		} else {
			s.admin.Handle(flow.PathFlow, flow.OffHandler())
		}
	}
	return s, nil
}

// Run runs every component until ctx is done, then shuts down in order:
// the data-path servers stop accepting and drain in-flight requests (SSE
// streams included, up to server.drain_timeout) while discovery, scraping
// and the control loop keep the pool view fresh for them; only then do the
// control loop and the fleet stop. If a background component fails, the
// servers are stopped too and its error is returned. Run returns only
// once every goroutine it started has exited.
func (s *service) Run(ctx context.Context) error {
	frontCtx, stopFront := context.WithCancel(ctx)
	defer stopFront()
	backCtx, stopBack := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBack()

	back, bctx := errgroup.WithContext(backCtx)
	back.Go(func() error { return s.fleet.Run(bctx) })
	back.Go(func() error { return s.fleet.Feed(bctx, feedTarget{s.sched, s.loop}) })
	back.Go(func() error { return s.loop.Run(bctx) })
	back.Go(func() error { return s.cal.Run(bctx) })
	if s.flow != nil {
		// The dispatcher outlives the servers' drain: queued requests
		// are in-flight requests.
		back.Go(func() error { return s.flow.Run(bctx) })
	}
	if s.retune != nil {
		// Its own goroutine: a replay (up to retune.timeout) never delays
		// the loop's ticks.
		back.Go(func() error { return s.retune.Run(bctx) })
	}
	if s.repl != nil {
		// Like the loop, sync keeps running while the servers drain, so
		// the peers keep counting this replica's last requests.
		back.Go(func() error { return s.repl.Run(bctx) })
	}
	if s.peers != nil {
		back.Go(func() error { return s.peers.Run(bctx) })
	}
	// The stopper: a failing background part stops the servers. It ends
	// with the background (stopBack below) and back.Wait waits for it.
	back.Go(func() error {
		if s.stopperExit != nil {
			defer s.stopperExit()
		}
		<-bctx.Done()
		stopFront()
		return nil
	})

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

// discovered waits until discovery has published its first endpoint list
// and reports true, or reports false once ctx is done.
func (s *service) discovered(ctx context.Context) bool {
	ch, stop := s.fleet.Subscribe()
	defer stop()
	for s.fleet.Load().Version == 0 {
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
	return true
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

// reload applies a new profile's runtime-changeable subset
// (configs.Reloadable: weights and the adaptive section), which takes
// effect at the control loop's next tick, weight versions continuing. An
// invalid profile, or one that changes anything else, is refused naming
// why, and the running profile kept.
func (s *service) reload(f *configs.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := f.ReloadOver(s.running)
	if err == nil {
		err = s.loop.Reload(r.Adaptive, r.Weights)
	}
	if err != nil {
		return fmt.Errorf("%w; the running profile is kept", err)
	}
	s.running = f
	return nil
}

// feedTarget installs discovery's pools in the scheduler and tells the
// control loop, whose first tick that sees a pool sets the trade law's
// first shape.
type feedTarget struct {
	sched *scheduler.Scheduler
	loop  *control.Loop
}

func (f feedTarget) SetEndpoints(eps []scheduler.Endpoint) {
	f.sched.SetEndpoints(eps)
	f.loop.PoolInstalled()
}
