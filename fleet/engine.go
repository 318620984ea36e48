package fleet

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Engine names accepted by scrape.engine and by a target's Engine field.
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
	EngineTRTLLM = "trtllm"
	EngineTGI    = "tgi"
)

// Mapping says which scraped series feed which Endpoint field. Each field is
// a list of selectors tried in order; the first one present in the
// exposition wins (so old and new metric names of one engine can both be
// listed). A selector is a metric name with optional exact label matches in
// PromQL style: `nv_trt_llm_request_metrics{request_type="waiting"}`.
//
// In scrape.metrics a non-empty field replaces the engine default for that
// field; an empty field keeps it.
type Mapping struct {
	// Waiting is the number of queued requests (summed over series).
	Waiting []string `mapstructure:"waiting"`
	// Running is the number of requests in the running batch (summed).
	Running []string `mapstructure:"running"`
	// KVUtil is the KV-cache utilisation as a fraction in [0,1] (the
	// largest series wins; values above 1 are clamped to 1).
	KVUtil []string `mapstructure:"kv_util"`
	// LoRAInfo is an info gauge whose labels running_lora_adapters,
	// waiting_lora_adapters (comma-separated) and max_lora describe the
	// adapters; its value is a timestamp and the series with the largest
	// value wins. Optional.
	LoRAInfo []string `mapstructure:"lora_info"`
	// LoRALoaded is a gauge with one series per resident adapter, valued 1
	// while it is loaded, whose labels adapter_name, level ("gpu" or
	// "cpu") and pinned ("true" or "false") give the adapter's residency.
	// Optional; when the server exports it (or LoRAGPULoaded or
	// LoRAGPUSlots) the lora scorer scores residency, and LoRAInfo only
	// says which adapters are busy.
	LoRALoaded []string `mapstructure:"lora_loaded"`
	// LoRAGPULoaded is the number of GPU adapter slots in use. Optional.
	LoRAGPULoaded []string `mapstructure:"lora_gpu_loaded"`
	// LoRAGPUSlots is the number of GPU adapter slots; optional, the
	// max_lora label of LoRAInfo otherwise.
	LoRAGPUSlots []string `mapstructure:"lora_gpu_slots"`
	// CacheInfo is an info gauge carrying the KV block size and number of
	// blocks in labels (CacheInfoBlockSizeLabel, CacheInfoBlocksLabel).
	// Optional.
	CacheInfo []string `mapstructure:"cache_info"`
	// CacheInfoBlockSizeLabel and CacheInfoBlocksLabel name the labels of
	// CacheInfo (vLLM: block_size, num_gpu_blocks).
	CacheInfoBlockSizeLabel string `mapstructure:"cache_info_block_size_label"`
	CacheInfoBlocksLabel    string `mapstructure:"cache_info_blocks_label"`
	// CacheBlockSize and CacheBlocks are plain gauges with the block size
	// in tokens and the number of blocks, for engines that export them as
	// values (TensorRT-LLM). Optional; CacheInfo wins when both exist.
	CacheBlockSize []string `mapstructure:"cache_block_size"`
	CacheBlocks    []string `mapstructure:"cache_blocks"`
	// ModelLabel is the label naming the model of a series ("model_name"
	// for vLLM). When an endpoint lists its models and some series carry
	// one of them in this label, only those series count.
	ModelLabel string `mapstructure:"model_label"`
}

