package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the scheduler's Prometheus metrics. Label children are
// resolved once here so the request path only increments.
type metrics struct {
	picks           prometheus.Counter
	guarded         prometheus.Counter
	waitBounded     prometheus.Counter
	probes          prometheus.Counter
	joinSpread      prometheus.Counter
	errNoEndpoints  prometheus.Counter
	errUnknownModel prometheus.Counter
	errUnreachable  prometheus.Counter
	clamped         []prometheus.Counter // per scorer
	outcomes        [3]prometheus.Counter
	// ejectionsRefused counts ejections the cap (max_ejected_percent, never
	// the last endpoint) refused.
	ejectionsRefused prometheus.Counter
}

func newMetrics(s *Scheduler, reg prometheus.Registerer) *metrics {
	m := &metrics{
		picks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_scheduler_picks_total",
			Help: "Decisions made by the scheduler.",
		}),
		guarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_scheduler_guarded_picks_total",
			Help: "Decisions whose best-scoring candidate was over the load guard's bound, so a candidate within it was chosen.",
		}),
		waitBounded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_scheduler_wait_bounded_picks_total",
			Help: "Decisions whose best-ranked candidate expected a wait for its first token far above the shortest (scheduler.guard.wait_factor), so it was ranked after the candidates within the bound.",
		}),
		joinSpread: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_scheduler_join_spread_picks_total",
			Help: "Decisions whose best-ranked candidate was still computing the request's prefix for a prompt that shares it, with a wait for the first token above scheduler.guard.join_factor × the shortest, so the request was ranked onto a candidate that computes the prefix again.",
		}),
		probes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_scheduler_probe_picks_total",
			Help: "Decisions sent to an idle endpoint whose calibration wanted observations (scheduler.probe) instead of the best-ranked candidate.",
		}),
		ejectionsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_scheduler_ejections_refused_total",
			Help: "Outlier ejections refused because the ejection cap was reached (outlier.max_ejected_percent of the pool, and never the last endpoint).",
		}),
	}
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_scheduler_pick_errors_total",
		Help: "Requests the scheduler could not place, by reason.",
	}, []string{"reason"})
	m.errNoEndpoints = errs.WithLabelValues("no_endpoints")
	m.errUnknownModel = errs.WithLabelValues("unknown_model")
	m.errUnreachable = errs.WithLabelValues("unreachable")
	clamped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_scheduler_scores_clamped_total",
		Help: "Scores outside [0,1] (or NaN) that a scorer returned and the scheduler clamped.",
	}, []string{"scorer"})
	for _, e := range s.entries {
		m.clamped = append(m.clamped, clamped.WithLabelValues(e.Name))
	}
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_scheduler_completions_total",
		Help: "Decisions completed through Done, by outcome.",
	}, []string{"outcome"})
	for k := OutcomeSuccess; k <= OutcomeCanceled; k++ {
		m.outcomes[k] = outcomes.WithLabelValues(k.String())
	}
	if reg != nil {
		reg.MustRegister(m.picks, m.guarded, m.waitBounded, m.joinSpread, m.probes, m.ejectionsRefused, errs, clamped, outcomes, &poolCollector{s: s})
	}
	return m
}

// pickError counts a filter's refusal by its reason; errors other than the
// scheduler's own count as unknown_model, the filter default.
func (m *metrics) pickError(err error) {
	switch err {
	case ErrUnreachable:
		m.errUnreachable.Inc()
	case ErrNoEndpoints:
		m.errNoEndpoints.Inc()
	default:
		m.errUnknownModel.Inc()
	}
}

func (m *metrics) outcome(k OutcomeKind) {
	if int(k) < len(m.outcomes) {
		m.outcomes[k].Inc()
	}
}

// poolCollector reports the installed pool at scrape time.
type poolCollector struct{ s *Scheduler }

var (
	inflightDesc = prometheus.NewDesc("trimtab_scheduler_inflight_requests",
		"Requests this router sent to an endpoint that have not completed.", []string{"endpoint"}, nil)
	pendingDesc = prometheus.NewDesc("trimtab_scheduler_pending_prefill_bytes",
		"Prompt bytes of requests this router sent to an endpoint that have no first response byte yet.", []string{"endpoint"}, nil)
	picksDesc = prometheus.NewDesc("trimtab_scheduler_endpoint_picks_total",
		"Decisions that chose an endpoint (retries moved to it included), since this router first saw it.", []string{"endpoint"}, nil)
	herdDesc = prometheus.NewDesc("trimtab_scheduler_endpoint_herd_picks_total",
		"Guarded decisions whose calm-weights choice was this endpoint while it was over the load guard's bound, or over the crowd bound while sharing the request's prefix with other endpoints: requests affinity would have piled on it.", []string{"endpoint"}, nil)
	ejectionsDesc = prometheus.NewDesc("trimtab_scheduler_ejections_total",
		"Outlier ejections of an endpoint after consecutive failures, since this router first saw it.", []string{"endpoint"}, nil)
	ejectedDesc = prometheus.NewDesc("trimtab_scheduler_endpoint_ejected",
		"1 while an endpoint is ejected (left out of picks after consecutive failures), else 0.", []string{"endpoint"}, nil)
	endpointsDesc = prometheus.NewDesc("trimtab_scheduler_endpoints",
		"Endpoints in the installed pool, by metrics state.", []string{"state"}, nil)
	weightDesc = prometheus.NewDesc("trimtab_scheduler_weight",
		"Weight in force for each scorer, with its category.", []string{"scorer", "category"}, nil)
	weightsVersionDesc = prometheus.NewDesc("trimtab_scheduler_weights_version",
		"Version of the weights in force.", nil, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inflightDesc
	ch <- picksDesc
	ch <- herdDesc
	ch <- pendingDesc
	ch <- ejectionsDesc
	ch <- ejectedDesc
	ch <- endpointsDesc
	ch <- weightDesc
	ch <- weightsVersionDesc
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.s.pool.Load()
	var states [3]int
	now := c.s.clk.Now()
	for _, e := range p.ptrs {
		ejected := 0.0
		if e.Ejected(now) {
			ejected = 1
		}
		ch <- prometheus.MustNewConstMetric(ejectionsDesc, prometheus.CounterValue, float64(e.Ejections()), e.Address)
		ch <- prometheus.MustNewConstMetric(ejectedDesc, prometheus.GaugeValue, ejected, e.Address)
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(e.LocalInFlight()), e.Address)
		ch <- prometheus.MustNewConstMetric(picksDesc, prometheus.CounterValue, float64(e.Picks()), e.Address)
		ch <- prometheus.MustNewConstMetric(herdDesc, prometheus.CounterValue, float64(e.HerdPicks()), e.Address)
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(e.LocalPendingPrefill()), e.Address)
		if int(e.State) < len(states) {
			states[e.State]++
		}
	}
	for st := StateFresh; st <= StateUnhealthy; st++ {
		ch <- prometheus.MustNewConstMetric(endpointsDesc, prometheus.GaugeValue, float64(states[st]), st.String())
	}
	w := c.s.weights.Load()
	for i, e := range c.s.entries {
		ch <- prometheus.MustNewConstMetric(weightDesc, prometheus.GaugeValue, w.Values[i], e.Name, e.Scorer.Category().String())
	}
	ch <- prometheus.MustNewConstMetric(weightsVersionDesc, prometheus.GaugeValue, float64(w.Version))
}
