package fakeserver

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestAdapterGauges: with 2 GPU slots and a CPU cache of 3, requests for
// adapters a, b, c in turn leave b and c on the GPU and a in the CPU cache
// (a, the least recently used, was evicted for c); the server exports
// that as vLLM's residency gauges and the older info gauge.
func TestAdapterGauges(t *testing.T) {
	_, base := start(t, func(c *Config) {
		c.Adapters = []string{"a", "b", "c"}
		c.Engine.MaxLoRAs, c.Engine.MaxCPULoRAs = 2, 3
	})
	for _, m := range []string{"a", "b", "c", "llama-3.1-8b-instruct"} {
		r := post(t, base+"/v1/completions", `{"model":"`+m+`","prompt":"hello there","max_tokens":2}`)
		_, _ = io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Fatalf("model %s: status %d", m, r.StatusCode)
		}
	}
	r := post(t, base+"/v1/completions", `{"model":"d","prompt":"x","max_tokens":1}`)
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound {
		t.Errorf("unknown adapter: status %d, want 404", r.StatusCode)
	}
	fams := scrape(t, base)
	var gpu, cpu []string
	for _, m := range fams["vllm:lora_adapter_loaded"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || l["pinned"] != "false" || l["model_name"] != "llama-3.1-8b-instruct" {
			t.Errorf("series %v = %v", l, m.GetGauge().GetValue())
		}
		switch l["level"] {
		case "gpu":
			gpu = append(gpu, l["adapter_name"])
		case "cpu":
			cpu = append(cpu, l["adapter_name"])
		}
	}
	slices.Sort(gpu)
	if !slices.Equal(gpu, []string{"b", "c"}) || !slices.Equal(cpu, []string{"a"}) {
		t.Errorf("GPU %v CPU %v, want [b c] and [a]", gpu, cpu)
	}
	if g, c, s := value(fams, "vllm:num_gpu_loaded_lora_adapters"), value(fams, "vllm:num_cpu_loaded_lora_adapters"), value(fams, "vllm:max_gpu_lora_adapters"); g != 2 || c != 1 || s != 2 {
		t.Errorf("gpu %v cpu %v slots %v, want 2, 1, 2", g, c, s)
	}
	info := fams["vllm:lora_requests_info"].GetMetric()
	if len(info) != 1 || !strings.Contains(info[0].String(), `value:"2"`) {
		t.Errorf("lora_requests_info %v, want max_lora 2", info)
	}
}

// TestNoAdapterGaugesWithoutSlots: a server without adapter slots exports
// no adapter metrics (vLLM without --enable-lora).
func TestNoAdapterGaugesWithoutSlots(t *testing.T) {
	_, base := start(t, nil)
	fams := scrape(t, base)
	for _, n := range []string{"vllm:lora_adapter_loaded", "vllm:num_gpu_loaded_lora_adapters", "vllm:max_gpu_lora_adapters", "vllm:lora_requests_info"} {
		if fams[n] != nil {
			t.Errorf("%s exported without adapter slots", n)
		}
	}
}
