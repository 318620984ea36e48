package flow

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/scheduler"
)

// Reasons a request is refused, carried by DropError and the
// X-Trimtab-Drop-Reason header.
const (
	ReasonQueueFull  = "queue-full"    // the queue is full and nothing below it may be shed
	ReasonShed       = "shed"          // dropped from a sheddable band to make room
	ReasonTTL        = "ttl-expired"   // waited its TTL without an endpoint getting room
	ReasonStopped    = "shutting-down" // the router stopped while it waited
	ReasonClientGone = "client-gone"   // the client went away while it waited (metrics only)
)

// DropError is flow control's refusal. Status is 429 (the pool is
// saturated: back off and retry) or 503 (the router is stopping).
type DropError struct {
	Reason string
	Status int
}

func (e *DropError) Error() string { return "flow control: request dropped: " + e.Reason }

// Errors Pick returns; compare with errors.Is or by pointer.
var (
	ErrQueueFull = &DropError{Reason: ReasonQueueFull, Status: http.StatusTooManyRequests}
	ErrShed      = &DropError{Reason: ReasonShed, Status: http.StatusTooManyRequests}
	ErrExpired   = &DropError{Reason: ReasonTTL, Status: http.StatusTooManyRequests}
	ErrStopped   = &DropError{Reason: ReasonStopped, Status: http.StatusServiceUnavailable}
)

// Picker is what flow control needs from the scheduler;
// *scheduler.Scheduler implements it.
type Picker interface {
	Pick(ctx context.Context, req *scheduler.Request) (*scheduler.Decision, error)
	Pool() *scheduler.Pool
}

// Deps are the controller's collaborators.
type Deps struct {
	// Scheduler is required.
	Scheduler Picker
	// Clock stamps waits and deadlines and times the dispatcher's poll;
	// nil is the real clock.
	Clock clock.WithTicker
	// Registerer receives trimtab_flow_* metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger; nil discards.
	Logger *slog.Logger
}

// Controller is flow control between the proxy and the scheduler. Pick
// dispatches a request at once while one of its candidates has room and
// nothing of its band or above waits; otherwise it queues it and Run's
// dispatcher picks it when an endpoint has room, with the pool as it is
// then. Safe for concurrent use; see doc.go for the concurrency model.
type Controller struct {
	cfg   Config
	cls   *Classifier
	det   Detector
	sched Picker
	clk   clock.WithTicker
	log   *slog.Logger
	m     *metrics

	wake    chan struct{}
	stopped atomic.Bool

	budget  []float64 // each band's prefill budget, seconds (Config.Budgets)
	share   []float64 // each band's share of the KV capacity (Config.Thresholds)
	reserve []int     // each band's BandConfig.Reserve
	release []float64 // each band's BandConfig.ReserveRelease

	// bytesOnly: a dispatch found no prefix-index answer, so pending
	// prefill is counted in prompt bytes (Detector.Wait).
	bytesOnly atomic.Bool

	mu      sync.Mutex // guards everything below
	q       *Queue[*waiter]
	ledger  map[string]*slot // router-local work in flight per address
	subset  []string         // scratch for the unsaturated candidates
	clear   []bool           // scratch: subset[i] carries no work of the band or below
	expired []*Item[*waiter]
}

// slot is one endpoint's entry in the ledger: the tokens this router's
// requests hold on it and how many of them are in flight per band.
type slot struct {
	tokens atomic.Int64
	bands  []atomic.Int64
}

// clearOf reports whether s carries no request of band or a lower one.
func (s *slot) clearOf(band int) bool {
	for b := band; b < len(s.bands); b++ {
		if s.bands[b].Load() > 0 {
			return false
		}
	}
	return true
}

// waiter is a queued request's rendezvous with the dispatcher.
type waiter struct {
	ctx    context.Context
	req    *scheduler.Request
	output int         // the request's output bound (≤ 0: unknown)
	band   int         // the band it is dispatched as
	ch     chan result // buffered 1: the dispatcher never blocks
	// notify, when set (Offer), receives the decision instead of ch.
	notify func(*scheduler.Decision, Lease, error)
}

