package control

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/scheduler"
)

// transitions lists every (from, to) pair the mode machine can take; all
// are exported from the start at 0.
var transitions = [...][2]string{
	{configurator.ModeCalm, configurator.ModeRebalance}, {configurator.ModeRebalance, configurator.ModeCalm},
	{configurator.ModeCalm, configurator.ModeFrozen}, {configurator.ModeRebalance, configurator.ModeFrozen},
	{configurator.ModeFrozen, configurator.ModeCalm}, {configurator.ModeFrozen, configurator.ModeRebalance},
}

// metrics are the loop's Prometheus metrics: the detector's signal and
// its components, and the configurator's budget and modes. The weights in
// force and their version are the scheduler's (trimtab_scheduler_weight,
// trimtab_scheduler_weights_version): one series per fact.
// Children are resolved at construction; a tick only sets gauges and
// increments counters, which does not allocate.
type metrics struct {
	signal      prometheus.Gauge
	component   [detector.NumComponents]prometheus.Gauge
	gated       map[detector.Gate]prometheus.Counter
	budget      prometheus.Gauge
	mode        map[string]prometheus.Gauge
	transitions map[[2]string]prometheus.Counter
	freezes     prometheus.Counter
	publishErrs prometheus.Counter

	tradeMix, tradeSpread, tradeDeclared, tradeBatch, tradeSlots, tradePrompt prometheus.Gauge
	tradeChanges                                                              prometheus.Counter
	fill, fillMix, fillChurn                                                  prometheus.Gauge
	fillChanges                                                               prometheus.Counter
}

