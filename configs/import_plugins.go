// One mapping per llm-d plugin type, in one table and its helpers: the file is
// long because the table is, and splitting it would scatter one lookup.

package configs

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// Endpoint-picker plugin types the importer knows, as llm-d-router and
// the Gateway API Inference Extension register them.
const (
	eppPrefix           = "prefix-cache-scorer"
	eppPrefixProducer   = "approx-prefix-cache-producer"
	eppQueue            = "queue-scorer"
	eppKVCache          = "kv-cache-utilization-scorer"
	eppKVCacheOld       = "kv-cache-scorer"
	eppActiveRequest    = "active-request-scorer"
	eppRunningRequests  = "running-requests-size-scorer"
	eppLoRA             = "lora-affinity-scorer"
	eppSession          = "session-affinity-scorer"
	eppMaxScore         = "max-score-picker"
	eppWeightedRandom   = "weighted-random-picker"
	eppRandom           = "random-picker"
	eppSingleProfile    = "single-profile-handler"
	eppMetricsSource    = "metrics-data-source"
	eppMetricsExtractor = "core-metrics-extractor"
	eppAffinityFilter   = "prefix-cache-affinity-filter"
	eppTokenLoad        = "token-load-scorer"
	eppInflightProducer = "inflight-load-producer"
)

// llm-d's prefix-cache-affinity-filter defaults (llm-d-router
// pkg/epp/framework/plugins/scheduling/filter/prefixcacheaffinity): τ
// 0.80, the TTFT gate 18,000 ms estimated from in-flight tokens at 15,928
// tokens/s; and the token-load-scorer's queueThresholdTokens.
const (
	eppAffinityThreshold   = 0.80
	eppMaxTTFTPenaltyMs    = 18000
	eppPeakPrefillTokensPS = 15928
	eppQueueThreshold      = 4194304
)

// notMappable says why plugins of whole families trimtab does not have are
// left out: latency predictors and prefill/decode disaggregation.
func notMappable(typ string) (string, bool) {
	switch {
	case strings.Contains(typ, "latency") || strings.Contains(typ, "slo") || strings.Contains(typ, "predict"):
		return "not mapped (a latency predictor: trimtab has no TTFT/TPOT model; its load scorers count requests and prompt tokens)", true
	case strings.Contains(typ, "pd-") || strings.Contains(typ, "disagg") || strings.Contains(typ, "prefill") || strings.Contains(typ, "decode"):
		return "not mapped (prefill/decode disaggregation: trimtab picks one endpoint from one pool)", true
	}
	return "", false
}

// eppScorers maps endpoint-picker scorer types to trimtab scorer types.
var eppScorers = map[string]string{
	eppPrefix:          scorers.TypePrefix,
	eppQueue:           scorers.TypeQueue,
	eppKVCache:         scorers.TypeKVCache,
	eppKVCacheOld:      scorers.TypeKVCache,
	eppActiveRequest:   scorers.TypeInFlight,
	eppRunningRequests: scorers.TypeInFlight,
	eppLoRA:            scorers.TypeLoRA,
	eppSession:         scorers.TypeSession,
}

// approximately says how a scorer carried over differs from the original.
var approximately = map[string]string{
	eppRunningRequests: "approximately, as inflight: trimtab counts the requests in flight from the router; llm-d reads the running count the server reports",
	eppSession:         "approximately: llm-d sends the chosen pod back in x-session-token; trimtab keeps a session on one pod by hashing the session id the client sends (X-Session-Id)",
}

// randomTemperature makes the weighted-random picker draw uniformly: it is
// far above any difference of total scores.
const randomTemperature = 1e6

// systemPlugin says why a plugin needs nothing in a trimtab profile.
func systemPlugin(typ string) (string, bool) {
	switch typ {
	case eppSingleProfile:
		return "nothing to map: trimtab runs one scheduling profile", true
	case eppMetricsSource, eppMetricsExtractor:
		return "nothing to map: trimtab scrapes endpoint metrics itself (scrape: section)", true
	}
	return "", false
}

