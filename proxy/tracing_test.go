package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/trimtab/trimtab/scheduler"
)

const (
	testTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	testParent = "00f067aa0ba902b7"
	testTP     = "00-" + testTrace + "-" + testParent + "-01"
)

func recorder() (*tracetest.SpanRecorder, trace.Tracer) {
	rec := tracetest.NewSpanRecorder()
	return rec, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
}

func attrMap(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// endedSpans waits (bounded) for n ended spans.
func endedSpans(t *testing.T, rec *tracetest.SpanRecorder, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(rec.Ended()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d spans ended, want %d", len(rec.Ended()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return rec.Ended()
}

// checkDecisionSpan: a child of the client's traceparent, with the
// decision's attributes. The fixture's one scorer "test" prefers the
// endpoints in order: 1, 0.9 (preferOrder).
func checkDecisionSpan(t *testing.T, s sdktrace.ReadOnlySpan, name, chosen, second string) {
	t.Helper()
	if s.Name() != name || s.SpanKind() != trace.SpanKindServer {
		t.Errorf("span %q kind %v, want %q server", s.Name(), s.SpanKind(), name)
	}
	if s.Parent().TraceID().String() != testTrace || s.Parent().SpanID().String() != testParent || !s.Parent().IsRemote() {
		t.Errorf("span parent %v, want the client's %s", s.Parent(), testTP)
	}
	a := attrMap(s)
	top := a[AttrTopEndpoints].AsStringSlice()
	totals := a[AttrTopTotals].AsFloat64Slice()
	if a[AttrEndpoint].AsString() != chosen || len(top) != 2 || top[0] != chosen || top[1] != second ||
		len(totals) != 2 || totals[0] != 1 || totals[1] != 0.9 || a[AttrScorePrefix+"test"].AsFloat64() != 1 {
		t.Errorf("decision attributes %v", s.Attributes())
	}
	if a[AttrWeightsVersion].AsInt64() != 1 || a[AttrMode].AsString() != "static" || a[AttrModel].AsString() != "m" ||
		a[AttrCandidates].AsInt64() != 2 || a[AttrStatus].AsInt64() != 200 {
		t.Errorf("decision attributes %v", s.Attributes())
	}
}

func TestHTTPTracing(t *testing.T) {
	a, b := newUpstream(t), newUpstream(t)
	f := newFixture(t, preferOrder(a.addr, b.addr), a.addr, b.addr)
	rec, tracer := recorder()
	deps := f.deps(t)
	deps.Tracer = tracer
	h, err := NewHTTP(DefaultConfig(), deps)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	resp := post(t, "http://"+addr+"/v1/completions", `{"model":"m","prompt":"hi"}`, map[string]string{"traceparent": testTP})
	readAll(t, resp.Body)
	resp.Body.Close()
	spans := endedSpans(t, rec, 1)
	s := spans[0]
	checkDecisionSpan(t, s, SpanHTTP, a.addr, b.addr)
	if got := attrMap(s)[AttrServedBy].AsString(); got != a.addr {
		t.Errorf("served by %q, want %s", got, a.addr)
	}
	// The upstream continues the trace from trimtab's span, not the client's.
	want := "00-" + testTrace + "-" + s.SpanContext().SpanID().String() + "-01"
	if got := a.lastHeader().Get("traceparent"); got != want {
		t.Errorf("upstream traceparent %q, want %q", got, want)
	}

	// A refused request is a span too, with its status.
	resp = post(t, "http://"+addr+"/v1/completions", `{"model":"unknown"}`, nil)
	resp.Body.Close()
	spans = endedSpans(t, rec, 2)
	if got := attrMap(spans[1])[AttrStatus].AsInt64(); got != int64(resp.StatusCode) || got < 400 {
		t.Errorf("refused request span status %d, answer %d", got, resp.StatusCode)
	}
}

// With tracing off the client's traceparent passes through untouched:
// trimtab takes no part in the trace.
func TestHTTPTracingOffPassesTraceparent(t *testing.T) {
	a := newUpstream(t)
	f := newFixture(t, nil, a.addr)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	resp := post(t, "http://"+addr+"/v1/completions", `{"model":"m","prompt":"hi"}`, map[string]string{"traceparent": testTP})
	resp.Body.Close()
	if got := a.lastHeader().Get("traceparent"); got != testTP {
		t.Errorf("upstream traceparent %q, want the client's %q", got, testTP)
	}
}

func TestExtProcTracing(t *testing.T) {
	f := newFixture(t, preferOrder(epB, epA), epA, epB)
	rec, tracer := recorder()
	cfg := DefaultConfig()
	cfg.ExtProc.RequestBodyMode, cfg.ExtProc.ResponseBodyMode = BodyModeBuffered, BodyModeBuffered
	e, err := NewExtProc(cfg, func() Deps { d := f.deps(t); d.Tracer = tracer; return d }())
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, e)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := extprocv3.NewExternalProcessorClient(conn)
	s := openStream(t, context.Background(), c)
	s.send(requestHeaders(false, nil, nil, "traceparent", testTP))
	s.recv()
	s.send(requestBody([]byte(`{"model":"m","prompt":"hi"}`), true))
	r := s.recv()
	var tp string
	for _, h := range r.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "traceparent" {
			tp = string(h.GetHeader().GetRawValue())
			if h.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
				t.Errorf("traceparent append action %v, want overwrite", h.GetAppendAction())
			}
		}
	}
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200")}}})
	s.recv()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(`{}`), EndOfStream: true}}})
	s.recv()
	if err := s.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	f.outcome(t)
	span := endedSpans(t, rec, 1)[0]
	checkDecisionSpan(t, span, SpanExtProc, epB, epA)
	if want := "00-" + testTrace + "-" + span.SpanContext().SpanID().String() + "-01"; tp != want {
		t.Errorf("traceparent header mutation %q, want %q", tp, want)
	}
}

