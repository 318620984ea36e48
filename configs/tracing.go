package configs

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"
)

// TracingConfig is the tracing: section: OpenTelemetry traces exported
// over OTLP/gRPC. Off by default. cmd builds the exporter from it; changing
// it needs a restart.
type TracingConfig struct {
	// Enabled turns tracing on. Default false: no span is made and the
	// request path is unchanged.
	Enabled bool `mapstructure:"enabled"`
	// Endpoint is the OTLP/gRPC collector as host:port, e.g.
	// "otel-collector.observability:4317". Required when enabled.
	Endpoint string `mapstructure:"endpoint"`
	// Insecure sends spans in plain text (no TLS). Default false: TLS,
	// verified against the system's roots or CAFile.
	Insecure bool `mapstructure:"insecure"`
	// CAFile is a PEM bundle of the CAs that sign the collector's
	// certificate, instead of the system's roots. Only with TLS.
	CAFile string `mapstructure:"ca_file"`
	// ServiceName is the service.name resource attribute. Default
	// "trimtab".
	ServiceName string `mapstructure:"service_name"`
	// SampleRatio is the fraction of requests arriving without a
	// traceparent that are traced, in [0,1]. A request with one keeps its
	// parent's decision, sampled or not (parent-based). Default 1: every
	// request.
	SampleRatio float64 `mapstructure:"sample_ratio"`
	// Timeout bounds one export to the collector. Default 10s.
	Timeout time.Duration `mapstructure:"timeout"`
}

// DefaultTracingConfig returns the defaults documented on each field.
func DefaultTracingConfig() TracingConfig {
	return TracingConfig{ServiceName: "trimtab", SampleRatio: 1, Timeout: 10 * time.Second}
}

// Validate checks the section; errors name the field (tracing.<key>).
func (c TracingConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("tracing.%s: "+format, append([]any{field}, args...)...))
	}
	if math.IsNaN(c.SampleRatio) || c.SampleRatio < 0 || c.SampleRatio > 1 {
		bad("sample_ratio", "%v, want a number in [0,1]", c.SampleRatio)
	}
	if c.Timeout <= 0 {
		bad("timeout", "%v, must be > 0", c.Timeout)
	}
	if c.ServiceName == "" {
		bad("service_name", "must not be empty")
	}
	if c.Insecure && c.CAFile != "" {
		bad("ca_file", "set with insecure: true; a CA file is only used with TLS")
	}
	if c.Enabled {
		if c.Endpoint == "" {
			bad("endpoint", "required when tracing is enabled (host:port of an OTLP/gRPC collector)")
		} else if host, port, err := net.SplitHostPort(c.Endpoint); err != nil || host == "" {
			bad("endpoint", "%q, want host:port (no scheme), e.g. otel-collector:4317", c.Endpoint)
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			bad("endpoint", "%q: port %q, want 1…65535", c.Endpoint, port)
		}
	}
	return errors.Join(errs...)
}