// deliver hands w its decision. Called with c.mu held.
func (w *waiter) deliver(r result) {
	if w.notify != nil {
		w.notify(r.d, r.lease, r.err)
		return
	}
	w.ch <- r
}

type result struct {
	d     *scheduler.Decision
	lease Lease
	err   error
}

// Lease is the tokens a dispatched request holds on its endpoint's
// ledger. Release gives them back; the caller releases exactly once, when
// the request ends (after Decision.Done). The zero Lease releases
// nothing. Retries that move the request keep the charge on the first
// endpoint.
type Lease struct {
	c      *Controller
	s      *slot
	band   int
	tokens int64
}

// Release returns the lease's tokens and wakes the dispatcher.
func (l Lease) Release() {
	if l.c == nil {
		return
	}
	l.s.tokens.Add(-l.tokens)
	l.s.bands[l.band].Add(-1)
	l.c.poke()
}

// New builds a controller for a valid cfg (Enabled or not: the caller
// decides whether to use it).
func New(cfg Config, deps Deps) (*Controller, error) {
	cls, err := NewClassifier(cfg)
	if err != nil {
		return nil, err
	}
	if deps.Scheduler == nil {
		return nil, errors.New("flow: New needs Deps.Scheduler")
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	shed := make([]bool, len(cfg.Bands))
	for i, b := range cfg.Bands {
		shed[i] = b.Sheddable
	}
	c := &Controller{
		cfg: cfg, cls: cls, det: NewDetector(cfg.Saturation), sched: deps.Scheduler,
		clk: deps.Clock, log: deps.Logger,
		wake:   make(chan struct{}, 1),
		q:      NewQueue[*waiter](len(cfg.Bands), cfg.MaxQueue, shed),
		ledger: map[string]*slot{},
	}
	for i, w := range cfg.Budgets() {
		c.budget = append(c.budget, w.Seconds())
		c.reserve = append(c.reserve, cfg.Bands[i].Reserve)
		c.release = append(c.release, cfg.Bands[i].ReserveRelease)
		c.share = append(c.share, cfg.Thresholds()[i])
	}
	c.m = newMetrics(deps.Registerer, cfg, c)
	return c, nil
}

// Classifier returns the controller's classifier.
func (c *Controller) Classifier() *Classifier { return c.cls }

// Detector returns the controller's saturation detector.
func (c *Controller) Detector() Detector { return c.det }

// Len returns how many requests wait in the router.
func (c *Controller) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.q.Len()
}

// Load returns the router-local tokens in flight on addr.
func (c *Controller) Load(addr string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.ledger[addr]; s != nil {
		return s.tokens.Load()
	}
	return 0
}

