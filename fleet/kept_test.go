package fleet

import (
	"bytes"
	"os"
	"reflect"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// checkKept parses body's kept lines with kp and with expfmt's TextParser
// (what keptParser replaces) and fails unless both accept or both reject
// them and, when they accept, extract maps both to the same Metrics.
func checkKept(t *testing.T, mp *mapper, kp *keptParser, body []byte, om bool) {
	t.Helper()
	keep, err := mp.filter(body, nil, om)
	if err != nil {
		return
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	ref, refErr := tp.TextToMetricFamilies(bytes.NewReader(keep))
	got, gotErr := kp.parse(keep, mp)
	if (refErr == nil) != (gotErr == nil) {
		t.Fatalf("kept lines %q: TextParser err %v, keptParser err %v", keep, refErr, gotErr)
	}
	if refErr != nil {
		return
	}
	for _, models := range [][]string{nil, {"a"}} {
		mr, er := mp.extract(ref, models)
		mg, eg := mp.extract(got, models)
		if !reflect.DeepEqual(mr, mg) || (er == nil) != (eg == nil) || (er != nil && er.Error() != eg.Error()) {
			t.Fatalf("kept lines %q, models %v:\nTextParser  %+v, %v\nkeptParser %+v, %v", keep, models, mr, er, mg, eg)
		}
	}
}

var keptCases = []string{
	"vllm:num_requests_waiting 1\nvllm:num_requests_running 2 1700000000000\nvllm:kv_cache_usage_perc 0.5\n",
	"vllm:num_requests_waiting{model_name=\"a\"} 1\nvllm:num_requests_waiting{model_name=\"b\"} 2\nvllm:num_requests_running{model_name=\"a\"} +Inf\nvllm:kv_cache_usage_perc 1e-3\n",
	"vllm:num_requests_waiting{model_name=\"a\\\\b\\\"c\\nd\"} 1\nvllm:num_requests_running{model_name = \"a\" } 2\nvllm:kv_cache_usage_perc NaN\n",
	"vllm:num_requests_waiting{model_name=\"a\",model_name=\"b\"} 1\n", // duplicate label
	"vllm:num_requests_waiting{model_name=\"a\\q\"} 1\n",               // bad escape
	"vllm:num_requests_waiting{model_name=\"\xff\"} 1\n",               // not UTF-8
	"vllm:num_requests_waiting 0x1p3\n", // hex float
	"vllm:num_requests_waiting 1_000\n", // underscore
	"vllm:num_requests_waiting 1 2 3\n", // spurious after timestamp
	"vllm:num_requests_waiting 1 1.5\n", // float timestamp
	"vllm:num_requests_waiting{} 1\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0\n",
	"{\"vllm:num_requests_waiting\",model_name=\"a\"} 1\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0\n",
	"vllm:lora_requests_info{running_lora_adapters=\"x,y\",waiting_lora_adapters=\"\",max_lora=\"2\"} 1.7e9\nvllm:num_requests_waiting 1\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0\n",
}

// TestKeptMatchesTextParser runs keptParser and expfmt's TextParser over
// the shipped expositions and edge cases, one parser reused throughout as
// a scrape loop reuses it.
func TestKeptMatchesTextParser(t *testing.T) {
	mp := mustMapper(t, EngineVLLM, Mapping{})
	kp := newKeptParser()
	for _, name := range []string{"vllm.txt", "vllm_openmetrics.txt"} {
		checkKept(t, mp, kp, readTestdata(t, name), name == "vllm_openmetrics.txt")
	}
	for _, c := range keptCases {
		checkKept(t, mp, kp, []byte(c), false)
	}
	checkKept(t, mp, kp, []byte(multiModel), false)
}

func FuzzKeptMatchesTextParser(f *testing.F) {
	b, err := os.ReadFile("testdata/vllm.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, false)
	for _, c := range keptCases {
		f.Add([]byte(c), false)
	}
	mp := mustMapper(f, EngineVLLM, Mapping{})
	kp := newKeptParser()
	f.Fuzz(func(t *testing.T, body []byte, om bool) {
		checkKept(t, mp, kp, body, om)
	})
}