// EngineMapping returns the built-in mapping of an engine, or false when the
// engine is unknown. The returned value is a fresh copy.
func EngineMapping(engine string) (Mapping, bool) {
	switch engine {
	case EngineVLLM:
		// vLLM ≥ 0.10 exports kv_cache_usage_perc (a fraction despite the
		// name); older servers gpu_cache_usage_perc. The adapter residency
		// gauges are those of vllm-project/vllm#54830 (split from #45411,
		// which deprecates lora_requests_info); servers without them
		// report adapters through lora_requests_info alone.
		return Mapping{
			Waiting:                 []string{"vllm:num_requests_waiting"},
			Running:                 []string{"vllm:num_requests_running"},
			KVUtil:                  []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
			LoRAInfo:                []string{"vllm:lora_requests_info"},
			LoRALoaded:              []string{"vllm:lora_adapter_loaded"},
			LoRAGPULoaded:           []string{"vllm:num_gpu_loaded_lora_adapters"},
			LoRAGPUSlots:            []string{"vllm:max_gpu_lora_adapters"},
			CacheInfo:               []string{"vllm:cache_config_info"},
			CacheInfoBlockSizeLabel: "block_size",
			CacheInfoBlocksLabel:    "num_gpu_blocks",
			ModelLabel:              "model_name",
		}, true
	case EngineSGLang:
		return Mapping{
			Waiting:    []string{"sglang:num_queue_reqs"},
			Running:    []string{"sglang:num_running_reqs"},
			KVUtil:     []string{"sglang:token_usage"},
			ModelLabel: "model_name",
		}, true
	case EngineTRTLLM:
		// Triton's TensorRT-LLM backend first, then trtllm-serve's
		// native Prometheus names.
		return Mapping{
			Waiting: []string{`nv_trt_llm_request_metrics{request_type="waiting"}`, "trtllm_num_requests_waiting"},
			Running: []string{`nv_trt_llm_request_metrics{request_type="scheduled"}`, "trtllm_num_requests_running"},
			KVUtil:  []string{`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}`, "trtllm_kv_cache_utilization"},
			CacheBlockSize: []string{`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per"}`,
				"trtllm_kv_cache_tokens_per_block"},
			CacheBlocks: []string{`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}`,
				"trtllm_kv_cache_max_blocks"},
			ModelLabel: "model",
		}, true
	case EngineTGI:
		// TGI exports no KV-cache utilisation; KVUtil stays 0.
		return Mapping{
			Waiting: []string{"tgi_queue_size"},
			Running: []string{"tgi_batch_current_size"},
		}, true
	}
	return Mapping{}, false
}

// Engines returns the names of the built-in engines, sorted.
func Engines() []string {
	return []string{EngineSGLang, EngineTGI, EngineTRTLLM, EngineVLLM}
}

// merge returns m with every non-empty field of o replacing m's.
func (m Mapping) merge(o Mapping) Mapping {
	pick := func(a, b []string) []string {
		if len(b) > 0 {
			return b
		}
		return a
	}
	pickS := func(a, b string) string {
		if b != "" {
			return b
		}
		return a
	}
	m.Waiting = pick(m.Waiting, o.Waiting)
	m.Running = pick(m.Running, o.Running)
	m.KVUtil = pick(m.KVUtil, o.KVUtil)
	m.LoRAInfo = pick(m.LoRAInfo, o.LoRAInfo)
	m.LoRALoaded = pick(m.LoRALoaded, o.LoRALoaded)
	m.LoRAGPULoaded = pick(m.LoRAGPULoaded, o.LoRAGPULoaded)
	m.LoRAGPUSlots = pick(m.LoRAGPUSlots, o.LoRAGPUSlots)
	m.CacheInfo = pick(m.CacheInfo, o.CacheInfo)
	m.CacheInfoBlockSizeLabel = pickS(m.CacheInfoBlockSizeLabel, o.CacheInfoBlockSizeLabel)
	m.CacheInfoBlocksLabel = pickS(m.CacheInfoBlocksLabel, o.CacheInfoBlocksLabel)
	m.CacheBlockSize = pick(m.CacheBlockSize, o.CacheBlockSize)
	m.CacheBlocks = pick(m.CacheBlocks, o.CacheBlocks)
	m.ModelLabel = pickS(m.ModelLabel, o.ModelLabel)
	return m
}

// selector matches series of one metric family by exact label values.
type selector struct {
	name   string
	labels []labelMatch
}

type labelMatch struct{ name, value string }

// parseSelector parses `name` or `name{a="x",b="y"}` (quotes optional).
func parseSelector(s string) (selector, error) {
	s = strings.TrimSpace(s)
	var sel selector
	open := strings.IndexByte(s, '{')
	if open < 0 {
		sel.name = s
	} else {
		if !strings.HasSuffix(s, "}") {
			return sel, fmt.Errorf("selector %q: missing closing brace", s)
		}
		sel.name = strings.TrimSpace(s[:open])
		body := strings.TrimSpace(s[open+1 : len(s)-1])
		for body != "" {
			var part string
			part, body, _ = strings.Cut(body, ",")
			body = strings.TrimSpace(body)
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			k, v, ok := strings.Cut(part, "=")
			k = strings.TrimSpace(k)
			v = strings.TrimSpace(v)
			if !ok || k == "" || !validLabelName(k) {
				return sel, fmt.Errorf("selector %q: bad label match %q", s, part)
			}
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			sel.labels = append(sel.labels, labelMatch{k, v})
		}
	}
	if sel.name == "" || !validMetricName(sel.name) {
		return sel, fmt.Errorf("selector %q: invalid metric name", s)
	}
	return sel, nil
}

