package control

import (
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestTraceChanges: one span per new version, as for the log lines
// (TestLogLine: r = 0.20545 gives the start's version and 6 slew steps,
// versions 2…8), at the tick's time, with the version, mode, reason and
// the new weights.
func TestTraceChanges(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	cfg := adaptive()
	cfg.Detector.Smoothing = 1
	l := mustNew(t, cfg, target(t), Deps{Tracer: tp.Tracer("test")})
	r := 0.15 + math.Log(4)/25
	for i := 0; i <= 7; i++ { // the 8th tick changes nothing: no span
		l.Tick(t0.Add(time.Duration(i)*tick), twoPods(r))
	}
	spans := rec.Ended()
	if len(spans) != 7 {
		t.Fatalf("%d spans, want 7", len(spans))
	}
	first, last := spans[0], spans[6]
	a := spanAttrs(first)
	if first.Name() != SpanWeights || !first.StartTime().Equal(t0) || !first.EndTime().Equal(t0) {
		t.Errorf("first span %q at %v…%v, want %q at %v", first.Name(), first.StartTime(), first.EndTime(), SpanWeights, t0)
	}
	if a[AttrVersion].AsInt64() != 2 || a[AttrPreviousVersion].AsInt64() != 1 || a[AttrMode].AsString() != "rebalance" ||
		a[AttrFromMode].AsString() != "static" || !strings.Contains(a[AttrReason].AsString(), "rebalance") ||
		a[AttrWeightPrefix+"prefix"].AsFloat64() != 3 || !closeTo(a[AttrSignal].AsFloat64(), r, 1e-12) {
		t.Errorf("first span attributes %v", first.Attributes())
	}
	// The landing: prefix 6·(1 − 0.78) = 1.32, queue 4·0.78 = 3.12.
	b := spanAttrs(last)
	if b[AttrVersion].AsInt64() != 8 || !closeTo(b[AttrWeightPrefix+"prefix"].AsFloat64(), 1.32, 1e-9) ||
		!closeTo(b[AttrWeightPrefix+"queue"].AsFloat64(), 3.12, 1e-9) || !closeTo(b[AttrBudget].AsFloat64(), 0.78, 1e-9) {
		t.Errorf("last span attributes %v", last.Attributes())
	}
	if first.Parent().IsValid() {
		t.Error("a weights span has a parent; it belongs to no request")
	}
}

// TestTraceRefused: a version the scheduler refuses is a span with an
// error status.
func TestTraceRefused(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	l := mustNew(t, adaptive(), refusing{target(t)}, Deps{Tracer: tp.Tracer("test")})
	l.Tick(t0, twoPods(0))
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Status().Code != codes.Error || !strings.Contains(spans[0].Status().Description, "refused") {
		t.Fatalf("spans %v, want one with an error status", spans)
	}
}
