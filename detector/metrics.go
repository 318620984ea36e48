package detector

import "github.com/prometheus/client_golang/prometheus"

// Component label values of trimtab_detector_component.
var components = [...]string{"request_cv", "request_cv_uncorrected", "kv_cv", "kv_max", "raw", "smoothed", "pressure", "endpoints", "total_load", "requests"}

// metrics are the detector's Prometheus metrics. Children are resolved at
// construction; Step only sets gauges and increments counters, which does
// not allocate.
type metrics struct {
	signal    prometheus.Gauge
	component [len(components)]prometheus.Gauge
	gated     map[Gate]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		signal: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_detector_signal",
			Help: "Imbalance signal handed to the configurator, in [0,1] (0 even load, 1 all load on one endpoint).",
		}),
		gated: map[Gate]prometheus.Counter{},
	}
	comp := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "trimtab_detector_component",
		Help: "Components of the latest detector step: request_cv (noise-corrected when subtract_noise is on), request_cv_uncorrected, kv_cv (KV CV × kv_max), kv_max (fullest endpoint's KV utilisation), raw, smoothed, pressure (ratios in [0,1]), endpoints (count), total_load (capacity-divided requests), requests (running + waiting [+ in-flight]).",
	}, []string{"component"})
	for i, c := range components {
		m.component[i] = comp.WithLabelValues(c)
	}
	gated := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_detector_gated_total",
		Help: "Detector steps whose signal was held at 0, by reason.",
	}, []string{"reason"})
	for _, g := range []Gate{GateTooFewEndpoints, GateLowLoad, GateZeroMean} {
		m.gated[g] = gated.WithLabelValues(string(g))
	}
	if reg != nil {
		reg.MustRegister(m.signal, comp, gated)
	}
	return m
}

func (m *metrics) observe(s *Signal) {
	m.signal.Set(s.Value)
	for i, v := range [len(components)]float64{s.RequestCV, s.RequestCVUncorrected, s.KVCV, s.KVMax, s.Raw, s.Smoothed, s.Pressure, float64(s.Endpoints), s.TotalLoad, s.Requests} {
		m.component[i].Set(v)
	}
	if s.Gate != GateNone {
		m.gated[s.Gate].Inc()
	}
}
