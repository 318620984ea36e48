package proxy

import (
	"context"
	"net/http"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/trimtab/trimtab/scheduler"
)

// Span names and attribute keys of the data path's traces. Each scheduled
// request gets one server span, a child of the client's W3C traceparent
// when it sent one.
const (
	SpanHTTP    = "trimtab.http.request"
	SpanExtProc = "trimtab.ext_proc.request"

	// AttrEndpoint is the chosen endpoint (ip:port).
	AttrEndpoint = "trimtab.endpoint"
	// AttrServedBy is the endpoint that answered, after any retries on
	// fallbacks (HTTP proxy).
	AttrServedBy = "trimtab.served_by"
	// AttrWeightsVersion and AttrMode are the weights the decision was
	// scored with and the configurator mode that made them.
	AttrWeightsVersion = "trimtab.weights.version"
	AttrMode           = "trimtab.mode"
	AttrModel          = "trimtab.model"
	AttrCandidates     = "trimtab.candidates"
	// AttrTopEndpoints and AttrTopTotals are the best ranked candidates
	// (at most TopScores) and their weighted totals, best first.
	AttrTopEndpoints = "trimtab.top.endpoints"
	AttrTopTotals    = "trimtab.top.totals"
	// AttrScorePrefix + a scorer's name is the chosen endpoint's score
	// from that scorer, in [0,1].
	AttrScorePrefix = "trimtab.score."
	// AttrSecondsPrefix + a scorer's name is the chosen endpoint's
	// estimate in seconds from a scorer that makes one (time-cost:
	// the expected seconds to the first token).
	AttrSecondsPrefix = "trimtab.seconds."
	// AttrStatus is the HTTP status answered (semantic convention key).
	AttrStatus = "http.response.status_code"
	// AttrErrorCode is the trimtab error code of a refused request.
	AttrErrorCode = "trimtab.error.code"
)

// TopScores is how many ranked candidates a span lists.
const TopScores = 3

// traceContext reads and writes W3C traceparent and tracestate.
var traceContext propagation.TraceContext

// tracer makes the data path's spans. A nil *tracer (Deps.Tracer unset)
// makes none: every method returns at once and allocates nothing.
type tracer struct {
	t         trace.Tracer
	scoreKeys []attribute.Key // index-aligned with the profile's scorers
	secKeys   []attribute.Key // … "" for scorers without seconds
}

// scorerLister is implemented by *scheduler.Scheduler.
type scorerLister interface {
	Scorers() []scheduler.ScorerEntry
}

func newTracer(t trace.Tracer, s Scheduler) *tracer {
	if t == nil {
		return nil
	}
	tr := &tracer{t: t}
	if sl, ok := s.(scorerLister); ok {
		for _, e := range sl.Scorers() {
			tr.scoreKeys = append(tr.scoreKeys, attribute.Key(AttrScorePrefix+e.Name))
			var sk attribute.Key
			if _, ok := e.Scorer.(scheduler.SecondsReporter); ok {
				sk = attribute.Key(AttrSecondsPrefix + e.Name)
			}
			tr.secKeys = append(tr.secKeys, sk)
		}
	}
	return tr
}

// tracedWriter remembers the status answered.
type tracedWriter struct {
	http.ResponseWriter
	status int
}