// TestTracingOffAllocatesNothing: with Deps.Tracer unset every tracing
// hook of the request path (HTTP and ext_proc) returns at once without
// allocating; the scheduler's and parser's zero-allocation tests cover
// the rest of the path.
func TestTracingOffAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race; CI runs this test in its no-race pass")
	}
	f := newFixture(t, nil, epA, epB)
	tr := newTracer(nil, f.sched)
	if tr != nil {
		t.Fatal("newTracer(nil) is not nil")
	}
	ctx := context.Background()
	hdr := http.Header{}
	set := []*corev3.HeaderValueOption{}
	er := ErrOverloaded
	req := &scheduler.Request{Model: "m"}
	allocs := testing.AllocsPerRun(1000, func() {
		d, err := f.sched.Pick(ctx, req)
		if err != nil {
			panic(err)
		}
		tr.decided(ctx, d)
		tr.inject(ctx, hdr)
		span := tr.startExchange(ctx, "", "", time.Time{})
		set = tr.exchangeDecided(span, d, set)
		tr.refused(span, er)
		tr.endExchange(span, 200)
		d.Done(scheduler.Outcome{})
	})
	if allocs != 0 {
		t.Errorf("Pick with the tracing hooks off allocates %v times per request, want 0", allocs)
	}
	if len(hdr) != 0 || len(set) != 0 {
		t.Errorf("tracing off wrote headers %v, mutations %v", hdr, set)
	}
	if !strings.HasPrefix(SpanHTTP, "trimtab.") {
		t.Error("span names are trimtab.*")
	}
}

// BenchmarkTracingHooks is the tracing work one HTTP request adds around
// Pick (span start from a traceparent, decision attributes, upstream
// traceparent, end), with tracing off and on (every request sampled, spans
// recorded in memory, no exporter).
func BenchmarkTracingHooks(b *testing.B) {
	f := newFixture(b, preferOrder(epA, epB), epA, epB, epC)
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "tracing=off", true: "tracing=on"}[on], func(b *testing.B) {
			var tr *tracer
			if on {
				tr = newTracer(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder())).Tracer("bench"), f.sched)
			}
			in := httptestRequest(testTP)
			out := http.Header{}
			req := &scheduler.Request{Model: "m"}
			b.ReportAllocs()
			for b.Loop() {
				w, r := http.ResponseWriter(nopWriter{}), in
				var tw *tracedWriter
				var span trace.Span
				if tr != nil {
					tw, r, span = tr.startHTTP(w, in)
				}
				d, err := f.sched.Pick(r.Context(), req)
				if err != nil {
					b.Fatal(err)
				}
				tr.decided(r.Context(), d)
				tr.inject(r.Context(), out)
				d.Done(scheduler.Outcome{})
				if tr != nil {
					tr.endHTTP(span, tw)
				}
			}
		})
	}
}

type nopWriter struct{}

func (nopWriter) Header() http.Header         { return http.Header{} }
func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriter) WriteHeader(int)             {}

func httptestRequest(traceparent string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://trimtab/v1/completions", nil)
	r.Header.Set("traceparent", traceparent)
	return r
}

// secondsScorer prefers the first endpoint (1, then 0.5) and reports
// 0.25 s for it, 0.5 s for the others, as the time-cost scorer does.
type secondsScorer struct{}

func (secondsScorer) Category() scheduler.Category { return scheduler.CategoryDistribution }
func (secondsScorer) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i := range eps {
		out[i] = 0.5
	}
	out[0] = 1
}
func (secondsScorer) Seconds(_ *scheduler.CycleState, i int) (float64, bool) {
	if i == 0 {
		return 0.25, true
	}
	return 0.5, true
}

// TestDecisionSpanSeconds: a scorer that estimates seconds puts the
// chosen endpoint's estimate on the span; one that does not, none.
func TestDecisionSpanSeconds(t *testing.T) {
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{
		{Name: "cost", Scorer: secondsScorer{}, Weight: 1},
		{Name: "test", Scorer: &testScorer{prefer: preferOrder()}, Weight: 0},
	}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	setPool(s, "a:1", "b:1")
	rec, tr := recorder()
	d, err := s.Pick(context.Background(), &scheduler.Request{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Start(context.Background(), SpanHTTP)
	newTracer(tr, s).decision(span, d)
	span.End()
	d.Done(scheduler.Outcome{})
	a := attrMap(rec.Ended()[0])
	if got, ok := a[AttrSecondsPrefix+"cost"]; !ok || got.AsFloat64() != 0.25 || a[AttrEndpoint].AsString() != "a:1" {
		t.Errorf("span attributes %v, want %scost 0.25 for a:1", rec.Ended()[0].Attributes(), AttrSecondsPrefix)
	}
	if _, ok := a[AttrSecondsPrefix+"test"]; ok {
		t.Errorf("a scorer without seconds put %stest on the span", AttrSecondsPrefix)
	}
}
