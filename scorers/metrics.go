package scorers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scorers/internal/neutral"
)

// neutralMetricName counts scores a scorer replaced by its neutral value
// because the data it needed was missing or stale.
const neutralMetricName = neutral.MetricName

// Reasons for a neutral score (the reason label).
const (
	reasonStale   = neutral.Stale
	reasonNoFresh = neutral.NoFresh
	reasonInvalid = neutral.Invalid
)

// neutralCounters is one scorer's neutral-score counter (neutral.Counters).
type neutralCounters struct{ *neutral.Counters }

// newNeutralCounters builds the counter for scorer name with the given
// reasons and registers it on reg (nil: not registered).
func newNeutralCounters(name string, reg prometheus.Registerer, reasons ...string) (*neutralCounters, error) {
	n, err := neutral.New(name, reg, reasons...)
	if err != nil {
		return nil, err
	}
	return &neutralCounters{n}, nil
}

// counter returns the child for reason; reason must have been declared.
func (n *neutralCounters) counter(reason string) prometheus.Counter { return n.Counter(reason) }