// translate fills im.out from the chosen profile's references.
func (im *importer) translate(refs []profileRef) error {
	im.out.Picker = importedPicker{Type: scheduler.PickerMaxScore}
	im.out.Filters = []string{scheduler.FilterModel, scheduler.FilterHealthy}
	used := map[string]bool{}
	absorbed := map[*eppPlugin]bool{}
	var picker *eppPlugin
	var sum float64
	for _, r := range refs {
		p := r.plugin
		p.referenced = true
		if typ, ok := eppScorers[p.typ]; ok {
			sc := importedScorer{Type: typ, Weight: r.weight, Name: uniqueName(used, typ, p)}
			params, err := im.scorerParams(p, absorbed)
			if err != nil {
				return err
			}
			if params != nil {
				sc.Params = intsToAny(params)
			}
			if how, ok := approximately[p.typ]; ok {
				im.note("%s: carried over %s", p.label(), how)
			}
			im.out.Scorers = append(im.out.Scorers, sc)
			im.from = append(im.from, p.label()+", "+r.field)
			sum += r.weight
			continue
		}
		if why, ok := systemPlugin(p.typ); ok {
			im.note("%s: %s", p.label(), why)
			continue
		}
		switch p.typ {
		case eppTokenLoad:
			sc := importedScorer{Type: scorers.TypeTokenLoad, Weight: r.weight, Name: uniqueName(used, scorers.TypeTokenLoad, p)}
			sc.Params = im.tokenLoadParams(p, absorbed)
			im.out.Scorers = append(im.out.Scorers, sc)
			im.from = append(im.from, p.label()+", "+r.field)
			sum += r.weight
		case eppAffinityFilter:
			if err := im.affinityFilter(p, absorbed); err != nil {
				return err
			}
		case eppMaxScore, eppWeightedRandom, eppRandom:
			if picker != nil {
				im.note("%s: not mapped (a second picker in the profile; %s is used)", p.label(), picker.label())
				continue
			}
			picker = p
			if err := im.picker(p); err != nil {
				return err
			}
		default:
			if why, ok := notMappable(p.typ); ok {
				im.note("%s: %s", p.label(), why)
				continue
			}
			im.note("%s: not mapped (no trimtab equivalent)", p.label())
		}
	}
	if err := im.affinityIndex(used, absorbed); err != nil {
		return err
	}
	for _, p := range im.plugins {
		if p.referenced || absorbed[p] {
			continue
		}
		if why, ok := notMappable(p.typ); ok {
			im.note("%s: %s", p.label(), why)
			continue
		}
		if why, ok := systemPlugin(p.typ); ok {
			im.note("%s: %s", p.label(), why)
			continue
		}
		im.note("%s: skipped (not referenced by the imported scheduling profile)", p.label())
	}
	if len(im.out.Scorers) == 0 {
		return fmt.Errorf("schedulingProfiles: no scorer of the imported profile has a trimtab equivalent (known: %s)",
			strings.Join(slices.Sorted(maps.Keys(eppScorers)), ", "))
	}
	if sum == 0 {
		return errors.New("schedulingProfiles: every scorer carried over has weight 0; a trimtab profile needs one weight > 0")
	}
	return im.validPicker()
}

// absorbInflight marks the in-flight-load producer as carried over: trimtab's
// scheduler counts each pick's uncached prompt tokens itself.
func (im *importer) absorbInflight(absorbed map[*eppPlugin]bool) {
	for _, q := range im.plugins {
		if q.typ != eppInflightProducer || absorbed[q] {
			continue
		}
		absorbed[q] = true
		im.note("%s: nothing to map: trimtab's scheduler counts each pick's uncached prompt tokens until its first byte (Endpoint.PendingTokens), as this producer does with addEstimatedOutputTokens false", q.label())
		for _, k := range slices.Sorted(maps.Keys(q.params)) {
			if k != "prefixMatchInfoProducerName" {
				im.note("%s parameters.%s: not mapped (trimtab counts prompt tokens only, released at the first byte)", q.label(), k)
			}
		}
	}
}

// tokenLoadParams carries token-load-scorer over: queueThresholdTokens
// (default 4,194,304) → queue_threshold_tokens.
func (im *importer) tokenLoadParams(p *eppPlugin, absorbed map[*eppPlugin]bool) map[string]any {
	im.absorbInflight(absorbed)
	q := int64(eppQueueThreshold)
	for _, k := range slices.Sorted(maps.Keys(p.params)) {
		v := p.params[k]
		switch k {
		case "queueThresholdTokens":
			// llm-d falls back to its default for a value ≤ 0.
			if n, ok := asInt(v); ok && n > 0 {
				q = int64(n)
			} else {
				im.note("%s parameters.queueThresholdTokens: %v is not > 0; llm-d uses its default %d, and so does the import", p.label(), v, eppQueueThreshold)
			}
		case "inFlightLoadProducerName":
		default:
			im.note("%s parameters.%s: not mapped (trimtab's token-load scorer has no such setting)", p.label(), k)
		}
	}
	return map[string]any{"queue_threshold_tokens": q}
}

