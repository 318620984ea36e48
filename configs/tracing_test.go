package configs

import (
	"strings"
	"testing"
	"time"
)

func TestTracingSection(t *testing.T) {
	const base = "scorers:\n  - type: queue\n    weight: 1\n"
	f, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if f.Tracing != DefaultTracingConfig() || f.Tracing.Enabled {
		t.Errorf("tracing %+v, want the defaults, off", f.Tracing)
	}
	f, err = Parse([]byte(base + "tracing:\n  enabled: true\n  endpoint: otel:4317\n  insecure: true\n  sample_ratio: 0.25\n  timeout: 2s\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := TracingConfig{Enabled: true, Endpoint: "otel:4317", Insecure: true, ServiceName: "trimtab", SampleRatio: 0.25, Timeout: 2 * time.Second}
	if f.Tracing != want {
		t.Errorf("tracing %+v, want %+v", f.Tracing, want)
	}
	tests := []struct{ name, yaml, want string }{
		{"no endpoint", "tracing:\n  enabled: true\n", "tracing.endpoint: required when tracing is enabled"},
		{"scheme", "tracing:\n  enabled: true\n  endpoint: http://otel:4317\n", `tracing.endpoint: "http://otel:4317", want host:port`},
		{"bad port", "tracing:\n  enabled: true\n  endpoint: otel:99999\n", `tracing.endpoint: "otel:99999": port "99999", want 1…65535`},
		{"ratio above 1", "tracing:\n  sample_ratio: 1.5\n", "tracing.sample_ratio: 1.5, want a number in [0,1]"},
		{"ratio NaN", "tracing:\n  sample_ratio: .nan\n", "tracing.sample_ratio: NaN, want a number in [0,1]"},
		{"zero timeout", "tracing:\n  timeout: 0s\n", "tracing.timeout: 0s, must be > 0"},
		{"empty service name", "tracing:\n  service_name: \"\"\n", "tracing.service_name: must not be empty"},
		{"ca with insecure", "tracing:\n  insecure: true\n  ca_file: ca.pem\n", "tracing.ca_file: set with insecure: true"},
		{"unknown field", "tracing:\n  endpiont: otel:4317\n", "tracing: unknown field: endpiont"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(base + tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
