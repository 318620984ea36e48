package proxy

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// pathMetrics are the per-endpoint latency and outcome metrics of one
// request path. The HTTP proxy registers them as trimtab_proxy_*, the
// ext_proc server as trimtab_extproc_*.
//
// Endpoints come and go, so children are resolved on first use and cached
// per endpoint (a sync.Map read on the hot path, no allocation); requests
// rejected before a pick are counted under endpoint "none".
type pathMetrics struct {
	ttfb     *prometheus.HistogramVec
	duration *prometheus.HistogramVec
	requests *prometheus.CounterVec
	retries  prometheus.Counter
	eps      sync.Map // address → *epMetrics
}

type epMetrics struct {
	m              *pathMetrics
	addr           string
	once           sync.Once
	ttfb, duration prometheus.Observer // resolved on first observation
	codes          sync.Map            // int → prometheus.Counter
}

// observe records a completed request's first-byte time (when got) and
// duration, in seconds. Histogram series exist only for endpoints that
// answered.
func (e *epMetrics) observe(ttfb float64, got bool, duration float64) {
	e.once.Do(func() {
		e.ttfb = e.m.ttfb.WithLabelValues(e.addr)
		e.duration = e.m.duration.WithLabelValues(e.addr)
	})
	if got {
		e.ttfb.Observe(ttfb)
	}
	e.duration.Observe(duration)
}

// latencyBuckets span 1 ms to ~2 min: TTFB of a cached short prompt up to
// a long generation.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 18)

func newPathMetrics(component string, reg prometheus.Registerer) *pathMetrics {
	m := &pathMetrics{
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
		reg.MustRegister(m.ttfb, m.duration, m.requests, m.retries)
	}
	return m
}

func (m *pathMetrics) endpoint(addr string) *epMetrics {
	if e, ok := m.eps.Load(addr); ok {
		return e.(*epMetrics)
	}
	e := &epMetrics{m: m, addr: addr}
	actual, _ := m.eps.LoadOrStore(addr, e)
	return actual.(*epMetrics)
}

func (m *pathMetrics) count(addr string, code int) {
	e := m.endpoint(addr)
	if c, ok := e.codes.Load(code); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.requests.WithLabelValues(addr, strconv.Itoa(code))
	actual, _ := e.codes.LoadOrStore(code, c)
	actual.(prometheus.Counter).Inc()
}