// affinityFilter carries prefix-cache-affinity-filter over as the
// prefix-affinity filter: affinityThreshold → threshold;
// maxTokensInFlightPenalty → max_tokens_in_flight_penalty; the TTFT gate
// estimated from in-flight tokens (ttftSource prefillThroughput, the
// default) → the same gate in tokens, maxTTFTPenaltyMs ×
// peakPrefillThroughput ÷ 1000; with both, the tighter one (either breaks
// stickiness upstream).
func (im *importer) affinityFilter(p *eppPlugin, absorbed map[*eppPlugin]bool) error {
	im.absorbInflight(absorbed)
	num := func(key string, def float64) (float64, error) {
		v, set := p.params[key]
		if !set || v == nil {
			return def, nil
		}
		f, ok := asFloat(v)
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			return 0, fmt.Errorf("%s.parameters.%s: want a number ≥ 0, got %s", p.field(), key, kindOf(v))
		}
		return f, nil
	}
	tau, err := num("affinityThreshold", eppAffinityThreshold)
	if err != nil {
		return err
	}
	tokens, err := num("maxTokensInFlightPenalty", 0)
	if err != nil {
		return err
	}
	ttft, err := num("maxTTFTPenaltyMs", eppMaxTTFTPenaltyMs)
	if err != nil {
		return err
	}
	peak, err := num("peakPrefillThroughput", eppPeakPrefillTokensPS)
	if err != nil {
		return err
	}
	source, _ := p.params["ttftSource"].(string)
	penalty := tokens
	switch {
	case ttft > 0 && source == "latencyPredictor":
		im.note("%s parameters.maxTTFTPenaltyMs: not mapped (ttftSource latencyPredictor: trimtab has no latency predictor; only the in-flight-token gate is carried over)", p.label())
	case ttft > 0:
		// tokens = ms × tokens/s ÷ 1000
		fromTTFT := math.Round(ttft * peak / 1000)
		if penalty == 0 || fromTTFT < penalty {
			penalty = fromTTFT
		}
		im.note("%s parameters.maxTTFTPenaltyMs: carried over as max_tokens_in_flight_penalty: %g ms × %g tokens/s ÷ 1000 = %g tokens (llm-d estimates TTFT from in-flight tokens at peakPrefillThroughput)", p.label(), ttft, peak, fromTTFT)
	}
	for _, k := range slices.Sorted(maps.Keys(p.params)) {
		v := p.params[k]
		switch k {
		case "affinityThreshold", "maxTokensInFlightPenalty", "maxTTFTPenaltyMs", "peakPrefillThroughput", "ttftSource",
			"prefixMatchInfoProducerName", "inFlightLoadProducerName", "latencyPredictionInfoProducerName":
		case "explorationProbability":
			if f, ok := asFloat(v); !ok || f != 0 {
				im.note("%s parameters.explorationProbability: not mapped (trimtab's filter never skips its gate at random)", p.label())
			}
		case "penaltySource":
			if v != "constant" {
				im.note("%s parameters.penaltySource: not mapped (%v: trimtab's gate is the constant in-flight-token penalty)", p.label(), v)
			}
		default:
			im.note("%s parameters.%s: not mapped (trimtab's prefix-affinity filter has no such setting)", p.label(), k)
		}
	}
	cfg := scorers.DefaultPrefixAffinityConfig()
	cfg.Threshold, cfg.MaxTokensInFlightPenalty = tau, int64(penalty)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%s.parameters: carried over as %w", p.field(), err)
	}
	if !slices.Contains(im.out.Filters, scorers.FilterPrefixAffinity) {
		im.out.Filters = append(im.out.Filters, scorers.FilterPrefixAffinity)
	}
	im.out.PrefixAffinity = &importedAffinity{Threshold: tau, MaxTokensInFlightPenalty: int64(penalty)}
	return nil
}

