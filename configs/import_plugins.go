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
)

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
			sc.Params = params
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
			im.note("%s: not mapped (no trimtab equivalent)", p.label())
		}
	}
	for _, p := range im.plugins {
		if p.referenced || absorbed[p] {
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
	cfg := scorers.DefaultPrefixConfig()
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
