package scorers

import (
	"fmt"
	"math"

	"github.com/trimtab/trimtab/scheduler"
)

// reasonNoIndex marks a token-load score computed without the prefix
// index's match (no prefix scorer in the profile): loads are then prompt
// bytes ÷ bytes_per_token, undiscounted.
const reasonNoIndex = "no_prefix_index"

// TokenLoadConfig configures the token-load scorer (YAML params of a
// scorer with type "token-load").
type TokenLoadConfig struct {
	// QueueThresholdTokens, when > 0, scores on llm-d's absolute scale:
	// 1 − min(load, Q)/Q (queue_threshold_tokens; llm-d's
	// queueThresholdTokens, default there 4,194,304 = 128 requests of 32k
	// tokens). 0 (the default) scores relative to the candidates, as
	// trimtab's other load scorers do (see TokenLoad).
	QueueThresholdTokens int64 `mapstructure:"queue_threshold_tokens"`
	// BytesPerToken converts prompt bytes to tokens where no token count
	// exists: other router replicas' pending prefill (replica sync carries
	// bytes) and profiles without a prefix scorer (bytes_per_token,
	// default 4, the prefix scorer's).
	BytesPerToken int `mapstructure:"bytes_per_token"`
}

// DefaultTokenLoadConfig returns the defaults: relative scores, 4 bytes a
// token.
func DefaultTokenLoadConfig() TokenLoadConfig { return TokenLoadConfig{BytesPerToken: 4} }

// Validate checks the config; errors name the field.
func (c TokenLoadConfig) Validate() error {
	switch {
	case c.QueueThresholdTokens < 0 || c.QueueThresholdTokens > 1<<40:
		return fmt.Errorf("token-load.queue_threshold_tokens: must be in 0…2^40 (0 = relative scores), got %d", c.QueueThresholdTokens)
	case c.BytesPerToken <= 0 || c.BytesPerToken > 64:
		return fmt.Errorf("token-load.bytes_per_token: must be in 1…64, got %d", c.BytesPerToken)
	}
	return nil
}

// TokenLoad is a cache-aware distribution scorer in prompt tokens, the
// unit prefill costs in: the load of candidate e for a request r is
//
//	load_e = pending_e + peers_e + uncached_e(r)
//
// with pending_e the uncached prompt tokens this router sent to e that
// have no first response byte yet (Endpoint.PendingTokens: each counted
// as its prompt less what e held by the prefix index at the pick),
// peers_e the other replicas' pending prompt bytes ÷ bytes_per_token
// (replica sync carries bytes, undiscounted), and uncached_e(r) the
// request's own prompt tokens e does not hold (prompt − matched blocks ×
// block size). It is llm-d's token-load-scorer over its
// inflight-load-producer (llm-d-router pkg/epp/framework/plugins/
// scheduling/scorer/tokenload and requestcontrol/dataproducer/
// inflightload; llm-d-router#1024, #1639): tokens released at the first
// response byte, the prefix-cache discount applied per endpoint.
//
// Scores, with Q = queue_threshold_tokens:
//
//	Q > 0:  score_e = 1 − min(load_e, Q)/Q               (llm-d's scale)
//	Q = 0:  l_e = load_e / capacity_e,
//	        score_e = (max l − l_e)/(max l − min l), 1 for all when equal
//
// 1 means the least token load (an idle endpoint, or one that holds the
// whole prompt with nothing pending), 0 the most (or Q and more).
// Neutral rule: the counts are router-local and always current, so no
// neutral score is needed; without a prefix scorer in the profile (no
// index to discount by) the load is undiscounted prompt bytes ÷
// bytes_per_token (counted under reason no_prefix_index). It reads the
// prefix scorer's match, so a profile with token-load runs the prefix
// lookup before its filters (scheduler.MatchConsumer); give the prefix
// scorer weight 0 to use its index for the load alone.
type TokenLoad struct {
	q     float64
	bpt   int64
	noIdx interface{ Inc() }
}

// NewTokenLoad builds a token-load scorer named name.
func NewTokenLoad(name string, cfg TokenLoadConfig, deps Deps) (*TokenLoad, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scorer %q: %w", name, err)
	}
	n, err := newNeutralCounters(name, deps.Registerer, reasonNoIndex)
	if err != nil {
		return nil, err
	}
	return &TokenLoad{q: float64(cfg.QueueThresholdTokens), bpt: int64(cfg.BytesPerToken), noIdx: n.counter(reasonNoIndex)}, nil
}

// Category implements scheduler.Scorer: distribution.
func (*TokenLoad) Category() scheduler.Category { return scheduler.CategoryDistribution }

// ConsumesMatch implements scheduler.MatchConsumer.
func (*TokenLoad) ConsumesMatch() {}

// Score implements scheduler.Scorer.
func (t *TokenLoad) Score(cs *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i, e := range eps {
		load := float64(inFlightTokens(e, t.bpt))
		if m, ok := cs.Match(e); ok {
			load += float64(m.Uncached())
		} else {
			load += float64(int64(len(req.Prompt))/t.bpt + max(e.LocalPendingPrefill(), 0)/t.bpt)
			t.noIdx.Inc()
		}
		if t.q > 0 {
			out[i] = 1 - math.Min(load, t.q)/t.q
		} else {
			out[i] = load / e.CapacityOrOne()
		}
	}
	if t.q <= 0 && !minMaxInPlace(out) {
		allOnes(out)
	}
}

// inFlightTokens returns e's pending uncached prompt tokens: this
// router's own (Endpoint.PendingTokens) plus the other replicas' pending
// prompt bytes ÷ bpt.
func inFlightTokens(e *scheduler.Endpoint, bpt int64) int64 {
	peer := max(e.PendingPrefill()-e.LocalPendingPrefill(), 0)
	return max(e.PendingTokens(), 0) + peer/bpt
}
