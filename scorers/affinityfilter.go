package scorers

import (
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
)

// FilterPrefixAffinity is the prefix-affinity filter's name in a
// profile's filters list; its settings are the profile's prefix_affinity
// section.
const FilterPrefixAffinity = "prefix-affinity"

// PrefixAffinityConfig configures the prefix-affinity filter (YAML
// prefix_affinity). Defaults are llm-d's optimized-baseline guide's
// (llm-d/llm-d guides/optimized-baseline/router/
// optimized-baseline.values.yaml).
type PrefixAffinityConfig struct {
	// Threshold is τ: a candidate is sticky when the share of the
	// request's indexed prompt it holds is ≥ τ (threshold, in [0,1];
	// llm-d's affinityThreshold, default 0.80). 0 turns the filter off.
	Threshold float64 `mapstructure:"threshold"`
	// MaxTokensInFlightPenalty is the load gate, in tokens: when the best
	// sticky candidate's pending uncached prompt tokens exceed the best
	// non-sticky one's by more than this, every candidate is kept
	// (max_tokens_in_flight_penalty; llm-d's maxTokensInFlightPenalty,
	// 286,720 in the guide). 0 always sticks.
	MaxTokensInFlightPenalty int64 `mapstructure:"max_tokens_in_flight_penalty"`
	// BytesPerToken converts the other replicas' pending prompt bytes to
	// tokens (bytes_per_token, default 4).
	BytesPerToken int `mapstructure:"bytes_per_token"`
}

// DefaultPrefixAffinityConfig returns τ 0.80 and a gate of 286,720
// tokens, the optimized-baseline guide's values.
func DefaultPrefixAffinityConfig() PrefixAffinityConfig {
	return PrefixAffinityConfig{Threshold: 0.80, MaxTokensInFlightPenalty: 286720, BytesPerToken: 4}
}

// Validate checks the config; errors name the field.
func (c PrefixAffinityConfig) Validate() error {
	switch {
	case !(c.Threshold >= 0 && c.Threshold <= 1):
		return fmt.Errorf("prefix_affinity.threshold: must be in [0,1] (0 = off), got %v", c.Threshold)
	case c.MaxTokensInFlightPenalty < 0 || c.MaxTokensInFlightPenalty > 1<<40:
		return fmt.Errorf("prefix_affinity.max_tokens_in_flight_penalty: must be in 0…2^40 (0 = always stick), got %d", c.MaxTokensInFlightPenalty)
	case c.BytesPerToken <= 0 || c.BytesPerToken > 64:
		return fmt.Errorf("prefix_affinity.bytes_per_token: must be in 1…64, got %d", c.BytesPerToken)
	}
	return nil
}

// Outcomes of the prefix-affinity filter (the outcome label), llm-d's
// names.
const (
	affinityNotApplicable = "not_applicable" // one candidate, or threshold 0
	affinityNoIndex       = "no_index"       // no prefix scorer in the profile
	affinityNoMatch       = "no_match"       // no sticky candidate
	affinityLoadOverride  = "load_override"  // the gate kept every candidate
	affinitySticky        = "sticky"         // narrowed to the sticky candidates
)

