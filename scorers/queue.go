package scorers

import (
	"fmt"

	"github.com/trimtab/trimtab/scheduler"
)

// QueueConfig configures the queue scorer. It has no parameters today; the
// struct exists so that unknown params are rejected and future ones have a
// home.
type QueueConfig struct{}

// DefaultQueueConfig returns the queue scorer's defaults.
func DefaultQueueConfig() QueueConfig { return QueueConfig{} }

// Validate checks the config.
func (QueueConfig) Validate() error { return nil }

// Queue is a distribution scorer that prefers endpoints with short waiting
// queues.
//
// Formula: with w_i = Waiting_i / Capacity_i (capacity 1 unless the
// endpoint declares one) over the candidates with fresh metrics,
//
//	score_i = (max w − w_i) / (max w − min w),  and 1 for all when max = min.
//
// 1 means the shortest queue among the candidates, 0 the longest.
// Neutral rule: a stale or unhealthy endpoint (or one reporting a NaN or
// negative count) is treated as the most loaded: it scores 0 while at least
// one candidate is fresh. When no candidate is fresh every candidate scores
// the neutral 1. Each case bumps trimtab_scorer_neutral_scores_total.
type Queue struct {
	c scrapedLoadCounters
}

// NewQueue builds a queue scorer named name.
func NewQueue(name string, cfg QueueConfig, deps Deps) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scorer %q: %w", name, err)
	}
	n, err := newNeutralCounters(name, deps.Registerer, reasonStale, reasonNoFresh, reasonInvalid)
	if err != nil {
		return nil, err
	}
	return &Queue{c: newScrapedLoadCounters(n)}, nil
}

// Category implements scheduler.Scorer: distribution.
func (*Queue) Category() scheduler.Category { return scheduler.CategoryDistribution }

// Score implements scheduler.Scorer.
func (q *Queue) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i, e := range eps {
		v := e.Waiting / e.CapacityOrOne()
		if fresh(e) && usableLoad(v) {
			out[i] = v
			continue
		}
		q.c.markScraped(e, v, out, i) // counts why, writes NaN
	}
	if !minMaxInPlace(out) {
		q.c.noFresh.Inc()
		allOnes(out)
	}
}
