package flow

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// OtherTenant is the tenant label of tenants beyond metric_tenants.
const OtherTenant = "other"

// metrics are flow control's, labelled by band and tenant; the tenant
// label takes the first metric_tenants tenants seen and folds the rest
// into "other", so cardinality is bounded.
type metrics struct {
	depth     *prometheus.GaugeVec
	wait      *prometheus.HistogramVec
	drops     *prometheus.CounterVec
	dispatchN *prometheus.CounterVec
	bands     []string
	max       int

	mu      sync.Mutex
	tenants map[string]string
}

func newMetrics(reg prometheus.Registerer, cfg Config, c *Controller) *metrics {
	m := &metrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trimtab_flow_queue_depth_requests",
			Help: "Requests waiting in the router's flow-control queue."}, []string{"band", "tenant"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trimtab_flow_wait_seconds",
			Help:    "Time dispatched requests waited in the router (0 for those dispatched at once).",
			Buckets: []float64{0, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"band"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trimtab_flow_drops_total",
			Help: "Requests flow control refused or lost, by reason (queue-full, shed, ttl-expired, shutting-down, client-gone)."},
			[]string{"band", "tenant", "reason"}),
		dispatchN: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trimtab_flow_dispatches_total",
			Help: "Requests flow control handed to the scheduler."}, []string{"band", "tenant"}),
		max:     cfg.MetricTenants,
		tenants: map[string]string{},
	}
	for _, b := range cfg.Bands {
		m.bands = append(m.bands, b.Name)
		m.wait.WithLabelValues(b.Name)
	}
	if reg != nil {
		reg.MustRegister(m.depth, m.wait, m.drops, m.dispatchN)
	}
	return m
}

// tenant returns the label for tenant.
func (m *metrics) tenant(t string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.tenants[t]; ok {
		return l
	}
	if len(m.tenants) < m.max {
		m.tenants[t] = t
		return t
	}
	return OtherTenant
}

func (m *metrics) queued(cl Class, d float64) {
	m.depth.WithLabelValues(m.bands[cl.Band], m.tenant(cl.Tenant)).Add(d)
}

func (m *metrics) drop(cl Class, reason string) {
	m.drops.WithLabelValues(m.bands[cl.Band], m.tenant(cl.Tenant), reason).Inc()
}

func (m *metrics) dispatched(cl Class, waited time.Duration) {
	m.dispatchN.WithLabelValues(m.bands[cl.Band], m.tenant(cl.Tenant)).Inc()
	m.wait.WithLabelValues(m.bands[cl.Band]).Observe(waited.Seconds())
}