// Pick returns the decision for req of class cl, charged to its
// endpoint's ledger by the returned Lease, which the caller releases when
// the request ends (as it calls Decision.Done). It blocks while the
// request waits in the queue; ctx ending takes it out (ctx's error is
// returned). output (≤ 0: unknown) and the request's uncached prompt on
// the endpoint picked size the charge (Detector.Tokens).
// Errors are the scheduler's, a *DropError, or ctx's.
func (c *Controller) Pick(ctx context.Context, req *scheduler.Request, cl Class, output int) (*scheduler.Decision, Lease, error) {
	w := &waiter{ctx: ctx, req: req, output: output, ch: make(chan result, 1)}
	it, r := c.submit(w, &cl)
	if it == nil {
		return r.d, r.lease, r.err
	}

	select {
	case r := <-w.ch:
		return r.d, r.lease, r.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if it.Queued() {
		c.q.Remove(it)
		c.m.queued(cl, -1)
		c.mu.Unlock()
		c.m.drop(cl, ReasonClientGone)
		return nil, Lease{}, ctx.Err()
	}
	c.mu.Unlock()
	if r := <-w.ch; r.d != nil { // dispatched as the client left
		r.d.Done(scheduler.Outcome{Kind: scheduler.OutcomeCanceled})
		r.lease.Release()
	}
	return nil, Lease{}, ctx.Err()
}

// submit dispatches w's request at once when it may, returning its
// result and a nil item, or queues it and returns its item; cl's band is
// corrected to the default when out of range.
func (c *Controller) submit(w *waiter, cl *Class) (*Item[*waiter], result) {
	if cl.Band < 0 || cl.Band >= len(c.cfg.Bands) {
		cl.Band = c.cls.def
	}
	w.band = cl.Band
	req := w.req
	now := c.clk.Now()
	c.mu.Lock()
	ahead := 0
	for b := 0; b <= cl.Band; b++ {
		ahead += c.q.BandLen(b)
	}
	if ahead == 0 {
		if subset, room := c.room(req, cl.Band, now, 1); room {
			r := c.dispatch(w, subset)
			c.mu.Unlock()
			if r.err == nil {
				c.m.dispatched(*cl, 0)
			}
			return nil, r
		}
	}
	if c.stopped.Load() {
		c.mu.Unlock()
		c.m.drop(*cl, ReasonStopped)
		return nil, result{err: ErrStopped}
	}
	it := &Item[*waiter]{Value: w, Band: cl.Band, Tenant: cl.Tenant, Enqueued: now, Deadline: now.Add(c.cls.TTL(*cl))}
	victim, ok := c.q.Push(it)
	if !ok {
		c.mu.Unlock()
		c.m.drop(*cl, ReasonQueueFull)
		return nil, result{err: ErrQueueFull}
	}
	if victim != nil {
		victim.Value.deliver(result{err: ErrShed})
		c.m.drop(Class{Band: victim.Band, Tenant: victim.Tenant}, ReasonShed)
	}
	c.m.queued(*cl, 1)
	c.mu.Unlock()
	c.poke()
	return it, result{}
}

// room reports whether req may be dispatched now as a request of band:
// one of its eligible endpoints has room for the band, or it has no
// eligible endpoint (the scheduler then answers why). An endpoint has
// room for a band when it is not saturated for the band's share of its KV
// capacity (Detector.Saturated, Config.Thresholds) and its
// pending prefill wait (Detector.Wait) is below the band's budget; and,
// for a band with a reserve, when it is not one of the clear endpoints
// (carrying none of this router's requests of the band or a lower one)
// the band leaves to the bands above: while at most min(reserve,
// eligible − 1) endpoints with room are clear, the band may use none of
// them. The reserve is therefore sticky: the endpoints the band keeps
// clear stay the same while its work runs elsewhere, rather than moving
// with each endpoint's prefill. A request with less than the band's
// ReserveRelease of its TTL left (left) ignores the reserve.
// subset is nil when every eligible
// endpoint has room, else the addresses of those that do (c.subset,
// valid under c.mu). Called with c.mu held.
func (c *Controller) room(req *scheduler.Request, band int, now time.Time, left float64) (subset []string, ok bool) {
	pool := c.sched.Pool()
	if pool == nil {
		return nil, true
	}
	subset, clear := c.subset[:0], c.clear[:0]
	eligible, full, nclear := 0, 0, 0
	bytesOnly := c.bytesOnly.Load()
	for _, e := range pool.Pointers() {
		if !Eligible(e, req, now) {
			continue
		}
		eligible++
		s := c.load(e.Address)
		if c.det.Saturated(e, s.tokens.Load(), c.share[band], now) || c.det.Wait(e, bytesOnly) >= c.budget[band] {
			full++
			continue
		}
		f := s.clearOf(band)
		if f {
			nclear++
		}
		subset, clear = append(subset, e.Address), append(clear, f)
	}
	if r := min(c.reserve[band], eligible-1); nclear > 0 && nclear <= r && left >= c.release[band] {
		n := 0
		for i, a := range subset {
			if !clear[i] {
				subset[n] = a
				n++
			}
		}
		full += len(subset) - n
		subset = subset[:n]
	}
	c.subset, c.clear = subset, clear
	if eligible == 0 || full == 0 {
		return nil, true
	}
	return subset, full < eligible
}

// left returns the share of its TTL still ahead of it at now, in [0,1]
// (1 without a TTL).
func left(it *Item[*waiter], now time.Time) float64 {
	ttl := it.Deadline.Sub(it.Enqueued)
	if ttl <= 0 {
		return 1
	}
	return min(max(float64(it.Deadline.Sub(now))/float64(ttl), 0), 1)
}

// load returns addr's ledger entry, creating it. Called with c.mu held.
func (c *Controller) load(addr string) *slot {
	s := c.ledger[addr]
	if s == nil {
		if pool := c.sched.Pool(); pool != nil && len(c.ledger) > 2*len(pool.Pointers())+16 {
			for a, x := range c.ledger {
				if x.tokens.Load() == 0 && x.clearOf(0) {
					delete(c.ledger, a)
				}
			}
		}
		s = &slot{bands: make([]atomic.Int64, len(c.cfg.Bands))}
		c.ledger[addr] = s
	}
	return s
}

// dispatch picks w's request, restricted to subset when it is non-nil,
// and charges the endpoint. Called with c.mu held.
func (c *Controller) dispatch(w *waiter, subset []string) result {
	req := w.req
	keep := req.Subset
	if subset != nil {
		req.Subset = subset
	}
	d, err := c.sched.Pick(w.ctx, req)
	req.Subset = keep
	if err != nil {
		return result{err: err}
	}
	uncached, known := d.Uncached()
	if !known && !c.bytesOnly.Load() {
		c.bytesOnly.Store(true)
	}
	tokens := c.det.Tokens(len(req.Prompt), uncached, known, w.output)
	s := c.load(d.Endpoint.Address)
	s.tokens.Add(tokens)
	s.bands[w.band].Add(1)
	return result{d: d, lease: Lease{c: c, s: s, band: w.band, tokens: tokens}}
}

func (c *Controller) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run dispatches queued requests until ctx ends: whenever a lease is
// released or a request is queued, and every poll interval while
// requests wait (for scraped metrics and other routers' load). When ctx
// ends it answers every queued request ErrStopped and returns nil; later
// requests that would wait get ErrStopped too.
func (c *Controller) Run(ctx context.Context) error {
	t := c.clk.NewTicker(c.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.stop()
			return nil
		case <-c.wake:
		case <-t.C():
		}
		c.Drain()
	}
}