func validMetricName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !metricNameByte(s[i], i == 0) {
			return false
		}
	}
	return true
}

func validLabelName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return s != ""
}

// metricNameByte reports whether c may appear in a legacy metric name
// ([a-zA-Z_:][a-zA-Z0-9_:]*); colons are legal (vllm:…).
func metricNameByte(c byte, first bool) bool {
	k := nameBytes[c]
	return k == 2 || (k == 1 && !first)
}

// nameBytes classifies bytes of metric names: 2 anywhere, 1 not first
// (digits), 0 never.
var nameBytes = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		switch {
		case c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
			t[c] = 2
		case c >= '0' && c <= '9':
			t[c] = 1
		}
	}
	return t
}()

// mapper is a compiled Mapping.
type mapper struct {
	waiting, running, kv, lora, cacheInfo, blockSize, blocks []selector
	loraLoaded, loraGPULoaded, loraGPUSlots                  []selector
	bsLabel, nbLabel                                         string
	modelLabel                                               string
	// names are the metric families the mapping reads, sorted and
	// de-duplicated; everything else in an exposition is skipped before
	// parsing.
	names []string
	// nameLens has bit n%64 set when some name is n bytes long: most
	// lines of an exposition are rejected by their name's length alone.
	nameLens uint64
	// labels are the label names the mapping reads; other labels are
	// dropped before parsing.
	labels []string
}

// compile checks a Mapping and builds its mapper. Errors name the field as
// it appears under scrape.metrics.
func (m Mapping) compile() (*mapper, error) {
	mp := &mapper{bsLabel: m.CacheInfoBlockSizeLabel, nbLabel: m.CacheInfoBlocksLabel, modelLabel: m.ModelLabel}
	seen := map[string]bool{}
	fields := []struct {
		key  string
		in   []string
		out  *[]selector
		need bool
	}{
		{"waiting", m.Waiting, &mp.waiting, true},
		{"running", m.Running, &mp.running, true},
		{"kv_util", m.KVUtil, &mp.kv, false},
		{"lora_info", m.LoRAInfo, &mp.lora, false},
		{"lora_loaded", m.LoRALoaded, &mp.loraLoaded, false},
		{"lora_gpu_loaded", m.LoRAGPULoaded, &mp.loraGPULoaded, false},
		{"lora_gpu_slots", m.LoRAGPUSlots, &mp.loraGPUSlots, false},
		{"cache_info", m.CacheInfo, &mp.cacheInfo, false},
		{"cache_block_size", m.CacheBlockSize, &mp.blockSize, false},
		{"cache_blocks", m.CacheBlocks, &mp.blocks, false},
	}
	for _, f := range fields {
		if f.need && len(f.in) == 0 {
			return nil, fmt.Errorf("%s: at least one metric selector required", f.key)
		}
		for _, s := range f.in {
			sel, err := parseSelector(s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.key, err)
			}
			*f.out = append(*f.out, sel)
			if !seen[sel.name] {
				seen[sel.name] = true
				mp.names = append(mp.names, sel.name)
			}
			for _, lm := range sel.labels {
				mp.addLabel(lm.name)
			}
		}
	}
	if len(mp.cacheInfo) > 0 && (mp.bsLabel == "" || mp.nbLabel == "") {
		return nil, fmt.Errorf("cache_info: cache_info_block_size_label and cache_info_blocks_label are required")
	}
	sort.Strings(mp.names)
	for _, n := range mp.names {
		mp.nameLens |= 1 << (len(n) % 64)
	}
	for _, l := range []string{mp.modelLabel, mp.bsLabel, mp.nbLabel} {
		mp.addLabel(l)
	}
	if len(mp.lora) > 0 {
		for _, l := range []string{"running_lora_adapters", "waiting_lora_adapters", "max_lora"} {
			mp.addLabel(l)
		}
	}
	if len(mp.loraLoaded) > 0 {
		for _, l := range []string{"adapter_name", "level", "pinned"} {
			mp.addLabel(l)
		}
	}
	return mp, nil
}

func (mp *mapper) addLabel(name string) {
	if name != "" && !slices.Contains(mp.labels, name) {
		mp.labels = append(mp.labels, name)
	}
}

// wants reports whether the metric family name is read by the mapping.
func (mp *mapper) wants(name []byte) bool {
	if mp.nameLens&(1<<(len(name)%64)) == 0 {
		return false
	}
	for _, n := range mp.names {
		if string(name) == n {
			return true
		}
	}
	return false
}
