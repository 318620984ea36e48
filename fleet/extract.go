package fleet

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/trimtab/trimtab/scheduler"
)

// extract maps parsed families to Metrics.
func (mp *mapper) extract(fams map[string]*dto.MetricFamily, models []string) (Metrics, error) {
	var m Metrics
	var ok bool
	var err error
	if m.Waiting, ok, err = mp.aggregate(fams, mp.waiting, models, false); err != nil {
		return Metrics{}, err
	} else if !ok {
		return Metrics{}, missing("waiting", mp.waiting)
	}
	if m.Running, ok, err = mp.aggregate(fams, mp.running, models, false); err != nil {
		return Metrics{}, err
	} else if !ok {
		return Metrics{}, missing("running", mp.running)
	}
	if len(mp.kv) > 0 {
		if m.KVUtil, ok, err = mp.aggregate(fams, mp.kv, models, true); err != nil {
			return Metrics{}, err
		} else if !ok {
			return Metrics{}, missing("kv_util", mp.kv)
		}
		m.KVUtil = min(m.KVUtil, 1)
	}
	if v, ok, err := mp.aggregate(fams, mp.blockSize, models, true); err != nil {
		return Metrics{}, err
	} else if ok {
		m.CacheBlockSize = int(v)
	}
	if v, ok, err := mp.aggregate(fams, mp.blocks, models, true); err != nil {
		return Metrics{}, err
	} else if ok {
		m.CacheBlocks = int(v)
	}
	if s := mp.latest(fams, mp.cacheInfo, models); s != nil {
		bs, err1 := labelInt(s, mp.bsLabel)
		nb, err2 := labelInt(s, mp.nbLabel)
		if err := errors.Join(err1, err2); err != nil {
			return Metrics{}, &ScrapeError{ReasonInvalidValue, fmt.Errorf("cache_info: %w", err)}
		}
		m.CacheBlockSize, m.CacheBlocks = bs, nb
	}
	if len(models) == 0 && mp.modelLabel != "" {
		m.Models = mp.seenModels(fams, mp.running)
	}
	if err := mp.extractLoRA(fams, models, &m.LoRA); err != nil {
		return Metrics{}, err
	}
	return m, nil
}

// extractLoRA reads the adapter state: activity and slots from the info
// gauge, residency from the per-adapter gauge and the slot gauges. Names
// are bounded by addAdapter.
func (mp *mapper) extractLoRA(fams map[string]*dto.MetricFamily, models []string, st *scheduler.LoRAState) error {
	if s := mp.latest(fams, mp.lora, models); s != nil {
		st.Active = splitList(labelValue(s, "running_lora_adapters"))
		st.Waiting = splitList(labelValue(s, "waiting_lora_adapters"))
		if v := labelValue(s, "max_lora"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return &ScrapeError{ReasonInvalidValue, fmt.Errorf("lora_info: max_lora %q", v)}
			}
			st.Max = n
		}
	}
	if v, ok, err := mp.aggregate(fams, mp.loraGPUSlots, models, true); err != nil {
		return err
	} else if ok {
		st.Residency = true
		st.Max = int(min(v, math.MaxInt32))
	}
	used, usedOK, err := mp.aggregate(fams, mp.loraGPULoaded, models, true)
	if err != nil {
		return err
	}
	st.Residency = st.Residency || usedOK
	gpuSeries := 0
	for i := range mp.loraLoaded {
		fam := fams[mp.loraLoaded[i].name]
		if fam == nil {
			continue
		}
		st.Residency = true
		byModel := mp.filterByModel(fam, &mp.loraLoaded[i], models)
		for _, s := range fam.GetMetric() {
			if !mp.loraLoaded[i].matches(s) || (byModel && !mp.modelIn(s, models)) {
				continue
			}
			if v := value(s); !(v > 0) { // 0 or NaN: not loaded
				continue
			}
			name := labelValue(s, "adapter_name")
			switch labelValue(s, "level") {
			case "gpu":
				gpuSeries++
				st.GPU = addAdapter(st.GPU, name)
			case "cpu":
				st.CPU = addAdapter(st.CPU, name)
			default:
				continue
			}
			if labelValue(s, "pinned") == "true" {
				st.Pinned = addAdapter(st.Pinned, name)
			}
		}
		break
	}
	// An adapter on the GPU may also be listed in the CPU cache; it is
	// served from the GPU.
	st.CPU = slices.DeleteFunc(st.CPU, func(n string) bool { return slices.Contains(st.GPU, n) })
	if len(st.CPU) == 0 {
		st.CPU = nil
	}
	st.Used = gpuSeries
	if usedOK {
		st.Used = max(st.Used, int(min(used, math.MaxInt32)))
	}
	return nil
}

