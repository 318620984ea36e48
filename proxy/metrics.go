package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/scheduler"
)

// pathMetrics are the per-endpoint latency and outcome metrics of one
// request path. The HTTP proxy registers them as trimtab_proxy_*, the
// ext_proc server as trimtab_extproc_*.
//
// Endpoints come and go, so children are resolved on first use and cached
// per endpoint (a sync.Map read on the hot path, no allocation); requests
// rejected before a pick are counted under endpoint "none".
//
// Pod addresses change with every rollout, so the series of an endpoint
// that has left the pool are deleted once it has been gone for
// forgetAfter, checked whenever the metrics are collected: a long-running
// router keeps series for its current endpoints, not for every pod it ever
// saw. Deletion happens at the first gather at least forgetAfter after the
// first gather that missed the endpoint, so a registry nobody gathers
// keeps growing. A request that completes on an endpoint after its series
// were deleted records on fresh series, which are deleted again the same
// way. Series are created and deleted under mu, so a late completion can
// never re-create series that nothing would delete (one racing the delete
// itself may be lost).
type pathMetrics struct {
	ttfb     *prometheus.HistogramVec
	duration *prometheus.HistogramVec
	requests *prometheus.CounterVec
	retries  prometheus.Counter
	eps      sync.Map // address → *epMetrics

	pool  func() *scheduler.Pool // nil: never prune
	clock clock.PassiveClock
	mu    sync.Mutex // serialises prune and series creation
}

// forgetAfter is how long an endpoint's series outlive its departure from
// the pool: longer than any request, so late completions still count.
const forgetAfter = 10 * time.Minute

// epMetrics caches one endpoint's series. ready and dead are read on the
// hot path without the lock; they only change under m.mu.
type epMetrics struct {
	m              *pathMetrics
	addr           string
	ready          atomic.Bool         // ttfb and duration are set
	dead           atomic.Bool         // prune deleted its series and dropped it from m.eps
	ttfb, duration prometheus.Observer // set once, before ready
	codes          sync.Map            // int → prometheus.Counter
	goneSince      time.Time           // when prune first missed it from the pool; guarded by m.mu
}

// observe records a completed request's first-byte time (when got) and
// duration, in seconds. Histogram series exist only for endpoints that
// answered.
func (e *epMetrics) observe(ttfb float64, got bool, duration float64) {
	if e.dead.Load() || !e.ready.Load() {
		e = e.m.histograms(e)
	}
	if got {
		e.ttfb.Observe(ttfb)
	}
	e.duration.Observe(duration)
}

// latencyBuckets span 1 ms to ~2 min: TTFB of a cached short prompt up to
// a long generation.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 18)

// newPathMetrics builds and registers the metrics of one request path.
// pool, when not nil, returns the installed pool, whose addresses keep
// their endpoints' series.
func newPathMetrics(component string, reg prometheus.Registerer, pool func() *scheduler.Pool, clk clock.PassiveClock) *pathMetrics {
	m := &pathMetrics{
		pool:  pool,
		clock: clk,
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trimtab_" + component + "_ttfb_seconds",
			Help:    "Time from pick to the first response byte, per endpoint.",
			Buckets: latencyBuckets,
		}, []string{"endpoint"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trimtab_" + component + "_request_duration_seconds",
			Help:    "Time from pick to the end of the response, per endpoint.",
			Buckets: latencyBuckets,
		}, []string{"endpoint"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trimtab_" + component + "_requests_total",
			Help: "Requests by endpoint and HTTP status answered (endpoint \"none\": rejected before a pick; code 0: cut before any status).",
		}, []string{"endpoint", "code"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_" + component + "_retries_total",
			Help: "Requests moved to a fallback endpoint after a failure before any byte reached the client.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.ttfb, m.duration, m.requests, m.retries, pruner{m})
	}
	return m
}

// pruner prunes departed endpoints whenever the registry is gathered. It
// describes no metrics (an unchecked collector) and reports none; the
// registry collects concurrently, so a pruned series may still appear in
// the gather that pruned it, and is gone from the next.
type pruner struct{ m *pathMetrics }

func (pruner) Describe(chan<- *prometheus.Desc)   {}
func (p pruner) Collect(chan<- prometheus.Metric) { p.m.prune() }

// prune deletes the series of endpoints absent from the pool for at least
// forgetAfter. Endpoint "none" is never pruned.
func (m *pathMetrics) prune() {
	if m.pool == nil {
		return
	}
	p := m.pool()
	if p == nil {
		return
	}
	live := make(map[string]struct{}, len(p.Endpoints))
	for i := range p.Endpoints {
		live[p.Endpoints[i].Address] = struct{}{}
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.eps.Range(func(k, v any) bool {
		addr, e := k.(string), v.(*epMetrics)
		if _, ok := live[addr]; ok || addr == "none" {
			e.goneSince = time.Time{}
			return true
		}
		if e.goneSince.IsZero() {
			e.goneSince = now
			return true
		}
		if now.Sub(e.goneSince) < forgetAfter {
			return true
		}
		e.dead.Store(true)
		m.eps.Delete(addr)
		m.ttfb.DeleteLabelValues(addr)
		m.duration.DeleteLabelValues(addr)
		m.requests.DeletePartialMatch(prometheus.Labels{"endpoint": addr})
		return true
	})
}

// histograms returns the entry to record e's address on, with its
// histogram series created: e, or the address's current entry when prune
// has retired e.
func (m *pathMetrics) histograms(e *epMetrics) *epMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	e = m.current(e)
	if !e.ready.Load() {
		e.ttfb = m.ttfb.WithLabelValues(e.addr)
		e.duration = m.duration.WithLabelValues(e.addr)
		e.ready.Store(true)
	}
	return e
}

// current returns e, or when prune has retired it the live entry for its
// address. The caller holds m.mu, so the result stays live until it
// unlocks.
func (m *pathMetrics) current(e *epMetrics) *epMetrics {
	for e.dead.Load() {
		e = m.endpoint(e.addr)
	}
	return e
}

func (m *pathMetrics) endpoint(addr string) *epMetrics {
	if e, ok := m.eps.Load(addr); ok {
		return e.(*epMetrics)
	}
	e := &epMetrics{m: m, addr: addr}
	actual, _ := m.eps.LoadOrStore(addr, e)
	return actual.(*epMetrics)
}

// count counts one answered request by endpoint and status code.
func (m *pathMetrics) count(addr string, code int) {
	e := m.endpoint(addr)
	if !e.dead.Load() {
		if c, ok := e.codes.Load(code); ok {
			c.(prometheus.Counter).Inc()
			return
		}
	}
	m.mu.Lock()
	e = m.current(e)
	c, ok := e.codes.Load(code)
	if !ok {
		c = m.requests.WithLabelValues(addr, strconv.Itoa(code))
		e.codes.Store(code, c)
	}
	m.mu.Unlock()
	c.(prometheus.Counter).Inc()
}
