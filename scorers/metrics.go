package scorers

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// neutralMetricName counts scores a scorer replaced by its neutral value
// because the data it needed was missing or stale.
const neutralMetricName = "trimtab_scorer_neutral_scores_total"

// Reasons for a neutral score (the reason label).
const (
	reasonStale   = "stale"    // endpoint metrics stale or unhealthy
	reasonNoFresh = "no_fresh" // no candidate had fresh metrics
	reasonInvalid = "invalid"  // a reported value was NaN or out of range
	reasonUnknown = "unknown_endpoint"
)

// neutralCounters is one scorer's neutral-score counter, with its label
// children resolved once so the request path only increments.
type neutralCounters struct {
	vec      *prometheus.CounterVec
	byReason map[string]prometheus.Counter
}

// newNeutralCounters builds the counter for scorer name with the given
// reasons and registers it on reg (nil: not registered).
func newNeutralCounters(name string, reg prometheus.Registerer, reasons ...string) (*neutralCounters, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        neutralMetricName,
		Help:        "Scores a scorer replaced by its neutral value because data was missing or stale, by reason.",
		ConstLabels: prometheus.Labels{"scorer": name},
	}, []string{"reason"})
	n := &neutralCounters{vec: vec, byReason: make(map[string]prometheus.Counter, len(reasons))}
	for _, r := range reasons {
		n.byReason[r] = vec.WithLabelValues(r)
	}
	if reg != nil {
		if err := reg.Register(vec); err != nil {
			return nil, fmt.Errorf("scorer %q: register metrics: %w", name, err)
		}
	}
	return n, nil
}

// counter returns the child for reason; reason must have been declared.
func (n *neutralCounters) counter(reason string) prometheus.Counter { return n.byReason[reason] }
