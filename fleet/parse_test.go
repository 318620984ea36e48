package fleet

import (
	"bytes"
	"errors"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/trimtab/trimtab/scheduler"
)

func mustMapper(t testing.TB, engine string, override Mapping) *mapper {
	t.Helper()
	m, ok := EngineMapping(engine)
	if !ok {
		t.Fatalf("unknown engine %q", engine)
	}
	mp, err := m.merge(override).compile()
	if err != nil {
		t.Fatal(err)
	}
	return mp
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseEngines(t *testing.T) {
	tests := []struct {
		name   string
		engine string
		file   string
		om     bool
		models []string
		want   Metrics
	}{
		{
			name: "vllm", engine: EngineVLLM, file: "vllm.txt",
			want: Metrics{
				Waiting: 3, Running: 7, KVUtil: 0.4213,
				// the lora_requests_info series with the larger timestamp
				// value (1.7645013e9 > 1.7645012e9) wins
				LoRA:           scheduler.LoRAState{Active: []string{"sql-lora"}, Waiting: []string{"chat-lora"}, Max: 4},
				CacheBlockSize: 16, CacheBlocks: 27690,
				// no declared models: the running series' model_name
				Models: []string{"meta-llama/Llama-3.1-8B-Instruct"},
			},
		},
		{
			name: "vllm model filter matches", engine: EngineVLLM, file: "vllm.txt",
			models: []string{"meta-llama/Llama-3.1-8B-Instruct"},
			want: Metrics{Waiting: 3, Running: 7, KVUtil: 0.4213,
				LoRA:           scheduler.LoRAState{Active: []string{"sql-lora"}, Waiting: []string{"chat-lora"}, Max: 4},
				CacheBlockSize: 16, CacheBlocks: 27690},
		},
		{
			// old KV name (gpu_cache_usage_perc) via the second selector;
			// OpenMetrics parser
			name: "vllm openmetrics old kv name", engine: EngineVLLM, file: "vllm_openmetrics.txt", om: true,
			want: Metrics{Waiting: 1, Running: 2, KVUtil: 0.5, Models: []string{"llama"}},
		},
		{
			name: "sglang", engine: EngineSGLang, file: "sglang.txt",
			want: Metrics{Waiting: 2826, Running: 162, KVUtil: 0.28, Models: []string{"Qwen/Qwen2.5-7B-Instruct"}},
		},
		{
			// request_type="waiting" → 4, "scheduled" → 9,
			// kv_cache_block_type="fraction" → 0.4875, tokens_per 64, max 6240
			name: "trtllm triton", engine: EngineTRTLLM, file: "trtllm.txt",
			want: Metrics{Waiting: 4, Running: 9, KVUtil: 0.4875, CacheBlockSize: 64, CacheBlocks: 6240, Models: []string{"tensorrt_llm"}},
		},
		{
			name: "trtllm-serve", engine: EngineTRTLLM, file: "trtllm_serve.txt",
			want: Metrics{Waiting: 2, Running: 6, KVUtil: 0.25},
		},
		{
			// TGI exports no KV utilisation: KVUtil stays 0
			name: "tgi", engine: EngineTGI, file: "tgi.txt",
			want: Metrics{Waiting: 5, Running: 12},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newParser(mustMapper(t, tt.engine, Mapping{}))
			got, err := p.parse(readTestdata(t, tt.file), tt.om, tt.models)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

const multiModel = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 1
vllm:num_requests_waiting{model_name="b"} 10
vllm:num_requests_waiting{model_name="c"} 100
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 2
vllm:num_requests_running{model_name="b"} 20
vllm:num_requests_running{model_name="c"} 200
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="a"} 0.1
vllm:kv_cache_usage_perc{model_name="b"} 0.2
vllm:kv_cache_usage_perc{model_name="c"} 0.3
`

func TestParseModelFilter(t *testing.T) {
	tests := []struct {
		name   string
		models []string
		want   Metrics
	}{
		// no models: every series counts; waiting 1+10+100, running 2+20+200,
		// kv max; the models served are learnt from the running series
		{"all", nil, Metrics{Waiting: 111, Running: 222, KVUtil: 0.3, Models: []string{"a", "b", "c"}}},
		// a and b: waiting 1+10, running 2+20, kv max(0.1,0.2)
		{"a+b", []string{"a", "b"}, Metrics{Waiting: 11, Running: 22, KVUtil: 0.2}},
		// only c
		{"c", []string{"c"}, Metrics{Waiting: 100, Running: 200, KVUtil: 0.3}},
		// unknown model: no series names it, so all count (fail open)
		{"unknown", []string{"zzz"}, Metrics{Waiting: 111, Running: 222, KVUtil: 0.3}},
	}
	p := newParser(mustMapper(t, EngineVLLM, Mapping{}))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.parse([]byte(multiModel), false, tt.models)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseQuotedName(t *testing.T) {
	// Prometheus text 1.0 may quote metric names: {"name", labels…} value.
	body := `{"vllm:num_requests_waiting",model_name="a",engine="0"} 5
{"vllm:num_requests_running"} 6
vllm:kv_cache_usage_perc {model_name="a"} 0.25
`
	got, err := newParser(mustMapper(t, EngineVLLM, Mapping{})).parse([]byte(body), false, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Metrics{Waiting: 5, Running: 6, KVUtil: 0.25}); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestParseOverride(t *testing.T) {
	// A renamed waiting metric in YAML replaces the engine default; the
	// other fields keep vLLM's names.
	mp := mustMapper(t, EngineVLLM, Mapping{Waiting: []string{`custom_queue{pool="x"}`}})
	body := `custom_queue{pool="x"} 4
custom_queue{pool="y"} 40
vllm:num_requests_running 1
vllm:kv_cache_usage_perc 1.7
`
	got, err := newParser(mp).parse([]byte(body), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// pool="y" does not match; KV 1.7 clamps to 1
	want := Metrics{Waiting: 4, Running: 1, KVUtil: 1}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestParseBadInput(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		om     bool
		reason string
	}{
		{"empty", "", false, ReasonMissingMetric},
		{"only other metrics", "foo 1\nbar{a=\"b\"} 2\n", false, ReasonMissingMetric},
		{"missing kv", "vllm:num_requests_waiting 1\nvllm:num_requests_running 1\n", false, ReasonMissingMetric},
		{"garbage", "<html><body>Bad Gateway</body></html>\n", false, ReasonParse},
		{"binary", "\x00\x01\x02garbage", false, ReasonParse},
		{"no value", "vllm:num_requests_waiting\n", false, ReasonParse},
		{"bad value", "vllm:num_requests_waiting abc\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0\n", false, ReasonParse},
		{"nan", "vllm:num_requests_waiting NaN\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0\n", false, ReasonInvalidValue},
		{"negative", "vllm:num_requests_waiting 1\nvllm:num_requests_running -3\nvllm:kv_cache_usage_perc 0\n", false, ReasonInvalidValue},
		{"inf kv", "vllm:num_requests_waiting 1\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc +Inf\n", false, ReasonInvalidValue},
		{"bad block size", "vllm:num_requests_waiting 1\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0\nvllm:cache_config_info{block_size=\"x\",num_gpu_blocks=\"1\"} 1\n", false, ReasonInvalidValue},
		{"openmetrics without EOF", "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n", true, ReasonParse},
		{"flood of mapped series", strings.Repeat("vllm:num_requests_waiting{model_name=\"a\"} 1\n", 8000), false, ReasonTooLarge},
		{"too many read labels", "vllm:num_requests_waiting{" + strings.Repeat("model_name=\"a\",", 17) + "} 1\n", false, ReasonParse},
		{"unquoted label value", "vllm:num_requests_waiting{a=b} 1\n", false, ReasonParse},
		{"junk between labels", "vllm:num_requests_waiting{a=\"b\" c=\"d\"} 1\n", false, ReasonParse},
		{"data after EOF", "vllm:num_requests_waiting 1\n# EOF\nvllm:num_requests_running 1\n", true, ReasonParse},
		{"unterminated labels", "vllm:num_requests_waiting{a=\"b 1\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0\n", false, ReasonParse},
	}
	p := newParser(mustMapper(t, EngineVLLM, Mapping{}))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.parse([]byte(tt.body), tt.om, nil)
			var se *ScrapeError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *ScrapeError", err)
			}
			if se.Reason != tt.reason {
				t.Errorf("reason = %s (%v), want %s", se.Reason, err, tt.reason)
			}
		})
	}
}

func TestParseSelector(t *testing.T) {
	tests := []struct {
		in      string
		want    selector
		wantErr bool
	}{
		{"vllm:num_requests_waiting", selector{name: "vllm:num_requests_waiting"}, false},
		{`m{a="x", b=y}`, selector{name: "m", labels: []labelMatch{{"a", "x"}, {"b", "y"}}}, false},
		{`m{}`, selector{name: "m"}, false},
		{`m{a="x"`, selector{}, true},
		{`9m`, selector{}, true},
		{`m{=x}`, selector{}, true},
		{``, selector{}, true},
	}
	for _, tt := range tests {
		got, err := parseSelector(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("%q: err = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: got %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func FuzzParseVLLM(f *testing.F) {
	for _, name := range []string{"vllm.txt", "sglang.txt", "tgi.txt", "trtllm.txt"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
	}
	f.Add([]byte(multiModel), false)
	om, err := os.ReadFile("testdata/vllm_openmetrics.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(om, true)
	f.Add([]byte("vllm:num_requests_waiting{model_name=\"a\"} 1e308\nvllm:num_requests_waiting{model_name=\"a\"} 1e308\n"), false)
	f.Add([]byte(`{"vllm:num_requests_waiting",model_name="a"} 1`), false)
	f.Add([]byte(loadBase+`vllm:lora_adapter_loaded{adapter_name="x",level="gpu",pinned="true"} 1
vllm:lora_adapter_loaded{adapter_name="x",level="cpu",pinned="false"} 1
vllm:num_gpu_loaded_lora_adapters 1e300
vllm:max_gpu_lora_adapters 4
`), false)
	mp := mustMapper(f, EngineVLLM, Mapping{})
	f.Fuzz(func(t *testing.T, body []byte, openMetrics bool) {
		p := newParser(mp)
		m, err := p.parse(body, openMetrics, []string{"a"})
		if err != nil {
			var se *ScrapeError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a *ScrapeError", err)
			}
			return
		}
		if m.Waiting < 0 || m.Running < 0 || m.KVUtil < 0 || m.KVUtil > 1 || m.CacheBlocks < 0 || m.CacheBlockSize < 0 {
			t.Fatalf("out-of-range metrics %+v", m)
		}
		l := &m.LoRA
		for _, list := range [][]string{l.Active, l.Waiting, l.GPU, l.CPU, l.Pinned} {
			if len(list) > scheduler.MaxLoRAAdapters {
				t.Fatalf("%d adapters, bound %d", len(list), scheduler.MaxLoRAAdapters)
			}
			for _, s := range list {
				if s == "" || len(s) > scheduler.MaxLoRANameBytes || strings.Contains(s, ",") {
					t.Fatalf("bad adapter name %q", s)
				}
			}
		}
		if l.Max < 0 || l.Used < len(l.GPU) {
			t.Fatalf("slots max %d used %d for %d GPU adapters", l.Max, l.Used, len(l.GPU))
		}
	})
}

func BenchmarkParseVLLM(b *testing.B) {
	body := readTestdata(b, "vllm.txt")
	// A second body with other load figures: alternating defeats the
	// parser's unchanged-exposition shortcut, as a busy server does.
	other := bytes.Replace(body, []byte("} 3.0\n"), []byte("} 4.0\n"), 1)
	if bytes.Equal(body, other) {
		b.Fatal("variant body equals the original")
	}
	p := newParser(mustMapper(b, EngineVLLM, Mapping{}))
	b.Run("lines=328/changing", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		bodies := [2][]byte{body, other}
		i := 0
		for b.Loop() {
			i++
			if _, err := p.parse(bodies[i&1], false, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lines=328/unchanged", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := p.parse(body, false, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestParseReusesUnchanged(t *testing.T) {
	p := newParser(mustMapper(t, EngineVLLM, Mapping{}))
	body := func(w int) []byte {
		return []byte("vllm:num_requests_waiting " + strconv.Itoa(w) + "\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.5\n# HELP x\n")
	}
	steps := []struct {
		body   []byte
		models []string
		want   float64 // waiting
	}{
		{body(1), nil, 1},
		{body(1), nil, 1},                         // identical: reused
		{append(body(1), "other 1\n"...), nil, 1}, // unread lines differ: still reused
		{body(2), nil, 2},                         // a kept line changed: parsed again
		{[]byte(multiModel), []string{"a"}, 1},    // model a: 1
		{[]byte(multiModel), []string{"c"}, 100},  // same bytes, other models: parsed again
	}
	for i, st := range steps {
		m, err := p.parse(st.body, false, st.models)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if m.Waiting != st.want {
			t.Errorf("step %d: waiting %v, want %v", i, m.Waiting, st.want)
		}
	}
	// An error is not cached as success.
	if _, err := p.parse([]byte("vllm:num_requests_waiting NaN\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0\n"), false, nil); err == nil {
		t.Fatal("NaN accepted")
	}
}

// omRich exercises what the text normalisation must handle: float
// timestamps, exemplars, the info and unknown types, a brace and a space
// inside a label value.
const omRich = `# HELP vllm:num_requests_waiting Waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a } b",engine="0"} 4 1764500000.125
# TYPE vllm:num_requests_running unknown
vllm:num_requests_running{model_name="a } b"} 6
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="a } b"} 0.75 1764500000
# TYPE vllm:iteration_tokens counter
vllm:iteration_tokens_total{model_name="a } b"} 17 # {trace_id="x y"} 1.0 1764500000.0
# TYPE vllm:cache_config info
vllm:cache_config_info{block_size="32",num_gpu_blocks="100"} 1
# EOF
`

// TestOpenMetricsMatchesDecoder checks the fast OpenMetrics path (normalise
// to text, TextParser) against expfmt's reference OpenMetrics decoder.
func TestOpenMetricsMatchesDecoder(t *testing.T) {
	mp := mustMapper(t, EngineVLLM, Mapping{})
	for name, body := range map[string][]byte{
		"vllm_openmetrics.txt": readTestdata(t, "vllm_openmetrics.txt"),
		"rich":                 []byte(omRich),
	} {
		t.Run(name, func(t *testing.T) {
			fast, err := newParser(mp).parse(body, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The reference decoder rejects the info type.
			refBody := bytes.Replace(body, []byte("# TYPE vllm:cache_config info"), []byte("# TYPE vllm:cache_config_info gauge"), 1)
			dec := expfmt.NewDecoder(bytes.NewReader(refBody), expfmt.FmtOpenMetrics_1_0_0)
			fams := map[string]*dto.MetricFamily{}
			for {
				mf := new(dto.MetricFamily)
				if err := dec.Decode(mf); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("reference decoder: %v", err)
				}
				fams[mf.GetName()] = mf
			}
			ref, err := mp.extract(fams, nil)
			if err != nil {
				t.Fatalf("reference extract: %v", err)
			}
			if !reflect.DeepEqual(fast, ref) {
				t.Errorf("fast path %+v\nreference  %+v", fast, ref)
			}
		})
	}
	// rich: waiting 4, running 6 (unknown type → untyped), kv 0.75,
	// block size 32, 100 blocks
	got, _ := newParser(mp).parse([]byte(omRich), true, nil)
	want := Metrics{Waiting: 4, Running: 6, KVUtil: 0.75, CacheBlockSize: 32, CacheBlocks: 100, Models: []string{"a } b"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rich: got %+v, want %+v", got, want)
	}
}

// TestWantsLongNames: the name-length prefilter keeps wanted names of any
// length, including ones whose length shares a bit (len % 64) with other
// wanted names or exceeds 63 bytes.
func TestWantsLongNames(t *testing.T) {
	name := func(n int) string { return "x:" + strings.Repeat("a", n-2) }
	n64, n66, n89 := name(64), name(66), name(89) // 89 % 64 = 25 = len("vllm:num_requests_waiting")
	mp := mustMapper(t, EngineVLLM, Mapping{Waiting: []string{n64}, Running: []string{n66}, KVUtil: []string{n89}})
	for _, n := range []string{n64, n66, n89} {
		if !mp.wants([]byte(n)) {
			t.Errorf("wants(%d-byte name) = false", len(n))
		}
	}
	for _, n := range []string{name(63), name(65), name(25), "vllm:num_requests_waitinX"} {
		if mp.wants([]byte(n)) {
			t.Errorf("wants(%q) = true", n)
		}
	}
	body := n64 + " 3\n" + n66 + " 5\n" + `{"` + n89 + `"} 0.25` + "\n"
	m, err := newParser(mp).parse([]byte(body), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Waiting != 3 || m.Running != 5 || m.KVUtil != 0.25 {
		t.Errorf("got waiting %v running %v kv %v, want 3 5 0.25", m.Waiting, m.Running, m.KVUtil)
	}
}

// FuzzWants: the length prefilter never changes the answer of an exact
// comparison against the mapping's names.
func FuzzWants(f *testing.F) {
	mp := mustMapper(f, EngineVLLM, Mapping{Waiting: []string{"x:" + strings.Repeat("a", 87)}})
	for _, n := range mp.names {
		f.Add([]byte(n))
	}
	f.Add([]byte("vllm:num_requests_waitinX"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, name []byte) {
		if got, want := mp.wants(name), slices.Contains(mp.names, string(name)); got != want {
			t.Fatalf("wants(%q) = %v, exact comparison says %v", name, got, want)
		}
	})
}
