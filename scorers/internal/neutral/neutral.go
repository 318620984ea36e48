// Package neutral is the scorers' count of scores replaced by the neutral
// value, trimtab_scorer_neutral_scores_total{scorer, reason}: one counter
// vector per scorer, shared by the scorers package and its sub-packages so
// the metric has one name, help text and label set.
package neutral

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricName counts scores a scorer replaced by its neutral value
// because the data it needed was missing or stale.
const MetricName = "trimtab_scorer_neutral_scores_total"

// Reasons for a neutral score (the reason label).
const (
	Stale           = "stale"    // endpoint metrics stale or unhealthy
	NoFresh         = "no_fresh" // no candidate had fresh metrics
	Invalid         = "invalid"  // a reported value was NaN or out of range
	UnknownEndpoint = "unknown_endpoint"
)

// Counters is one scorer's neutral-score counter, with its label children
// resolved once so the request path only increments.
type Counters struct {
	// Vec is the counter vector, registered by New when it has a
	// registerer.
	Vec      *prometheus.CounterVec
	byReason map[string]prometheus.Counter
}

// New builds the counter for scorer name with the given reasons and
// registers it on reg (nil: not registered).
func New(name string, reg prometheus.Registerer, reasons ...string) (*Counters, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        MetricName,
		Help:        "Scores a scorer replaced by its neutral value because data was missing or stale, by reason.",
		ConstLabels: prometheus.Labels{"scorer": name},
	}, []string{"reason"})
	n := &Counters{Vec: vec, byReason: make(map[string]prometheus.Counter, len(reasons))}
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

// Counter returns the child for reason; reason must have been declared.
func (n *Counters) Counter(reason string) prometheus.Counter { return n.byReason[reason] }
