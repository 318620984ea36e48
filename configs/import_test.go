package configs

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite the importer's golden files")

func importFile(t *testing.T, name string) *Imported {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "llm-d", name))
	if err != nil {
		t.Fatal(err)
	}
	im, err := ImportEndpointPicker(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return im
}

// The defaults llm-d-router runs with import as trimtab's default
// weights: prefix 3 : queue 2 : kvcache 2, and the profile validates.
func TestImportLLMDDefaults(t *testing.T) {
	im := importFile(t, "default-plugins.yaml")
	f, err := Parse(im.Profile)
	if err != nil {
		t.Fatalf("imported profile does not validate: %v\n%s", err, im.Profile)
	}
	want := map[string]float64{"prefix": 3, "queue": 2, "kvcache": 2}
	if len(f.Scorers) != len(want) {
		t.Fatalf("%d scorers, want %d:\n%s", len(f.Scorers), len(want), im.Profile)
	}
	for _, sc := range f.Scorers {
		if w, ok := want[sc.Type]; !ok || *sc.Weight != w {
			t.Errorf("scorer %s weight %v, want %v", sc.Type, *sc.Weight, w)
		}
	}
	if f.Picker.Type != "max-score" {
		t.Errorf("picker %q, want max-score", f.Picker.Type)
	}
	// Only the metrics data layer is left over, and it needs nothing.
	if len(im.Unmapped) != 2 {
		t.Errorf("unmapped %q, want the two metrics data-layer plugins", im.Unmapped)
	}
}

