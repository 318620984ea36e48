package configs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

func TestShippedProfilesValidate(t *testing.T) {
	names := Shipped()
	if len(names) < 3 {
		t.Fatalf("shipped profiles %v, want at least default, prefix-heavy, load-only", names)
	}
	for _, name := range names {
		f, err := LoadShipped(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if _, err := f.BuildScheduler(nil, scheduler.Deps{}); err == nil {
			t.Errorf("%s: building with an empty registry succeeded", name)
		}
	}
}

func TestDefaultProfileWeights(t *testing.T) {
	f, err := LoadShipped("default")
	if err != nil {
		t.Fatal(err)
	}
	// The field's validated default: prefix 3 : queue 2 : kvcache 2.
	want := map[string]float64{"prefix": 3, "queue": 2, "kvcache": 2}
	for _, sc := range f.Scorers {
		if w, ok := want[sc.Type]; ok && *sc.Weight != w {
			t.Errorf("%s weight %v, want %v", sc.Type, *sc.Weight, w)
		}
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"not yaml", "scorers: [", "not valid YAML"},
		{"unknown top-level field", "scorrers: []\n", "unknown field: scorrers"},
		{"unknown scorer field", "scorers:\n  - type: queue\n    wieght: 1\n", "scorers[0]: unknown field: wieght"},
		{"unknown type", "scorers:\n  - type: magic\n    weight: 1\n", `scorers[0].type: unknown scorer type "magic"`},
		{"missing weight", "scorers:\n  - type: queue\n", "scorers[0] (queue).weight: required"},
		{"negative weight", "scorers:\n  - type: queue\n    weight: -1\n", "scorers[0] (queue).weight: must be a finite number ≥ 0, got -1"},
		{"NaN weight", "scorers:\n  - type: queue\n    weight: .nan\n", "scorers[0] (queue).weight: must be a finite number ≥ 0, got NaN"},
		// 1e308 is finite, but the sum of the weights, and the adaptive
		// weights total·D·w/sum, overflow to +Inf.
		{"huge weight", "scorers:\n  - type: queue\n    weight: 1e308\n", "scorers[0] (queue).weight: 1e+308 is above the maximum 1e+06"},
		// Each 1e200 would pass a finiteness check: 1e200 + 1e200 is
		// finite too, but total·w = 2e400 is not.
		{"weights whose products overflow", "scorers:\n  - type: queue\n    weight: 1\n  - type: kvcache\n    weight: 1e200\n", "scorers[1] (kvcache).weight: 1e+200 is above the maximum 1e+06"},
		{"all zero", "scorers:\n  - type: queue\n    weight: 0\n  - type: kvcache\n    weight: 0\n", "all weights are zero"},
		{"duplicate name", "scorers:\n  - type: queue\n    weight: 1\n  - type: queue\n    weight: 2\n", `scorers[1].name: "queue" is already used by scorers[0]`},
		{"no scorers", "picker:\n  type: max-score\n", "at least one scorer"},
		{"bad picker", "picker:\n  type: best\nscorers:\n  - type: queue\n    weight: 1\n", `picker.type: unknown picker "best"`},
		{"bad temperature", "picker:\n  type: weighted-random\n  temperature: 0\nscorers:\n  - type: queue\n    weight: 1\n", "picker.temperature"},
		{"bad filter", "filters: [model, sunny]\nscorers:\n  - type: queue\n    weight: 1\n", `filters[1]: unknown filter "sunny"`},
		{"bad scheduler", "scheduler:\n  max_fallbacks: 99\nscorers:\n  - type: queue\n    weight: 1\n", "scheduler: max_fallbacks: 99"},
		{"bad outlier", "scheduler:\n  outlier:\n    base_ejection: 1m\n    max_ejection: 30s\nscorers:\n  - type: queue\n    weight: 1\n", "scheduler: outlier.max_ejection: 30s is shorter than outlier.base_ejection 1m0s"},
		{"unknown outlier field", "scheduler:\n  outlier:\n    max_ejection_percent: 10\nscorers:\n  - type: queue\n    weight: 1\n", "unknown field: max_ejection_percent"},
		{"bad params field", "scorers:\n  - type: prefix\n    weight: 1\n    params:\n      blok_size: 64\n", "scorers[0] (prefix).params: scorer \"prefix\": params: unknown field: blok_size"},
		{"bad params type", "scorers:\n  - type: prefix\n    weight: 1\n    params:\n      block_size: lots\n", "block_size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.yaml)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// TestMaxWeightAccepted checks the bound is inclusive: the maximum, 1e6,
// on every scorer, validates.
func TestMaxWeightAccepted(t *testing.T) {
	yaml := "scorers:\n  - type: prefix\n    weight: 1e6\n  - type: queue\n    weight: 1000000\n"
	if _, err := Parse([]byte(yaml)); err != nil {
		t.Fatalf("weights at MaxWeight refused: %v", err)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("scorers:\n  - type: queue\n    weight: -2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+": scorers[0]") {
		t.Errorf("error %v does not start with the file and field", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestDefaultsSurviveAPartialFile(t *testing.T) {
	f, err := Parse([]byte("scorers:\n  - type: queue\n    weight: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Picker.Type != "max-score" || len(f.Filters) != 2 || f.Scheduler.MaxFallbacks != 2 {
		t.Errorf("defaults lost: %+v", f)
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range Shipped() {
		data, err := shipped.ReadFile(name + ".yaml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("scorers:\n  - type: prefix\n    weight: 1e308\n    params: {block_size: -1}\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever parses must have validated: a scheduler builds from it.
		if _, err := file.BuildScheduler(scorers.InTree(), scheduler.Deps{}); err != nil {
			t.Fatalf("parsed profile does not build: %v\n%s", err, data)
		}
	})
}

func TestSectionsDecode(t *testing.T) {
	f, err := Parse([]byte(`
scorers:
  - type: prefix
    weight: 3
  - type: queue
    weight: 2
adaptive:
  enabled: true
  theta_on: 0.4
  detector:
    smoothing: 0.5
endpoints:
  mode: static
  file: /etc/trimtab/endpoints.yaml
scrape:
  interval: 100ms
server:
  http:
    addr: 127.0.0.1:8080
scheduler:
  outlier:
    consecutive_failures: 3
    base_ejection: 10s
`))
	if err != nil {
		t.Fatal(err)
	}
	if !f.Adaptive.Enabled || f.Adaptive.ThetaOn != 0.4 || f.Adaptive.Detector.Smoothing != 0.5 {
		t.Errorf("adaptive section: %+v", f.Adaptive)
	}
	if !f.HasEndpoints || f.Fleet.Endpoints.File != "/etc/trimtab/endpoints.yaml" || f.Fleet.Scrape.Interval.Milliseconds() != 100 {
		t.Errorf("fleet sections: %+v", f.Fleet)
	}
	if f.Server.HTTP.Addr != "127.0.0.1:8080" || f.Server.ExtProc.Addr != ":9002" {
		t.Errorf("server section: %+v, want http.addr from the file and the other defaults", f.Server)
	}
	want := scheduler.OutlierConfig{ConsecutiveFailures: 3, BaseEjection: 10 * time.Second, MaxEjection: 5 * time.Minute, MaxEjectedPercent: 50}
	if f.Scheduler.Outlier != want {
		t.Errorf("scheduler.outlier = %+v, want %+v (untouched keys keep their defaults)", f.Scheduler.Outlier, want)
	}
	// Defaults of untouched fields survive.
	if f.Adaptive.ThetaOff <= 0 || f.Adaptive.Detector.MinEndpoints != 2 {
		t.Errorf("defaults lost: %+v", f.Adaptive)
	}
}

func TestReplicasSection(t *testing.T) {
	f, err := Parse([]byte("scorers:\n  - type: prefix\n    weight: 1\nreplicas:\n  enabled: true\n  token_file: /run/secrets/replica-token\n  peers: [trimtab-0.trimtab-peers:9003, trimtab-1.trimtab-peers:9003]\n  flush_interval: 20ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := f.Replicas
	if !r.Enabled || len(r.Peers) != 2 || r.FlushInterval != 20*time.Millisecond || r.Listen != ":9003" || r.QueueSize != 256 {
		t.Errorf("replicas %+v; want enabled, two peers, 20ms flush, the other defaults", r)
	}
	if r.TokenFile != "/run/secrets/replica-token" || r.MaxPeerInFlight != 4096 || r.MaxSnapshotBytes != 256<<20 {
		t.Errorf("replicas %+v; want the token file and the default bounds", r)
	}
}

func TestSectionErrors(t *testing.T) {
	base := "scorers:\n  - type: queue\n    weight: 1\n  - type: prefix\n    weight: 1\n"
	for _, tt := range []struct{ yaml, want string }{
		{"adaptive:\n  theta_off: 0.9\n  theta_on: 0.5\n", "adaptive.theta_off"},
		{"adaptive:\n  detector:\n    smoothing: 0\n", "adaptive.detector.smoothing"},
		{"adaptive:\n  detector:\n    smoothnes: 0.3\n", "adaptive.detector: unknown field: smoothnes"},
		{"endpoints:\n  mode: dns\n", "endpoints.mode"},
		{"scrape:\n  interval: -1s\n", "scrape.interval"},
		{"scrape:\n  interval: soon\n", "interval"},
		{"replicas:\n  enabled: true\n", "replicas.peers: list the other replicas"},
		{"replicas:\n  enabled: true\n  peers: [trimtab-1]\n", `replicas.peers[0]: "trimtab-1" is not host:port`},
		{"replicas:\n  enabled: true\n  peers: [a:9003]\n  tls: {ca_file: ca.pem}\n", "replicas.tls: set cert_file, key_file and ca_file together"},
		{"replicas:\n  peer: [a:9003]\n", "replicas: unknown field: peer"},
		{"replicas:\n  enabled: true\n  discovery: {selector: app=trimtab}\n", "replicas.discovery.namespace: required with discovery.selector"},
		{"replicas:\n  enabled: true\n  peers: [a:9003]\n", "replicas.tls, replicas.token_file or replicas.insecure"},
		{"replicas:\n  enabled: true\n  peers: [a:9003]\n  insecure: true\n  max_peer_in_flight: -5\n", "replicas.max_peer_in_flight: -5"},
	} {
		_, err := Parse([]byte(base + tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want it to mention %q", tt.yaml, err, tt.want)
		}
	}
}

// TestServerAdminRecord: server.admin.record decodes from a profile, off by
// default, and a bad value is refused naming its key.
func TestServerAdminRecord(t *testing.T) {
	if Default().Server.Admin.Record.Enabled {
		t.Error("traffic recording is on by default")
	}
	const scorer = "scorers:\n  - type: queue\n    weight: 1\n"
	f, err := Parse([]byte(scorer + "server:\n  admin:\n    record:\n      enabled: true\n      window: 90s\n      max_requests: 500\n      max_blocks: 4096\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Server.Admin.Record; !r.Enabled || r.Window != 90*time.Second || r.MaxRequests != 500 || r.MaxBlocks != 4096 {
		t.Errorf("decoded %+v", r)
	}
	_, err = Parse([]byte(scorer + "server:\n  admin:\n    record:\n      enabled: true\n      window: 100ms\n"))
	if err == nil || !strings.Contains(err.Error(), "server.admin.record.window") {
		t.Errorf("window 100ms: %v; want an error naming server.admin.record.window", err)
	}
}

func TestRetuneSection(t *testing.T) {
	base := `scorers:
  - type: prefix
    weight: 1
  - type: queue
    weight: 1
`
	f, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if f.Retune != control.DefaultRetuneConfig() || f.Retune.Mode != control.RetuneAdvisory {
		t.Errorf("retune defaults %+v, want control.DefaultRetuneConfig (advisory)", f.Retune)
	}
	tests := []struct {
		name, yaml, want string
	}{
		{"apply, one router, recording", "retune:\n  mode: apply\n  interval: 5m\n  max_step: 0.2\nserver:\n  admin:\n    record:\n      enabled: true\n", ""},
		{"unknown mode", "retune:\n  mode: auto\n", "retune.mode"},
		{"bad step", "retune:\n  max_step: 2\n", "retune.max_step"},
		{"unknown key", "retune:\n  speed: 2\n", "retune"},
		{"apply without recording", "retune:\n  mode: apply\n", "server.admin.record.enabled"},
		{"apply with replicas", "retune:\n  mode: apply\nserver:\n  admin:\n    record:\n      enabled: true\nreplicas:\n  enabled: true\n  insecure: true\n  peers: [\"127.0.0.1:9\"]\n", "replicas.enabled"},
		{"advisory with replicas", "replicas:\n  enabled: true\n  insecure: true\n  peers: [\"127.0.0.1:9\"]\n", ""},
	}
	for _, tt := range tests {
		f, err := Parse([]byte(base + tt.yaml))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error naming %s", tt.name, err, tt.want)
		case tt.name == "apply, one router, recording" && (f.Retune.Mode != control.RetuneApply || f.Retune.Interval != 5*time.Minute || f.Retune.MaxStep != 0.2):
			t.Errorf("%s: %+v", tt.name, f.Retune)
		}
	}
}
