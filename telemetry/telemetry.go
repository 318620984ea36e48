// Package telemetry builds trimtab's OpenTelemetry tracing: a batching
// OTLP/gRPC exporter behind a parent-based ratio sampler. It is a leaf:
// cmd reads the profile's tracing: section (and the CA file) and hands the
// values in; proxy and control receive the resulting trace.Tracer in their
// Deps and know nothing of the SDK. LimitHandler (loglimit.go) is the
// slog.Handler serve wraps its log in, to rate-limit repeated lines.
package telemetry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/credentials"
)

// TracerName is the instrumentation scope of trimtab's spans.
const TracerName = "github.com/trimtab/trimtab"

// Options configure the exporter and the provider.
type Options struct {
	// Endpoint is the OTLP/gRPC collector, host:port.
	Endpoint string
	// Insecure sends spans in plain text; otherwise TLS, verified against
	// CAPEM when set, else the system's roots.
	Insecure bool
	CAPEM    []byte
	// ServiceName and Version are the service.name and service.version
	// resource attributes.
	ServiceName, Version string
	// SampleRatio is the share of parentless requests traced, in [0,1];
	// a request with a parent follows its parent's decision.
	SampleRatio float64
	// Timeout bounds one export.
	Timeout time.Duration
}

// Provider is a running tracer provider. A nil *Provider is tracing off:
// its Tracer is nil and Shutdown does nothing.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// New builds the exporter and the provider. The exporter connects lazily:
// a collector that is down loses spans, never requests. Errors name the
// tracing: key at fault.
func New(o Options) (*Provider, error) {
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(o.Endpoint), otlptracegrpc.WithTimeout(o.Timeout)}
	switch {
	case o.Insecure:
		opts = append(opts, otlptracegrpc.WithInsecure())
	case len(o.CAPEM) > 0:
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(o.CAPEM) {
			return nil, errors.New("tracing.ca_file: holds no PEM certificate")
		}
		opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
	default:
		opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})))
	}
	exp, err := otlptracegrpc.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", o.ServiceName),
		attribute.String("service.version", o.Version),
	)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SampleRatio))),
	)
	return &Provider{tp: tp}, nil
}

// Tracer is what proxy and control get in their Deps; nil when off.
func (p *Provider) Tracer() trace.Tracer {
	if p == nil {
		return nil
	}
	return p.tp.Tracer(TracerName)
}

// Shutdown flushes the spans still queued (within timeout) and stops the
// exporter. serve calls it last, after the servers drained and the control
// loop stopped, so the spans of the last requests and weight changes go out.
func (p *Provider) Shutdown(timeout time.Duration, log *slog.Logger) {
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.tp.Shutdown(ctx); err != nil {
		log.Warn("flushing traces at shutdown failed; the last spans may be lost", "err", err)
	}
}