func (w *tracedWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *tracedWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (Flush).
func (w *tracedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// startHTTP opens the request's span, a child of its traceparent, and
// returns the writer and request to serve it with.
func (t *tracer) startHTTP(w http.ResponseWriter, r *http.Request) (*tracedWriter, *http.Request, trace.Span) {
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := t.t.Start(ctx, SpanHTTP, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("url.path", r.URL.Path)))
	return &tracedWriter{ResponseWriter: w}, r.WithContext(ctx), span
}

// endHTTP closes the span with the status answered.
func (t *tracer) endHTTP(span trace.Span, w *tracedWriter) {
	t.status(span, w.status)
	if ep := w.Header().Get(HeaderEndpoint); ep != "" {
		span.SetAttributes(attribute.String(AttrServedBy, ep))
	}
	span.End()
}

func (t *tracer) status(span trace.Span, code int) {
	if code == 0 {
		return
	}
	span.SetAttributes(attribute.Int(AttrStatus, code))
	if code >= 500 {
		span.SetStatus(codes.Error, http.StatusText(code))
	}
}

// decided records a decision on the span in ctx.
func (t *tracer) decided(ctx context.Context, d *scheduler.Decision) {
	if t == nil {
		return
	}
	t.decision(trace.SpanFromContext(ctx), d)
}

func (t *tracer) decision(span trace.Span, d *scheduler.Decision) {
	if !span.IsRecording() {
		return
	}
	n := min(TopScores, d.Ranked())
	top := make([]string, n)
	totals := make([]float64, n)
	for r := 0; r < n; r++ {
		top[r] = d.RankedEndpoint(r).Address
		totals[r] = d.Total(d.RankedIndex(r))
	}
	attrs := make([]attribute.KeyValue, 0, 7+len(t.scoreKeys))
	attrs = append(attrs,
		attribute.String(AttrEndpoint, d.Endpoint.Address),
		attribute.Int64(AttrWeightsVersion, int64(d.Weights.Version)),
		attribute.String(AttrMode, d.Weights.Mode),
		attribute.Int(AttrCandidates, len(d.Candidates())),
		attribute.StringSlice(AttrTopEndpoints, top),
		attribute.Float64Slice(AttrTopTotals, totals))
	if d.Request != nil && d.Request.Model != "" {
		attrs = append(attrs, attribute.String(AttrModel, d.Request.Model))
	}
	if d.Ranked() > 0 {
		chosen := d.RankedIndex(0)
		for si, k := range t.scoreKeys {
			attrs = append(attrs, attribute.Float64(string(k), d.Score(si, chosen)))
			if sk := t.secKeys[si]; sk != "" {
				if v, ok := d.Seconds(si, chosen); ok {
					attrs = append(attrs, attribute.Float64(string(sk), v))
				}
			}
		}
	}
	span.SetAttributes(attrs...)
}

// refused records a request answered with an error before any decision.
func (t *tracer) refused(span trace.Span, e *Error) {
	if t == nil || span == nil {
		return
	}
	span.SetAttributes(attribute.String(AttrErrorCode, e.Code))
	t.status(span, e.Status)
}

// inject writes the traceparent of the span in ctx into an upstream
// request's headers, replacing the client's.
func (t *tracer) inject(ctx context.Context, h http.Header) {
	if t == nil {
		return
	}
	traceContext.Inject(ctx, propagation.HeaderCarrier(h))
}

// startExchange opens an ext_proc request's span at arrival, a child of
// the request's traceparent (and tracestate) as Envoy passed them on.
func (t *tracer) startExchange(ctx context.Context, traceparent, tracestate string, arrival time.Time) trace.Span {
	if t == nil {
		return nil
	}
	if traceparent != "" {
		ctx = traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate})
	}
	_, span := t.t.Start(ctx, SpanExtProc, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(arrival))
	return span
}

// exchangeDecided records the decision and returns set with a traceparent
// header mutation naming the span, so the upstream request continues the
// trace from it.
func (t *tracer) exchangeDecided(span trace.Span, d *scheduler.Decision, set []*corev3.HeaderValueOption) []*corev3.HeaderValueOption {
	if t == nil || span == nil {
		return set
	}
	t.decision(span, d)
	carrier := propagation.MapCarrier{}
	traceContext.Inject(trace.ContextWithSpan(context.Background(), span), carrier)
	if tp := carrier["traceparent"]; tp != "" {
		set = append(set, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: "traceparent", RawValue: []byte(tp)},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	return set
}

// endExchange closes an ext_proc span with the upstream's status (0 when
// no response was seen).
func (t *tracer) endExchange(span trace.Span, status int) {
	if t == nil || span == nil {
		return
	}
	t.status(span, status)
	span.End()
}

// readTraceHeader keeps an incoming traceparent or tracestate header.
func (x *exchange) readTraceHeader(hv *corev3.HeaderValue) {
	if strings.EqualFold(hv.GetKey(), "traceparent") {
		x.traceparent = headerValue(hv)
	} else {
		x.tracestate = headerValue(hv)
	}
}
