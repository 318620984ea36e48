package fleet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/scheduler"
)

// Deps are the fleet's collaborators. Nil fields get defaults: the real
// clock, no metrics, discarded logs, a keep-alive HTTP client, jitter from
// a hash of each address, and discovery built from Config.Endpoints.
type Deps struct {
	Clock      clock.WithTicker
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Discoverer replaces the discovery built from Config.Endpoints
	// (tests, the simulator, embedding programs).
	Discoverer Discoverer
	// Kube and Dynamic are the Kubernetes clients for the pods,
	// endpointslices (Kube) and inferencepool (both) modes; see
	// NewKubeClients.
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// HTTPClient scrapes the model servers. Its Timeout should be 0:
	// the per-scrape timeout comes from Config.Scrape.Timeout.
	HTTPClient *http.Client
	// Rand, when set, draws each endpoint's start offset within the
	// first interval; otherwise the offset is a hash of the address.
	Rand *rand.Rand
}

// Fleet discovers endpoints, scrapes their model servers and publishes
// immutable Snapshots. Load and Subscribe are safe for concurrent use.
type Fleet struct {
	cfg     ScrapeConfig
	maxAge  time.Duration
	clock   clock.WithTicker
	log     *slog.Logger
	disc    Discoverer
	client  *http.Client
	rnd     *rand.Rand
	m       *metrics
	mappers map[string]*mapper // by engine; "" is the pool default
	sem     chan struct{}

	snap atomic.Pointer[Snapshot]

	mu      sync.Mutex // guards eps, runCtx, rnd
	eps     map[string]*known
	runCtx  context.Context
	loops   sync.WaitGroup
	dirty   atomic.Bool
	pubMu   sync.Mutex // serialises refresh
	subMu   sync.Mutex
	subs    map[chan struct{}]struct{}
	running atomic.Bool
}

// known is a discovered target; ep is set while it is ready and scraped.
type known struct {
	t  Target
	ep *endpoint
}

// endpoint is the scrape state of one ready target.
type endpoint struct {
	addr   string
	req    *http.Request // template; each scrape uses a WithContext copy
	mp     *mapper
	cancel context.CancelFunc

	mu        sync.Mutex // guards the fields below
	t         Target
	m         Metrics
	scrapedAt time.Time
	fails     int       // consecutive unreachable failures
	recovered time.Time // the last success after unreachable failures
	reason    string    // last failure reason, "" after a success
	published scheduler.State
}

// New builds a fleet. It validates cfg and builds the discoverer; nothing
// runs until Run.
func New(cfg Config, deps Deps) (*Fleet, error) {
	if deps.Discoverer == nil {
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	} else if err := cfg.Scrape.Validate(); err != nil {
		return nil, err
	}
	f := &Fleet{
		cfg:     cfg.Scrape,
		maxAge:  cfg.Scrape.maxAge(),
		clock:   deps.Clock,
		log:     deps.Logger,
		disc:    deps.Discoverer,
		client:  deps.HTTPClient,
		rnd:     deps.Rand,
		mappers: map[string]*mapper{},
		sem:     make(chan struct{}, cfg.Scrape.Concurrency),
		eps:     map[string]*known{},
		subs:    map[chan struct{}]struct{}{},
	}
	if f.clock == nil {
		f.clock = clock.RealClock{}
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.client == nil {
		f.client = &http.Client{Transport: NewTransport(cfg.Scrape)}
	}
	for _, e := range Engines() {
		m, _ := EngineMapping(e)
		if e == cfg.Scrape.Engine {
			m = m.merge(cfg.Scrape.Metrics)
		}
		mp, err := m.compile()
		if err != nil {
			return nil, fmt.Errorf("fleet: engine %s: %w", e, err)
		}
		f.mappers[e] = mp
	}
	f.mappers[""] = f.mappers[cfg.Scrape.Engine]
	if f.disc == nil {
		d, err := newDiscoverer(cfg.Endpoints, deps, f.clock, f.log)
		if err != nil {
			return nil, err
		}
		f.disc = d
	}
	f.m = newMetrics(f, deps.Registerer)
	f.snap.Store(&Snapshot{Time: f.clock.Now()})
	return f, nil
}

// NewTransport returns the keep-alive transport used for scraping: no
// proxy, no compression (bodies are small and local), short dial timeout.
func NewTransport(cfg ScrapeConfig) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		// A vLLM exposition is ~30 KB: read it in one or two syscalls
		// instead of eight.
		ReadBufferSize: 64 << 10,
	}
}