// Golden files: the imported profile as people read it.
func TestImportGolden(t *testing.T) {
	for _, name := range []string{"default-plugins", "mixed", "legacy-chars", "optimized-baseline", "affinity-latency-pd"} {
		t.Run(name, func(t *testing.T) {
			im := importFile(t, name+".yaml")
			golden := filepath.Join("testdata", "llm-d", name+".golden")
			if *updateGolden {
				if err := os.WriteFile(golden, im.Profile, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if string(im.Profile) != string(want) {
				t.Errorf("imported profile differs from %s (run go test ./configs -run TestImportGolden -update):\n%s", golden, im.Profile)
			}
		})
	}
}

func TestImportMapsParameters(t *testing.T) {
	f, err := Parse(importFile(t, "mixed.yaml").Profile)
	if err != nil {
		t.Fatal(err)
	}
	byType := map[string]ScorerConfig{}
	for _, sc := range f.Scorers {
		byType[sc.Type] = sc
	}
	tests := []struct {
		typ    string
		weight float64
		params map[string]any
	}{
		// The producer's blockSizeTokens 16; maxPrefixTokensToMatch
		// 8192 tokens / 16 tokens a block = 512 blocks.
		{"prefix", 5, map[string]any{"block_size": 16, "max_blocks": 512, "capacity": 31250}},
		{"kvcache", 2.5, nil},
		{"inflight", 1, nil}, // referenced without a weight: the endpoint picker's default 1
		{"lora", 0.5, nil},
		{"session", 4, nil},
	}
	for _, tt := range tests {
		sc, ok := byType[tt.typ]
		if !ok {
			t.Errorf("no %s scorer", tt.typ)
			continue
		}
		if *sc.Weight != tt.weight {
			t.Errorf("%s weight %v, want %v", tt.typ, *sc.Weight, tt.weight)
		}
		for k, v := range tt.params {
			if sc.Params[k] != v {
				t.Errorf("%s params.%s = %v, want %v", tt.typ, k, sc.Params[k], v)
			}
		}
	}
	if len(f.Scorers) != len(tests) {
		t.Errorf("%d scorers, want %d (no-hit-lru-scorer has no equivalent)", len(f.Scorers), len(tests))
	}
	// maxNumOfEndpoints 3 = the chosen endpoint + 2 fallbacks.
	if f.Picker.Type != "weighted-random" || f.Scheduler.MaxFallbacks != 2 {
		t.Errorf("picker %q, max_fallbacks %d; want weighted-random, 2", f.Picker.Type, f.Scheduler.MaxFallbacks)
	}
}

func TestImportNamesWhatItCannotMap(t *testing.T) {
	im := importFile(t, "mixed.yaml")
	all := strings.Join(im.Unmapped, "\n")
	for _, want := range []string{
		"featureGates: not mapped",
		"plugins[0] single-profile-handler: nothing to map",
		"plugins[1] decode-filter: not mapped",
		"plugins[3] prefix-cache-scorer parameters.maxModelLen: not mapped",
		"plugins[3] prefix-cache-scorer parameters.prefixLengthWeight: not mapped",
		"plugins[2] approx-prefix-cache-producer parameters.autoTune: not mapped",
		"plugins[5] active-request-scorer parameters.idleThreshold: not mapped",
		"plugins[7] session-affinity-scorer: carried over approximately",
		"plugins[8] no-hit-lru-scorer: not mapped",
		"plugins[9] weighted-random-picker: carried over approximately",
		"schedulingProfiles[0] prefill: not mapped",
		"plugins[10] prefill-queue (queue-scorer): skipped",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("unmapped list lacks %q:\n%s", want, all)
		}
	}
	for _, u := range im.Unmapped {
		if !strings.Contains(string(im.Profile), u) {
			t.Errorf("profile comments lack %q", u)
		}
	}
}

func TestImportLegacyCharacterBlocks(t *testing.T) {
	f, err := Parse(importFile(t, "legacy-chars.yaml").Profile)
	if err != nil {
		t.Fatal(err)
	}
	// hashBlockSize 5 characters is not a whole number of 4-byte tokens,
	// so the block is kept exact: 5 "tokens" of 1 byte.
	p := f.Scorers[0].Params
	if p["block_size"] != 5 || p["bytes_per_token"] != 1 || p["max_blocks"] != 256 {
		t.Errorf("prefix params %v, want block_size 5, bytes_per_token 1, max_blocks 256", p)
	}
	// No scheduling profile: every scorer with weight 1, as the endpoint
	// picker does.
	for _, sc := range f.Scorers {
		if *sc.Weight != 1 {
			t.Errorf("%s weight %v, want 1", sc.Type, *sc.Weight)
		}
	}
}

func TestImportErrorsNameTheField(t *testing.T) {
	const head = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
	tests := []struct{ name, yaml, want string }{
		{"not yaml", "plugins: [", "not valid YAML"},
		{"empty", "", "empty document"},
		{"a list", "- a\n", "top level: want a mapping"},
		{"no apiVersion", "kind: EndpointPickerConfig\n", "apiVersion: required"},
		{"wrong apiVersion", "apiVersion: v1\nkind: EndpointPickerConfig\n", `apiVersion: "v1" is not an EndpointPickerConfig version`},
		{"wrong kind", "apiVersion: llm-d.ai/v1alpha1\nkind: ConfigMap\n", `kind: "ConfigMap", want EndpointPickerConfig`},
		{"no plugins", head, "plugins: required"},
		{"plugin not a map", head + "plugins: [queue-scorer]\n", "plugins[0]: want a mapping"},
		{"plugin without type", head + "plugins:\n- name: q\n", "plugins[0].type: required"},
		{"unknown plugin field", head + "plugins:\n- type: queue-scorer\n  weight: 2\n", `plugins[0]: unknown field "weight"`},
		{"duplicate name", head + "plugins:\n- type: queue-scorer\n- type: queue-scorer\n", `plugins[1].name: "queue-scorer" is already the name of plugins[0]`},
		{"bad parameters", head + "plugins:\n- type: queue-scorer\n  parameters: 3\n", "plugins[0].parameters: want a mapping"},
		{"unknown ref", head + "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue\n", `schedulingProfiles[0].plugins[0].pluginRef: no plugin named "queue"`},
		{"text weight", head + "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n    weight: high\n", `schedulingProfiles[0].plugins[0].weight: want a number, got the string "high"`},
		{"negative weight", head + "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n    weight: -1\n", "schedulingProfiles[0].plugins[0].weight: -1, want a number in 0…1e+06"},
		{"zero weights", head + "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n    weight: 0\n", "every scorer carried over has weight 0"},
		{"nothing mappable", head + "plugins:\n- type: decode-filter\n", "no scorer of the imported profile has a trimtab equivalent"},
		{"bad block size", head + "plugins:\n- type: prefix-cache-scorer\n  parameters:\n    blockSizeTokens: -4\n", "plugins[0].parameters.blockSizeTokens: want a whole number > 0, got the number -4"},
		{"block size over a MiB", head + "plugins:\n- type: prefix-cache-scorer\n  parameters:\n    blockSizeTokens: 1000000\n", "plugins[0].parameters: carried over as prefix.block_size"},
		{"bad maxNumOfEndpoints", head + "plugins:\n- type: queue-scorer\n- type: max-score-picker\n  parameters:\n    maxNumOfEndpoints: 0\n", "plugins[1].parameters.maxNumOfEndpoints: want a whole number ≥ 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ImportEndpointPicker([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// FuzzImportEndpointPicker: the importer never panics, and whatever it
// accepts becomes a profile that trimtab's loader accepts.
func FuzzImportEndpointPicker(f *testing.F) {
	for _, name := range []string{"default-plugins", "mixed", "legacy-chars", "optimized-baseline", "affinity-latency-pd"} {
		data, err := os.ReadFile(filepath.Join("testdata", "llm-d", name+".yaml"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("apiVersion: llm-d.ai/v1\nkind: EndpointPickerConfig\nplugins:\n- type: prefix-cache-scorer\n  name: queue\n- type: queue-scorer\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		im, err := ImportEndpointPicker(data)
		if err != nil {
			return
		}
		if _, err := Parse(im.Profile); err != nil {
			t.Fatalf("accepted input gave an invalid profile: %v\n%s", err, im.Profile)
		}
	})
}

// llm-d's optimized-baseline guide imports as the llmd-token-load
// profile: the prefix-affinity filter (τ 0.80, gate 286,720 tokens), the
// token-load scorer on llm-d's scale, and a prefix index of weight 0
// learning at the pick with the producer's 40,960 tokens (640 blocks of
// 64 tokens).
func TestImportOptimizedBaseline(t *testing.T) {
	im := importFile(t, "optimized-baseline.yaml")
	f, err := Parse(im.Profile)
	if err != nil {
		t.Fatalf("imported profile does not validate: %v\n%s", err, im.Profile)
	}
	if fmt.Sprint(f.Filters) != "[model healthy prefix-affinity]" {
		t.Errorf("filters %v", f.Filters)
	}
	if f.PrefixAffinity.Threshold != 0.8 || f.PrefixAffinity.MaxTokensInFlightPenalty != 286720 {
		t.Errorf("prefix_affinity %+v, want threshold 0.8, penalty 286720", f.PrefixAffinity)
	}
	got := map[string]string{}
	for _, sc := range f.Scorers {
		got[sc.Type] = fmt.Sprint(*sc.Weight, " ", sc.Params)
	}
	want := map[string]string{
		"token-load": "1 map[queue_threshold_tokens:4194304]",
		"prefix":     "0 map[learn:pick max_blocks:640]", // ⌈40960 × 4 / 256⌉ = 640
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("scorers %v, want %v", got, want)
	}
	for _, line := range im.Unmapped {
		if strings.Contains(line, "not mapped") {
			t.Errorf("the guide should map whole; unmapped: %s", line)
		}
	}
}

// What trimtab cannot map is named line by line; the TTFT gate estimated
// from throughput becomes the token gate: 5000 ms × 20000 tokens/s ÷ 1000
// = 100,000 tokens.
func TestImportAffinityUnmappable(t *testing.T) {
	im := importFile(t, "affinity-latency-pd.yaml")
	f, err := Parse(im.Profile)
	if err != nil {
		t.Fatalf("imported profile does not validate: %v\n%s", err, im.Profile)
	}
	if f.PrefixAffinity.MaxTokensInFlightPenalty != 100000 {
		t.Errorf("penalty %d, want 100000", f.PrefixAffinity.MaxTokensInFlightPenalty)
	}
	all := strings.Join(im.Unmapped, "\n")
	for _, want := range []string{
		"plugins[0] pd-profile-handler: not mapped (prefill/decode disaggregation",
		"plugins[2] predicted-latency-producer: not mapped (a latency predictor",
		"plugins[5] latency-scorer: not mapped (a latency predictor",
		"sticky (prefix-cache-affinity-filter) parameters.explorationProbability: not mapped",
		"parameters.addEstimatedOutputTokens: not mapped",
		"parameters.maxTTFTPenaltyMs: carried over as max_tokens_in_flight_penalty: 5000 ms × 20000 tokens/s ÷ 1000 = 100000 tokens",
		"schedulingProfiles[0] prefill: not mapped",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("unmapped lacks %q:\n%s", want, all)
		}
	}
}

func TestImportBoundsPlugins(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n")
	for i := range MaxImportPlugins + 1 {
		fmt.Fprintf(&b, "- {type: queue-scorer, name: q%d}\n", i)
	}
	_, err := ImportEndpointPicker([]byte(b.String()))
	if want := "plugins: 257 plugins, at most 256"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}