// PrefixAffinity is llm-d's prefix-cache-affinity-filter (llm-d-router
// pkg/epp/framework/plugins/scheduling/filter/prefixcacheaffinity;
// llm-d-router#1024, #1639) with its in-flight-token load gate:
//
//  1. With one candidate, or threshold 0, keep all.
//  2. Sticky candidates hold ≥ threshold of the request's indexed prompt
//     (the prefix index's match: matched blocks ÷ indexed blocks). None:
//     keep all.
//  3. Gate: with max_tokens_in_flight_penalty P > 0 and a non-sticky
//     candidate, if min over sticky of t_e − min over non-sticky of t_e
//     > P, keep all; t_e is the candidate's pending uncached prompt
//     tokens (as the token-load scorer counts them, without the request
//     itself).
//  4. Otherwise keep the sticky candidates.
//
// The filter only narrows; the scorers after it choose. llm-d-router#2651
// shows why a weighted prefix scorer after it makes the gate inert: pair
// it with a load scorer alone (token-load). Exploration
// (explorationProbability, default 0 upstream) is not implemented, and
// the TTFT form of the gate (maxTTFTPenaltyMs) is this one in tokens
// when its TTFT is estimated from in-flight tokens ÷ peakPrefillThroughput
// (P = maxTTFTPenaltyMs × peakPrefillThroughput ÷ 1000; config import
// converts it). It reads the prefix scorer's match, so the profile needs
// a prefix scorer (weight 0 keeps it out of the scores); without one it
// keeps every candidate and counts no_index. Safe for concurrent use;
// allocation-free.
type PrefixAffinity struct {
	tau                                    float64
	penalty                                float64
	bpt                                    int64
	na, noIndex, noMatch, override, sticky prometheus.Counter
}

// NewPrefixAffinity builds the filter and registers its decision counter
// (trimtab_prefix_affinity_decisions_total) on reg (nil: not registered).
func NewPrefixAffinity(cfg PrefixAffinityConfig, reg prometheus.Registerer) (*PrefixAffinity, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_prefix_affinity_decisions_total",
		Help: "Decisions of the prefix-affinity filter, by outcome: sticky (narrowed to the candidates holding the prompt), load_override (the load gate kept all), no_match, no_index, not_applicable.",
	}, []string{"outcome"})
	if reg != nil {
		if err := reg.Register(vec); err != nil {
			return nil, fmt.Errorf("prefix_affinity: register metrics: %w", err)
		}
	}
	return &PrefixAffinity{
		tau: cfg.Threshold, penalty: float64(cfg.MaxTokensInFlightPenalty), bpt: int64(cfg.BytesPerToken),
		na: vec.WithLabelValues(affinityNotApplicable), noIndex: vec.WithLabelValues(affinityNoIndex),
		noMatch: vec.WithLabelValues(affinityNoMatch), override: vec.WithLabelValues(affinityLoadOverride),
		sticky: vec.WithLabelValues(affinitySticky),
	}, nil
}

// ConsumesMatch implements scheduler.MatchConsumer.
func (*PrefixAffinity) ConsumesMatch() {}

// Filter implements scheduler.Filter: without the decision's state there
// is no match, so it keeps every candidate.
func (f *PrefixAffinity) Filter(_ *scheduler.Request, in, out []*scheduler.Endpoint) []*scheduler.Endpoint {
	f.noIndex.Inc()
	return append(out, in...)
}

// FilterState implements scheduler.StateFilter.
func (f *PrefixAffinity) FilterState(cs *scheduler.CycleState, _ *scheduler.Request, in, out []*scheduler.Endpoint) []*scheduler.Endpoint {
	if len(in) <= 1 || f.tau <= 0 {
		f.na.Inc()
		return append(out, in...)
	}
	if _, ok := cs.Match(in[0]); !ok {
		f.noIndex.Inc()
		return append(out, in...)
	}
	bestS, bestN := math.Inf(1), math.Inf(1)
	stickies := 0
	for _, e := range in {
		m, _ := cs.Match(e)
		t := float64(inFlightTokens(e, f.bpt))
		if m.Ratio() >= f.tau {
			stickies++
			bestS = math.Min(bestS, t)
		} else {
			bestN = math.Min(bestN, t)
		}
	}
	switch {
	case stickies == 0:
		f.noMatch.Inc()
		return append(out, in...)
	case f.penalty > 0 && stickies < len(in) && bestS-bestN > f.penalty:
		f.override.Inc()
		return append(out, in...)
	}
	for _, e := range in {
		if m, _ := cs.Match(e); m.Ratio() >= f.tau {
			out = append(out, e)
		}
	}
	f.sticky.Inc()
	return out
}