func (c *Controller) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped.Store(true)
	for it := c.q.Pop(); it != nil; it = c.q.Pop() {
		cl := Class{Band: it.Band, Tenant: it.Tenant}
		c.m.queued(cl, -1)
		c.m.drop(cl, ReasonStopped)
		it.Value.deliver(result{err: ErrStopped})
	}
}

// Drain does one pass of the dispatcher at the clock's now: it drops the
// requests whose TTL ran out (ErrExpired), then dispatches from the head
// of the queue while the head's request has an endpoint with room. Run
// calls it; tests call it to step the dispatcher.
func (c *Controller) Drain() {
	now := c.clk.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expired = c.q.Expire(now, c.expired[:0])
	for i, it := range c.expired {
		cl := Class{Band: it.Band, Tenant: it.Tenant}
		c.m.queued(cl, -1)
		c.m.drop(cl, ReasonTTL)
		it.Value.deliver(result{err: ErrExpired})
		c.expired[i] = nil
	}
	for {
		it := c.q.Peek()
		if it == nil {
			return
		}
		w := it.Value
		subset, ok := c.room(w.req, w.band, now, left(it, now))
		if !ok {
			return
		}
		c.q.Pop()
		cl := Class{Band: it.Band, Tenant: it.Tenant}
		c.m.queued(cl, -1)
		r := c.dispatch(w, subset)
		c.m.dispatched(cl, now.Sub(it.Enqueued))
		w.deliver(r)
	}
}