func newDiscoverer(cfg EndpointsConfig, deps Deps, clk clock.WithTicker, log *slog.Logger) (Discoverer, error) {
	switch cfg.Mode {
	case ModeStatic:
		return NewStatic(cfg.File, cfg.ReloadInterval, clk, log), nil
	case ModePods, ModeEndpointSlices:
		if deps.Kube == nil {
			return nil, fmt.Errorf("fleet: endpoints.mode %s needs a Kubernetes client (Deps.Kube)", cfg.Mode)
		}
	case ModeInferencePool:
		if deps.Kube == nil || deps.Dynamic == nil {
			return nil, fmt.Errorf("fleet: endpoints.mode %s needs Kubernetes clients (Deps.Kube, Deps.Dynamic)", cfg.Mode)
		}
	}
	return NewKube(cfg, deps.Kube, deps.Dynamic, log)
}

// Load returns the current snapshot (never nil; version 0 before the first
// discovery update).
func (f *Fleet) Load() *Snapshot { return f.snap.Load() }

// Subscribe returns a channel that receives a value after publications,
// and a function that ends the subscription. The channel has capacity one
// and the publisher never blocks on it: a slow reader sees one pending
// notification for any number of publications and should call Load.
func (f *Fleet) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	f.subMu.Lock()
	f.subs[ch] = struct{}{}
	f.subMu.Unlock()
	return ch, func() {
		f.subMu.Lock()
		delete(f.subs, ch)
		f.subMu.Unlock()
	}
}

