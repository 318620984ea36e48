package fleet

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
)

// Churn types, the values of the type label of
// trimtab_fleet_endpoint_changes_total.
const (
	ChangeAdded    = "added"
	ChangeRemoved  = "removed"
	ChangeReady    = "ready"
	ChangeNotReady = "not_ready"
)

// metrics are the fleet's own metrics. Label children are resolved once.
type metrics struct {
	discoveryErrors prometheus.Counter
	changes         map[string]prometheus.Counter
	refresh         prometheus.Histogram

	scrapeDuration prometheus.Histogram
	failures       map[string]prometheus.Counter
}

func newMetrics(f *Fleet, reg prometheus.Registerer) *metrics {
	m := &metrics{
		discoveryErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_fleet_discovery_errors_total",
			Help: "Discovery problems that left the endpoint list unchanged (bad endpoints file, malformed InferencePool, …).",
		}),
		refresh: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trimtab_fleet_refresh_duration_seconds",
			Help:    "Time to apply a discovery update and publish the new snapshot.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
		}),
		scrapeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trimtab_fleet_scrape_duration_seconds",
			Help:    "Duration of one model-server metrics scrape, successful or not.",
			Buckets: prometheus.ExponentialBuckets(2.5e-4, 2, 14),
		}),
		changes:  map[string]prometheus.Counter{},
		failures: map[string]prometheus.Counter{},
	}
	changes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_fleet_endpoint_changes_total",
		Help: "Endpoint churn seen by discovery, by type (added, removed, ready, not_ready).",
	}, []string{"type"})
	for _, t := range []string{ChangeAdded, ChangeRemoved, ChangeReady, ChangeNotReady} {
		m.changes[t] = changes.WithLabelValues(t)
	}
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_fleet_scrape_failures_total",
		Help: "Failed model-server scrapes by reason.",
	}, []string{"reason"})
	for _, r := range Reasons {
		m.failures[r] = failures.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.discoveryErrors, m.refresh, m.scrapeDuration, changes, failures, &collector{f: f})
	}
	return m
}

var (
	descEndpoints = prometheus.NewDesc("trimtab_fleet_endpoints",
		"Ready endpoints in the current snapshot per served model (\"*\": serves any model).", []string{"model"}, nil)
	descStates = prometheus.NewDesc("trimtab_fleet_endpoint_states",
		"Ready endpoints in the current snapshot per metrics state (fresh, stale, unhealthy).", []string{"state"}, nil)
	descAge = prometheus.NewDesc("trimtab_fleet_metrics_age_seconds",
		"Age of each endpoint's last successfully scraped metrics at collection time; absent before the first success.",
		[]string{"endpoint"}, nil)
)

// collector computes snapshot-derived values at scrape time.
type collector struct{ f *Fleet }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descEndpoints
	ch <- descStates
	ch <- descAge
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.f.Load()
	perModel := map[string]int{}
	states := [3]int{}
	for i := range snap.Endpoints {
		e := &snap.Endpoints[i]
		if len(e.Models) == 0 {
			perModel["*"]++
		}
		for _, m := range e.Models {
			perModel[m]++
		}
		if int(e.State) < len(states) {
			states[e.State]++
		}
	}
	for m, n := range perModel {
		ch <- prometheus.MustNewConstMetric(descEndpoints, prometheus.GaugeValue, float64(n), m)
	}
	for _, st := range []scheduler.State{scheduler.StateFresh, scheduler.StateStale, scheduler.StateUnhealthy} {
		ch <- prometheus.MustNewConstMetric(descStates, prometheus.GaugeValue, float64(states[st]), st.String())
	}
	now := c.f.clock.Now()
	type age struct {
		addr string
		secs float64
	}
	var ages []age
	c.f.mu.Lock()
	for addr, ep := range c.f.eps {
		if ep.ep == nil {
			continue
		}
		ep.ep.mu.Lock()
		at := ep.ep.scrapedAt
		ep.ep.mu.Unlock()
		if !at.IsZero() {
			ages = append(ages, age{addr, now.Sub(at).Seconds()})
		}
	}
	c.f.mu.Unlock()
	sort.Slice(ages, func(i, j int) bool { return ages[i].addr < ages[j].addr })
	for _, a := range ages {
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, a.secs, a.addr)
	}
}
