package control

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/trimtab/trimtab/scheduler"
)

// SpanWeights is the name of the span recorded for each weights version
// the loop publishes (or the scheduler refuses). Its attributes carry the
// same facts as the "weights" log line.
const SpanWeights = "trimtab.weights.change"

// Attribute keys of SpanWeights; AttrWeightPrefix + a scorer's name is
// that scorer's new weight.
const (
	AttrVersion         = "trimtab.weights.version"
	AttrPreviousVersion = "trimtab.weights.previous_version"
	AttrMode            = "trimtab.mode"
	AttrFromMode        = "trimtab.from_mode"
	AttrReason          = "trimtab.reason"
	AttrSignal          = "trimtab.signal"
	AttrBudget          = "trimtab.distribution_budget"
	AttrWeightPrefix    = "trimtab.weight."
)

// traceChange records w, the version t made (published, or refused when
// t.Err is set), as a span at the tick's time. Spans are roots: a weight
// change belongs to no request.
func (l *Loop) traceChange(t *Tick, w *scheduler.Weights) {
	if l.tracer == nil {
		return
	}
	_, span := l.tracer.Start(context.Background(), SpanWeights,
		trace.WithNewRoot(), trace.WithTimestamp(t.At), trace.WithSpanKind(trace.SpanKindInternal))
	if !span.IsRecording() {
		span.End(trace.WithTimestamp(t.At))
		return
	}
	names := l.conf.Names()
	attrs := make([]attribute.KeyValue, 0, 7+len(w.Values))
	attrs = append(attrs,
		attribute.Int64(AttrVersion, int64(w.Version)),
		attribute.Int64(AttrPreviousVersion, int64(t.Previous.Version)),
		attribute.String(AttrMode, w.Mode),
		attribute.String(AttrFromMode, t.Previous.Mode),
		attribute.String(AttrReason, w.Reason),
		attribute.Float64(AttrSignal, t.Signal.Value),
		attribute.Float64(AttrBudget, l.conf.Budget(w)))
	for i, v := range w.Values {
		if i < len(names) {
			attrs = append(attrs, attribute.Float64(AttrWeightPrefix+names[i], v))
		}
	}
	span.SetAttributes(attrs...)
	if t.Err != nil {
		span.SetStatus(codes.Error, t.Err.Error())
	}
	span.End(trace.WithTimestamp(t.At))
}