// componentHelp is the help text of each detector component gauge, by unit.
var componentHelp = map[string]string{
	detector.UnitRatio:     "Components of the latest detector step that are ratios in [0,1]: herd (share of picks whose calm-weights choice was over the load guard's bound), request_cv (noise-corrected when subtract_noise is on), request_cv_uncorrected, kv_cv (KV CV × kv_max), kv_max (fullest endpoint's KV utilisation), raw, smoothed, pressure.",
	detector.UnitEndpoints: "Fresh endpoints the latest detector step measured (component endpoints).",
	detector.UnitRequests:  "Load the latest detector step measured: requests (running + waiting [+ in-flight]) and total_load (the same, each endpoint's divided by its capacity).",
	detector.UnitPicks:     "Picks in the herd window of the latest detector step, exponentially weighted (component picks).",
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		signal: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_detector_signal_ratio",
			Help: "Signal handed to the configurator, in [0,1]: by default the herd share (share of recent picks whose calm-weights choice was over the load guard's bound); with signal: cv the normalised CV of per-endpoint load (0 even, 1 all on one endpoint). 0 while gated.",
		}),
		gated:       map[detector.Gate]prometheus.Counter{},
		mode:        map[string]prometheus.Gauge{},
		transitions: map[[2]string]prometheus.Counter{},
		budget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_configurator_distribution_budget",
			Help: "Distribution budget D of the latest weights: the distribution scorers' share of the categorised weights, in [0,1].",
		}),
		freezes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_configurator_watchdog_freezes_total",
			Help: "Times the flap watchdog froze the configurator.",
		}),
		publishErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_control_publish_errors_total",
			Help: "Weights versions the scheduler refused; the previous weights stayed in force.",
		}),
		tradeMix: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_control_trade_mix_ratio",
			Help: "Where the trade law (adaptive.trade) holds the calm weights, in [0,1]: 0 the profile's shape, 1 the shape the law moves toward (the trade shape, the decode-bound or the slot-bound one).",
		}),
		tradeSpread: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_control_trade_prefill_spread_ratio",
			Help: "Spread the trade law read at its latest evaluation: fastest ÷ slowest learned prefill throughput over the endpoints with enough samples (1 with fewer than two).",
		}),
		tradeDeclared: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_control_trade_capacity_spread_ratio",
			Help: "Spread the trade law read at its latest evaluation: largest ÷ smallest declared endpoint capacity.",
		}),
		tradeBatch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_control_trade_batch_cost_ratio",
			Help: "Batch cost the trade law read at its latest evaluation with endpoints to read: the median over the endpoints with enough samples of the engine's learned seconds per decoding sequence apart from its context ÷ its step's fixed seconds.",
		}),
		tradeSlots: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_control_trade_kv_slots",
			Help: "KV slots the trade law read at its latest evaluation with a reading: the median over the endpoints with a scraped KV cache size of that size in tokens ÷ the KV a recent request adds (its uncached prompt tokens at the pick, mean over the last twelve evaluations' picks, plus the pool's learned mean output). adaptive.trade.slots_on compares it.",
		}),
		tradePrompt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_control_trade_prompt_tokens",
			Help: "Uncached prompt the trade law read at its latest evaluation with a reading: the prompt tokens a recent request brought that the endpoint it was sent to did not hold (at the pick, mean over the last twelve evaluations' picks). adaptive.trade.prompt_on compares it.",
		}),
		fill: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_control_fill_ratio",
			Help: "Prefix index fill the fill law (adaptive.fill) read at its latest evaluation: the mean over the pool's endpoints of the share of what the index can hold for each that it holds.",
		}),
		fillMix: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_control_fill_mix_ratio",
			Help: "Whether the fill law's weights (adaptive.fill.add) are in the calm weights: 1 while the caches count as full, else 0.",
		}),
		fillChurn: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_control_fill_churn_ratio",
			Help: "Churn the fill law (adaptive.fill) read at its latest evaluation: the entries the prefix index evicted for capacity in the last adaptive.fill.window over its capacity.",
		}),
		fillChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_control_fill_changes_total",
			Help: "Times the fill law added or removed its weights; each is logged (\"fill\") with its reason.",
		}),
		tradeChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_control_trade_changes_total",
			Help: "Times the trade law moved the calm weights' mix; each is logged (\"trade\") with its reason.",
		}),
	}
	// One gauge vector per unit (trimtab_detector_component_<unit>), its
	// children named by Signal.Components.
	comps := map[string]*prometheus.GaugeVec{}
	var zero detector.Signal
	for i, c := range zero.Components() {
		vec, ok := comps[c.Unit]
		if !ok {
			vec = prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: "trimtab_detector_component_" + c.Unit,
				Help: componentHelp[c.Unit],
			}, []string{"component"})
			comps[c.Unit] = vec
		}
		m.component[i] = vec.WithLabelValues(c.Name)
	}
	gated := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_detector_gated_total",
		Help: "Detector steps whose signal was held at 0, by reason.",
	}, []string{"reason"})
	for _, g := range detector.Gates {
		m.gated[g] = gated.WithLabelValues(string(g))
	}
	mode := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "trimtab_configurator_mode",
		Help: "1 for the configurator's current mode (static, calm, rebalance, frozen), 0 for the others.",
	}, []string{"mode"})
	for _, md := range configurator.Modes {
		m.mode[md] = mode.WithLabelValues(md)
	}
	tr := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_configurator_transitions_total",
		Help: "Mode transitions of the configurator, by from and to mode.",
	}, []string{"from", "to"})
	for _, p := range transitions {
		m.transitions[p] = tr.WithLabelValues(p[0], p[1])
	}
	if reg != nil {
		reg.MustRegister(m.signal, gated, m.budget, m.freezes, m.publishErrs, mode, tr, m.tradeMix, m.tradeSpread, m.tradeDeclared, m.tradeBatch, m.tradeSlots, m.tradePrompt, m.tradeChanges, m.fill, m.fillMix, m.fillChurn, m.fillChanges)
		for _, vec := range comps {
			reg.MustRegister(vec)
		}
	}
	return m
}

func (m *metrics) observe(s *detector.Signal) {
	m.signal.Set(s.Value)
	for i, c := range s.Components() {
		m.component[i].Set(c.Value)
	}
	if s.Gate != detector.GateNone {
		m.gated[s.Gate].Inc()
	}
}

// published records the weights in force and their mode.
func (m *metrics) published(w *scheduler.Weights, budget float64) {
	m.budget.Set(budget)
	for md, g := range m.mode {
		if md == w.Mode {
			g.Set(1)
		} else {
			g.Set(0)
		}
	}
}

func (m *metrics) transition(from, to string) {
	if ctr, ok := m.transitions[[2]string{from, to}]; ok {
		ctr.Inc()
	}
	if to == configurator.ModeFrozen {
		m.freezes.Inc()
	}
}