// addAdapter appends name to list unless it is empty, longer than
// scheduler.MaxLoRANameBytes, already listed, or the list is full
// (scheduler.MaxLoRAAdapters).
func addAdapter(list []string, name string) []string {
	if name == "" || len(name) > scheduler.MaxLoRANameBytes || len(list) >= scheduler.MaxLoRAAdapters || slices.Contains(list, name) {
		return list
	}
	return append(list, name)
}

// seenModels returns the distinct values of the model label on the series
// of the first selector in sels that has any, sorted; nil when none.
func (mp *mapper) seenModels(fams map[string]*dto.MetricFamily, sels []selector) []string {
	for i := range sels {
		fam := fams[sels[i].name]
		if fam == nil {
			continue
		}
		var out []string
		for _, s := range fam.GetMetric() {
			if !sels[i].matches(s) {
				continue
			}
			if v := labelValue(s, mp.modelLabel); v != "" && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
		slices.Sort(out)
		return out
	}
	return nil
}

func missing(field string, sels []selector) error {
	names := make([]string, len(sels))
	for i, s := range sels {
		names[i] = s.name
	}
	return &ScrapeError{ReasonMissingMetric, fmt.Errorf("%s: none of %s present", field, strings.Join(names, ", "))}
}

// aggregate finds the first selector with matching series and sums them
// (or takes the largest when useMax). ok is false when no selector matched.
func (mp *mapper) aggregate(fams map[string]*dto.MetricFamily, sels []selector, models []string, useMax bool) (v float64, ok bool, err error) {
	for i := range sels {
		fam := fams[sels[i].name]
		if fam == nil {
			continue
		}
		byModel := mp.filterByModel(fam, &sels[i], models)
		for _, s := range fam.GetMetric() {
			if !sels[i].matches(s) || (byModel && !mp.modelIn(s, models)) {
				continue
			}
			x := value(s)
			if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				return 0, false, &ScrapeError{ReasonInvalidValue, fmt.Errorf("%s = %v", sels[i].name, x)}
			}
			switch {
			case !ok:
				v = x
			case useMax:
				v = max(v, x)
			default:
				v += x
			}
			ok = true
		}
		if ok {
			return v, true, nil
		}
	}
	return 0, false, nil
}

// latest returns the matching series with the largest value of the first
// selector that matches any (info gauges whose value is a timestamp or 1).
func (mp *mapper) latest(fams map[string]*dto.MetricFamily, sels []selector, models []string) *dto.Metric {
	for i := range sels {
		fam := fams[sels[i].name]
		if fam == nil {
			continue
		}
		byModel := mp.filterByModel(fam, &sels[i], models)
		var best *dto.Metric
		for _, s := range fam.GetMetric() {
			if !sels[i].matches(s) || (byModel && !mp.modelIn(s, models)) {
				continue
			}
			if best == nil || value(s) > value(best) {
				best = s
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// filterByModel reports whether series of fam should be restricted to the
// endpoint's models: true when the mapping has a model label, the endpoint
// lists models and at least one matching series names one of them. A
// server that labels its series with a name we do not know keeps all its
// series rather than none.
func (mp *mapper) filterByModel(fam *dto.MetricFamily, sel *selector, models []string) bool {
	if mp.modelLabel == "" || len(models) == 0 {
		return false
	}
	for _, s := range fam.GetMetric() {
		if sel.matches(s) && mp.modelIn(s, models) {
			return true
		}
	}
	return false
}

func (mp *mapper) modelIn(s *dto.Metric, models []string) bool {
	v := labelValue(s, mp.modelLabel)
	for _, m := range models {
		if v == m {
			return true
		}
	}
	return false
}

func (sel *selector) matches(s *dto.Metric) bool {
	for _, lm := range sel.labels {
		if labelValue(s, lm.name) != lm.value {
			return false
		}
	}
	return true
}

func labelValue(s *dto.Metric, name string) string {
	for _, lp := range s.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

func labelInt(s *dto.Metric, name string) (int, error) {
	v := labelValue(s, name)
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("label %s=%q is not a non-negative integer", name, v)
	}
	return n, nil
}

func value(s *dto.Metric) float64 {
	switch {
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Untyped != nil:
		return s.Untyped.GetValue()
	case s.Counter != nil:
		return s.Counter.GetValue()
	}
	return math.NaN()
}

// splitList splits a comma-separated list of adapter names, dropping empty
// items and keeping the bounds of addAdapter.
func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		out = addAdapter(out, strings.TrimSpace(p))
	}
	return out
}