// affinityIndex gives a profile with the prefix-affinity filter or the
// token-load scorer the prefix index they read: a prefix scorer with
// weight 0 (llm-d's guides run the filter with no weighted prefix scorer,
// llm-d-router#2651) learning at the pick, as the approx-prefix-cache
// producer records at PreRequest, with the producer's parameters.
func (im *importer) affinityIndex(used map[string]bool, absorbed map[*eppPlugin]bool) error {
	needs := im.out.PrefixAffinity != nil || slices.ContainsFunc(im.out.Scorers, func(s importedScorer) bool { return s.Type == scorers.TypeTokenLoad })
	if !needs || slices.ContainsFunc(im.out.Scorers, func(s importedScorer) bool { return s.Type == scorers.TypePrefix }) {
		return nil
	}
	sc := importedScorer{Type: scorers.TypePrefix, Weight: 0, Params: map[string]any{"learn": prefix.LearnPick}}
	from := "added: the index the prefix-affinity filter and token-load read"
	if prod, ok := im.byName[eppPrefixProducer]; ok && prod.typ == eppPrefixProducer && !absorbed[prod] {
		absorbed[prod] = true
		src := map[string]*eppPlugin{}
		for k := range prod.params {
			src[k] = prod
		}
		params, err := im.prefixParams(prod, prod.params, src)
		if err != nil {
			return err
		}
		for k, v := range params {
			sc.Params[k] = v
		}
		from = prod.label() + " (weight 0: the index the filter and token-load read, learning at the pick)"
	}
	used[scorers.TypePrefix] = true
	im.out.Scorers = append(im.out.Scorers, sc)
	im.from = append(im.from, from)
	return nil
}

// uniqueName is the trimtab scorer name for p: omitted (the type) when
// free and p has no name of its own, else p's name made unique.
func uniqueName(used map[string]bool, typ string, p *eppPlugin) string {
	name := typ
	if p.name != p.typ || used[name] {
		name = p.name
	}
	for i := 2; used[name]; i++ {
		name = fmt.Sprintf("%s-%d", p.name, i)
	}
	used[name] = true
	if name == typ {
		return ""
	}
	return name
}

// scorerParams carries a scorer's parameters over; those without a
// trimtab equivalent are noted.
func (im *importer) scorerParams(p *eppPlugin, absorbed map[*eppPlugin]bool) (map[string]int, error) {
	if p.typ != eppPrefix {
		for _, k := range slices.Sorted(maps.Keys(p.params)) {
			im.note("%s parameters.%s: not mapped (trimtab's %s scorer has no such setting)", p.label(), k, eppScorers[p.typ])
		}
		return nil, nil
	}
	// The prefix parameters live on the scorer (older releases) or on the
	// approximate prefix-cache producer it reads from.
	producer := eppPrefixProducer
	if s, ok := p.params["prefixMatchInfoProducerName"].(string); ok && s != "" {
		producer = s
	}
	params := map[string]any{}
	from := map[string]*eppPlugin{}
	if prod, ok := im.byName[producer]; ok && prod.typ == eppPrefixProducer {
		absorbed[prod] = true
		for k, v := range prod.params {
			params[k], from[k] = v, prod
		}
	}
	for k, v := range p.params {
		params[k], from[k] = v, p
	}
	return im.prefixParams(p, params, from)
}

// bytesPerToken is what both llm-d and trimtab assume of a tokenizer when
// a size in characters meets one in tokens.
const bytesPerToken = 4

