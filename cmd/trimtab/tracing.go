package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/credentials"

	"github.com/trimtab/trimtab/configs"
)

// tracerName is the instrumentation scope of trimtab's spans.
const tracerName = "github.com/trimtab/trimtab"

// tracing is the OpenTelemetry SDK built from the tracing: section: a
// batching OTLP/gRPC exporter behind a parent-based ratio sampler.
type tracing struct {
	provider *sdktrace.TracerProvider
}

// newTracing builds the exporter and provider; with tracing off it
// returns nil, and a nil *tracing hands out a nil Tracer. The exporter
// connects lazily: a collector that is down loses spans, never requests.
func newTracing(cfg configs.TracingConfig) (*tracing, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithTimeout(cfg.Timeout)}
	switch {
	case cfg.Insecure:
		opts = append(opts, otlptracegrpc.WithInsecure())
	case cfg.CAFile != "":
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tracing.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tracing.ca_file: %s holds no PEM certificate", cfg.CAFile)
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
		attribute.String("service.name", cfg.ServiceName),
		attribute.String("service.version", buildVersion()),
	)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	)
	return &tracing{provider: tp}, nil
}

// Tracer is what proxy and control get in their Deps; nil when off.
func (t *tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.provider.Tracer(tracerName)
}

// Shutdown flushes the spans still queued to the collector (within
// timeout) and stops the exporter. It comes last in serve's shutdown
// order, after the servers drained and the control loop stopped, so the
// spans of the last requests and weight changes are sent.
func (t *tracing) Shutdown(timeout time.Duration, log *slog.Logger) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		log.Warn("flushing traces at shutdown failed; the last spans may be lost", "error", err)
	}
}
