package configurator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
)

var modes = [...]string{ModeStatic, ModeCalm, ModeRebalance, ModeFrozen}

// transitions lists every (from, to) pair the mode machine can take; all
// are exported from the start at 0.
var transitions = [...][2]string{
	{ModeCalm, ModeRebalance}, {ModeRebalance, ModeCalm},
	{ModeCalm, ModeFrozen}, {ModeRebalance, ModeFrozen},
	{ModeFrozen, ModeCalm}, {ModeFrozen, ModeRebalance},
}

// metrics are the configurator's Prometheus metrics. Children are resolved
// at construction and only set on a new version or a transition.
type metrics struct {
	weight      []prometheus.Gauge // per scorer, profile order
	budget      prometheus.Gauge
	mode        map[string]prometheus.Gauge
	transitions map[[2]string]prometheus.Counter
	freezes     prometheus.Counter
	version     prometheus.Gauge
}

func newMetrics(c *Configurator, reg prometheus.Registerer) *metrics {
	m := &metrics{
		budget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_configurator_distribution_budget",
			Help: "Distribution budget D of the latest weights: the distribution scorers' share of the categorised weights, in [0,1].",
		}),
		mode:        map[string]prometheus.Gauge{},
		transitions: map[[2]string]prometheus.Counter{},
		freezes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trimtab_configurator_watchdog_freezes_total",
			Help: "Times the flap watchdog froze the configurator.",
		}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trimtab_configurator_weights_version",
			Help: "Version of the latest weights the configurator produced.",
		}),
	}
	weight := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "trimtab_configurator_weight",
		Help: "Weight of each scorer in the latest weights the configurator produced, with its category.",
	}, []string{"scorer", "category"})
	for i, n := range c.names {
		m.weight = append(m.weight, weight.WithLabelValues(n, c.cats[i].String()))
	}
	mode := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "trimtab_configurator_mode",
		Help: "1 for the configurator's current mode (static, calm, rebalance, frozen), 0 for the others.",
	}, []string{"mode"})
	for _, md := range modes {
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
		reg.MustRegister(m.budget, m.freezes, m.version, weight, mode, tr)
	}
	return m
}

// published records a new weights version in mode.
func (m *metrics) published(c *Configurator, w *scheduler.Weights, mode string) {
	for i, g := range m.weight {
		g.Set(w.Values[i])
	}
	m.budget.Set(c.budget(w.Values))
	for md, g := range m.mode {
		if md == mode {
			g.Set(1)
		} else {
			g.Set(0)
		}
	}
	m.version.Set(float64(w.Version))
}

// transition counts a mode transition.
func (m *metrics) transition(from, to string) {
	if ctr, ok := m.transitions[[2]string{from, to}]; ok {
		ctr.Inc()
	}
}