// prefixParams maps prefix-cache parameters onto trimtab's prefix scorer:
// blockSizeTokens → block_size; blockSize / hashBlockSize (characters) →
// block_size in tokens of 4 bytes, or in bytes (bytes_per_token 1) when not
// a multiple of 4; maxPrefixTokensToMatch or maxPrefixBlocksToMatch →
// max_blocks; lruCapacityPerServer → capacity.
//
// from names the plugin each parameter was set on (the scorer or its
// producer).
func (im *importer) prefixParams(p *eppPlugin, params map[string]any, from map[string]*eppPlugin) (map[string]int, error) {
	field := p.field() + ".parameters"
	get := func(key string) (int, bool, error) {
		v, set := params[key]
		if !set || v == nil {
			return 0, false, nil
		}
		n, ok := asInt(v)
		if !ok || n <= 0 {
			return 0, false, fmt.Errorf("%s.parameters.%s: want a whole number > 0, got %s", from[key].field(), key, kindOf(v))
		}
		return n, true, nil
	}
	out := map[string]int{}
	tokens, hasTokens, err := get("blockSizeTokens")
	if err != nil {
		return nil, err
	}
	charsKey := "blockSize"
	chars, hasChars, err := get(charsKey)
	if err == nil && !hasChars {
		charsKey = "hashBlockSize"
		chars, hasChars, err = get(charsKey)
	}
	if err != nil {
		return nil, err
	}
	blockBytes := 64 * bytesPerToken
	switch {
	case hasTokens:
		out["block_size"] = tokens
		blockBytes = tokens * bytesPerToken
		if hasChars {
			im.note("%s parameters.%s: ignored (blockSizeTokens is set and wins, as in llm-d)", from[charsKey].label(), charsKey)
		}
	case hasChars && chars%bytesPerToken == 0:
		out["block_size"], blockBytes = chars/bytesPerToken, chars
	case hasChars:
		out["block_size"], out["bytes_per_token"], blockBytes = chars, 1, chars
	}
	maxTokens, hasMaxTokens, err := get("maxPrefixTokensToMatch")
	if err != nil {
		return nil, err
	}
	maxBlocks, hasMaxBlocks, err := get("maxPrefixBlocksToMatch")
	if err != nil {
		return nil, err
	}
	switch {
	case hasMaxTokens:
		// blocks = ⌈tokens × 4 bytes / block bytes⌉
		out["max_blocks"] = int(math.Ceil(float64(maxTokens) * bytesPerToken / float64(blockBytes)))
		if hasMaxBlocks {
			im.note("%s parameters.maxPrefixBlocksToMatch: ignored (maxPrefixTokensToMatch is set and wins, as in llm-d)", from["maxPrefixBlocksToMatch"].label())
		}
	case hasMaxBlocks:
		out["max_blocks"] = maxBlocks
	}
	lru, hasLRU, err := get("lruCapacityPerServer")
	if err != nil {
		return nil, err
	}
	if hasLRU {
		out["capacity"] = lru
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		switch k {
		case "blockSizeTokens", "blockSize", "hashBlockSize", "maxPrefixTokensToMatch", "maxPrefixBlocksToMatch",
			"lruCapacityPerServer", "prefixMatchInfoProducerName":
		case "autoTune":
			im.note("%s parameters.autoTune: not mapped (trimtab sizes each endpoint's index from the KV-cache size the server reports; capacity applies when it reports none)", from[k].label())
		default:
			im.note("%s parameters.%s: not mapped (trimtab's prefix scorer has no such setting)", from[k].label(), k)
		}
	}
	cfg := prefix.DefaultConfig()
	if err := Decode(intsToAny(out), &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: carried over as %w", field, err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// picker carries the profile's picker over.
func (im *importer) picker(p *eppPlugin) error {
	switch p.typ {
	case eppWeightedRandom:
		im.out.Picker = importedPicker{Type: scheduler.PickerWeightedRandom, Temperature: 0.1}
		im.note("%s: carried over approximately, as weighted-random: llm-d draws in proportion to the score, trimtab by a softmax of temperature 0.1 (picker.temperature)", p.label())
	case eppRandom:
		im.out.Picker = importedPicker{Type: scheduler.PickerWeightedRandom, Temperature: randomTemperature}
		im.note("%s: carried over as weighted-random with temperature %g, which draws uniformly", p.label(), float64(randomTemperature))
	}
	for _, k := range slices.Sorted(maps.Keys(p.params)) {
		v := p.params[k]
		if k != "maxNumOfEndpoints" {
			im.note("%s parameters.%s: not mapped (trimtab's picker has no such setting)", p.label(), k)
			continue
		}
		n, ok := asInt(v)
		if !ok || n < 1 {
			return fmt.Errorf("%s.parameters.maxNumOfEndpoints: want a whole number ≥ 1, got %s", p.field(), kindOf(v))
		}
		if n > 1 {
			im.out.Scheduler = &importedScheduler{MaxFallbacks: n - 1}
			im.note("%s parameters.maxNumOfEndpoints: carried over as scheduler.max_fallbacks %d (trimtab returns the endpoints after the first as fallbacks)", p.label(), n-1)
		}
	}
	return nil
}

func intsToAny(m map[string]int) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
