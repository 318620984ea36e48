package fleet

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
)

// loadBase is the part of a vLLM exposition every case needs.
const loadBase = "vllm:num_requests_waiting 0\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.1\n"

func TestParseLoRAResidency(t *testing.T) {
	long := strings.Repeat("n", scheduler.MaxLoRANameBytes+1)
	var many strings.Builder
	for i := range scheduler.MaxLoRAAdapters + 44 {
		fmt.Fprintf(&many, "vllm:lora_adapter_loaded{adapter_name=\"a%d\",level=\"gpu\",pinned=\"false\"} 1\n", i)
	}
	tests := []struct {
		name string
		body string
		want scheduler.LoRAState
	}{
		{
			name: "legacy info only",
			body: `vllm:lora_requests_info{max_lora="4",running_lora_adapters="x,y",waiting_lora_adapters="z"} 1.7e9` + "\n",
			want: scheduler.LoRAState{Active: []string{"x", "y"}, Waiting: []string{"z"}, Max: 4},
		},
		{
			// x on the GPU (also listed in the CPU cache: served from the
			// GPU), p pinned on the GPU, c in the CPU cache only, an
			// unloaded series (value 0) and an unknown level ignored;
			// slots from max_gpu_lora_adapters (8) over max_lora (4).
			name: "residency",
			body: `vllm:lora_requests_info{max_lora="4",running_lora_adapters="x",waiting_lora_adapters=""} 1.7e9
vllm:lora_adapter_loaded{adapter_name="x",level="gpu",pinned="false"} 1
vllm:lora_adapter_loaded{adapter_name="x",level="cpu",pinned="false"} 1
vllm:lora_adapter_loaded{adapter_name="p",level="gpu",pinned="true"} 1
vllm:lora_adapter_loaded{adapter_name="c",level="cpu",pinned="false"} 1
vllm:lora_adapter_loaded{adapter_name="gone",level="gpu",pinned="false"} 0
vllm:lora_adapter_loaded{adapter_name="odd",level="disk",pinned="false"} 1
vllm:num_gpu_loaded_lora_adapters 2
vllm:max_gpu_lora_adapters 8
`,
			want: scheduler.LoRAState{Active: []string{"x"}, Max: 8, Residency: true,
				GPU: []string{"x", "p"}, CPU: []string{"c"}, Pinned: []string{"p"}, Used: 2},
		},
		{
			// an idle server with nothing loaded still says it reports
			// residency through the slot gauges
			name: "nothing loaded",
			body: "vllm:num_gpu_loaded_lora_adapters 0\nvllm:max_gpu_lora_adapters 4\n",
			want: scheduler.LoRAState{Max: 4, Residency: true},
		},
		{
			// a name over the bound is dropped but its slot counts
			name: "long name",
			body: `vllm:lora_adapter_loaded{adapter_name="` + long + `",level="gpu",pinned="false"} 1
vllm:lora_adapter_loaded{adapter_name="ok",level="gpu",pinned="false"} 1
`,
			want: scheduler.LoRAState{Residency: true, GPU: []string{"ok"}, Used: 2},
		},
		{
			// 300 GPU series: the list keeps 256 names, Used counts 300
			name: "too many adapters",
			body: many.String(),
			want: func() scheduler.LoRAState {
				st := scheduler.LoRAState{Residency: true, Used: scheduler.MaxLoRAAdapters + 44}
				for i := range scheduler.MaxLoRAAdapters {
					st.GPU = append(st.GPU, fmt.Sprintf("a%d", i))
				}
				return st
			}(),
		},
		{
			// the legacy labels keep the same bounds, and drop repeats
			name: "legacy bounds",
			body: `vllm:lora_requests_info{max_lora="2",running_lora_adapters="x,` + long + `,x",waiting_lora_adapters=""} 1.7e9` + "\n",
			want: scheduler.LoRAState{Active: []string{"x"}, Max: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newParser(mustMapper(t, EngineVLLM, Mapping{}))
			m, err := p.parse([]byte(loadBase+tt.body), false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m.LoRA, tt.want) {
				t.Errorf("got  %+v\nwant %+v", m.LoRA, tt.want)
			}
		})
	}
}