// Run discovers, scrapes and publishes until ctx is done, then stops every
// scrape loop and waits for it. It returns nil after ctx ends, or the
// discovery error that stopped it. Run may be called once.
func (f *Fleet) Run(ctx context.Context) error {
	if !f.running.CompareAndSwap(false, true) {
		return errors.New("fleet: Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.mu.Lock()
	f.runCtx = ctx
	f.mu.Unlock()

	var wg sync.WaitGroup
	var discErr error
	wg.Go(func() {
		if err := f.disc.Run(ctx, f); err != nil && ctx.Err() == nil {
			discErr = fmt.Errorf("fleet: discovery: %w", err)
			cancel()
		}
	})
	wg.Go(func() { f.publishLoop(ctx) })
	wg.Wait()

	f.mu.Lock()
	for _, k := range f.eps {
		if k.ep != nil {
			k.ep.cancel()
		}
	}
	f.mu.Unlock()
	f.loops.Wait()
	return discErr
}

// publishLoop re-evaluates and publishes the snapshot every interval, so
// fresh scrapes and staleness reach readers within one interval.
func (f *Fleet) publishLoop(ctx context.Context) {
	t := f.clock.NewTicker(f.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			f.refresh(false)
		}
	}
}

// Error implements Sink: it logs and counts a discovery problem.
func (f *Fleet) Error(err error) {
	f.m.discoveryErrors.Inc()
	f.log.Error("endpoint discovery error; keeping the previous endpoint list", "err", err)
}

// Update implements Sink: it installs a new target list, starts and stops
// scrape loops, counts churn and publishes at once.
func (f *Fleet) Update(targets []Target) {
	start := f.clock.Now()
	byAddr := make(map[string]Target, len(targets))
	for _, t := range targets {
		if _, _, err := net.SplitHostPort(t.Address); err != nil {
			f.Error(fmt.Errorf("target %q: %w", t.Address, err))
			continue
		}
		if _, dup := byAddr[t.Address]; dup {
			f.Error(fmt.Errorf("target %q listed twice; keeping the first", t.Address))
			continue
		}
		if _, ok := f.mappers[t.Engine]; !ok {
			f.Error(fmt.Errorf("target %q: unknown engine %q", t.Address, t.Engine))
			t.Engine = ""
		}
		byAddr[t.Address] = t
	}

	f.mu.Lock()
	for addr, k := range f.eps {
		if _, ok := byAddr[addr]; !ok {
			f.m.changes[ChangeRemoved].Inc()
			if k.t.Ready {
				f.m.changes[ChangeNotReady].Inc()
			}
			f.stop(k)
			delete(f.eps, addr)
		}
	}
	for addr, t := range byAddr {
		k := f.eps[addr]
		if k == nil {
			k = &known{}
			f.eps[addr] = k
			f.m.changes[ChangeAdded].Inc()
			if t.Ready {
				f.m.changes[ChangeReady].Inc()
			}
		} else if k.t.Ready != t.Ready {
			if t.Ready {
				f.m.changes[ChangeReady].Inc()
			} else {
				f.m.changes[ChangeNotReady].Inc()
			}
		}
		if k.ep != nil && (!t.Ready || k.t.Engine != t.Engine) {
			f.stop(k)
		}
		k.t = t
		if t.Ready {
			if k.ep == nil {
				f.start(k)
			} else {
				k.ep.mu.Lock()
				k.ep.t = t
				k.ep.mu.Unlock()
			}
		}
	}
	f.mu.Unlock()
	f.dirty.Store(true)
	f.refresh(true)
	f.m.refresh.Observe(f.clock.Since(start).Seconds())
}

// stop ends k's scrape loop (without waiting; Run waits for all loops).
// f.mu must be held.
func (f *Fleet) stop(k *known) {
	if k.ep != nil {
		k.ep.cancel()
		k.ep = nil
	}
}

// start begins scraping k.t. f.mu must be held.
func (f *Fleet) start(k *known) {
	host, port, _ := net.SplitHostPort(k.t.Address)
	if f.cfg.Port != 0 {
		port = strconv.Itoa(f.cfg.Port)
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(host, port)+f.cfg.Path, nil)
	if err != nil {
		// Update validated the address; only a bad scrape.path can fail,
		// and Validate rejects those.
		f.log.Error("cannot build scrape request", "endpoint", k.t.Address, "err", err)
		return
	}
	req.Header.Set("Accept", acceptHeader)
	ep := &endpoint{
		addr:      k.t.Address,
		req:       req,
		mp:        f.mappers[k.t.Engine],
		t:         k.t,
		published: scheduler.StateStale,
	}
	k.ep = ep
	if f.runCtx == nil {
		// Update before Run (tests feeding a Sink directly): publish the
		// target without scraping it.
		ep.cancel = func() {}
		return
	}
	ctx, cancel := context.WithCancel(f.runCtx)
	ep.cancel = cancel
	offset := f.offset(ep.addr)
	f.loops.Go(func() { f.scrapeLoop(ctx, ep, offset) })
}

// offset spreads first scrapes over one interval. f.mu must be held.
func (f *Fleet) offset(addr string) time.Duration {
	iv := int64(f.cfg.Interval)
	if f.rnd != nil {
		return time.Duration(f.rnd.Int63n(iv))
	}
	h := fnv.New64a()
	io.WriteString(h, addr)
	return time.Duration(h.Sum64() % uint64(iv))
}

// refresh builds and publishes a snapshot when scrapes or discovery changed
// something or an endpoint's state moved (fresh → stale, …). force
// publishes regardless.
func (f *Fleet) refresh(force bool) {
	f.pubMu.Lock()
	defer f.pubMu.Unlock()
	now := f.clock.Now()
	f.mu.Lock()
	list := make([]*endpoint, 0, len(f.eps))
	for _, k := range f.eps {
		if k.ep != nil {
			list = append(list, k.ep)
		}
	}
	f.mu.Unlock()
	changed := f.dirty.Swap(false) || force
	for _, ep := range list {
		ep.mu.Lock()
		if st := f.state(ep, now); st != ep.published {
			changed = true
		}
		ep.mu.Unlock()
	}
	if !changed {
		return
	}
	slices.SortFunc(list, func(a, b *endpoint) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	eps := make([]scheduler.Endpoint, len(list))
	for i, ep := range list {
		ep.mu.Lock()
		st := f.state(ep, now)
		ep.published = st
		eps[i] = scheduler.Endpoint{
			Address:        ep.addr,
			Name:           ep.t.Name,
			Models:         servedModels(ep.t.Models, ep.m.Models),
			Labels:         ep.t.Labels,
			Capacity:       ep.t.Capacity,
			Waiting:        ep.m.Waiting,
			Running:        ep.m.Running,
			KVUtil:         ep.m.KVUtil,
			LoRA:           ep.m.LoRA,
			CacheBlockSize: ep.m.CacheBlockSize,
			CacheBlocks:    ep.m.CacheBlocks,
			ScrapedAt:      ep.scrapedAt,
			State:          st,
			RecoveredAt:    ep.recovered,
		}
		ep.mu.Unlock()
	}
	prev := f.snap.Load()
	f.snap.Store(&Snapshot{Version: prev.Version + 1, Time: now, Endpoints: eps})
	f.subMu.Lock()
	for ch := range f.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	f.subMu.Unlock()
}

// state is ep's state at now. ep.mu must be held. Refused connections and
// HTTP errors make an endpoint unhealthy, which takes it out of routing
// (scheduler.HealthyFilter). Timeouts only back its scrapes off: a server
// too busy to answer /metrics in time may still be serving, so its metrics
// go stale instead (routing fails open to it; requests that fail there are
// retried and, repeated, eject it).
func (f *Fleet) state(ep *endpoint, now time.Time) scheduler.State {
	switch {
	case ep.fails >= f.cfg.UnhealthyAfter && ep.reason != ReasonTimeout:
		return scheduler.StateUnhealthy
	case ep.scrapedAt.IsZero() || now.Sub(ep.scrapedAt) > f.maxAge:
		return scheduler.StateStale
	}
	return scheduler.StateFresh
}

// servedModels is what discovery declared, or else what the server's
// metrics name.
func servedModels(declared, scraped []string) []string {
	if len(declared) > 0 {
		return declared
	}
	return scraped
}
