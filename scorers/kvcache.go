package scorers

import (
	"fmt"
	"math"

	"github.com/trimtab/trimtab/scheduler"
)

// KVCacheConfig configures the kvcache scorer. It has no parameters today.
type KVCacheConfig struct{}

// DefaultKVCacheConfig returns the kvcache scorer's defaults.
func DefaultKVCacheConfig() KVCacheConfig { return KVCacheConfig{} }

// Validate checks the config.
func (KVCacheConfig) Validate() error { return nil }

// KVCache is a distribution scorer that prefers endpoints with free
// KV-cache space.
//
// Formula: score_i = 1 − clamp(KVUtil_i, 0, 1).
//
// 1 means an empty KV cache, 0 a full one. The score is absolute, not
// relative to the other candidates.
// Neutral rule: a stale or unhealthy endpoint, or one reporting NaN, scores
// 0 (treated as full) while at least one candidate is fresh; when no
// candidate is fresh every candidate scores the neutral 1. Each case bumps
// trimtab_scorer_neutral_scores_total.
type KVCache struct {
	c scrapedLoadCounters
}

// NewKVCache builds a kvcache scorer named name.
func NewKVCache(name string, cfg KVCacheConfig, deps Deps) (*KVCache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scorer %q: %w", name, err)
	}
	n, err := newNeutralCounters(name, deps.Registerer, reasonStale, reasonNoFresh, reasonInvalid)
	if err != nil {
		return nil, err
	}
	return &KVCache{c: newScrapedLoadCounters(n)}, nil
}

// Category implements scheduler.Scorer: distribution.
func (*KVCache) Category() scheduler.Category { return scheduler.CategoryDistribution }

// Score implements scheduler.Scorer.
func (k *KVCache) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	nFresh := 0
	for i, e := range eps {
		u := e.KVUtil
		switch {
		case !fresh(e):
			k.c.stale.Inc()
			out[i] = 0
		case math.IsNaN(u):
			k.c.invalid.Inc()
			out[i] = 0
		default:
			nFresh++
			out[i] = 1 - min(max(u, 0), 1)
		}
	}
	if nFresh == 0 {
		k.c.noFresh.Inc()
		allOnes(out)
	}
}
