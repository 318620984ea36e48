package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/trimtab/trimtab/scheduler"
)

// Fixed test endpoints: ext_proc never dials them.
const epA, epB, epC = "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"

func startExtProc(t *testing.T, cfg Config, f *fixture) (extprocv3.ExternalProcessorClient, *ExtProc, func()) {
	t.Helper()
	e, err := NewExtProc(cfg, f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := start(t, e)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn), e, stop
}

type epStream struct {
	t *testing.T
	s extprocv3.ExternalProcessor_ProcessClient
}

func openStream(t *testing.T, ctx context.Context, c extprocv3.ExternalProcessorClient) *epStream {
	t.Helper()
	s, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &epStream{t: t, s: s}
}

func (s *epStream) send(r *extprocv3.ProcessingRequest) {
	s.t.Helper()
	if err := s.s.Send(r); err != nil {
		s.t.Fatalf("send: %v", err)
	}
}

// sendLate sends r where the server may already have answered and ended
// the stream (a refusal after an earlier message): gRPC's Send then
// returns io.EOF and the stream's outcome is what Recv reads.
func (s *epStream) sendLate(r *extprocv3.ProcessingRequest) {
	s.t.Helper()
	if err := s.s.Send(r); err != nil && !errors.Is(err, io.EOF) {
		s.t.Fatalf("send: %v", err)
	}
}

func (s *epStream) recv() *extprocv3.ProcessingResponse {
	s.t.Helper()
	r, err := s.s.Recv()
	if err != nil {
		s.t.Fatalf("recv: %v", err)
	}
	return r
}

func hdrMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func subsetMD(v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		SubsetNamespace: {Fields: map[string]*structpb.Value{SubsetKey: v}},
	}}
}

func subsetList(addrs ...string) *structpb.Value {
	vs := make([]*structpb.Value, len(addrs))
	for i, a := range addrs {
		vs[i] = structpb.NewStringValue(a)
	}
	return structpb.NewListValue(&structpb.ListValue{Values: vs})
}

func requestHeaders(eos bool, md *corev3.Metadata, pc *extprocv3.ProtocolConfiguration, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: hdrMap(append([]string{":method", "POST", ":path", "/v1/completions"}, kv...)...), EndOfStream: eos}},
		MetadataContext: md,
		ProtocolConfig:  pc,
	}
}

func requestBody(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

var duplex = &extprocv3.ProtocolConfiguration{
	RequestBodyMode:  filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
}

// destination checks a header mutation and the dynamic metadata agree on
// the destination, set with overwrite, and returns it.
func destination(t *testing.T, cr *extprocv3.CommonResponse, md *structpb.Struct) string {
	t.Helper()
	var hdr string
	for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == DestinationHeader {
			hdr = string(h.GetHeader().GetRawValue())
			if h.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
				t.Errorf("destination header append action %v, want overwrite", h.GetAppendAction())
			}
		}
	}
	meta := md.GetFields()[DestinationNamespace].GetStructValue().GetFields()[DestinationHeader].GetStringValue()
	if hdr == "" || hdr != meta {
		t.Fatalf("destination header %q, metadata %q: want equal and set", hdr, meta)
	}
	return hdr
}

func bigBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"m","stream":true,"prompt":"`)
	for i := 0; b.Len() < n; i++ {
		b.WriteString("token")
		b.WriteString(strconv.Itoa(i % 1000))
		b.WriteByte(' ')
	}
	b.WriteString(`"}`)
	return b.Bytes()
}

func TestExtProcFullDuplexStreamed1MiB(t *testing.T) {
	f := newFixture(t, preferOrder(epA, epB, epC), epA, epB, epC)
	cfg := DefaultConfig()
	cfg.ExtProc.DestinationFallbacks = true
	c, _, _ := startExtProc(t, cfg, f)
	s := openStream(t, context.Background(), c)
	body := bigBody(1 << 20)
	// The client tries to pick its own destination: it must be overwritten.
	s.send(requestHeaders(false, nil, duplex, DestinationHeader, epC, "x-session-id", "s1"))
	for off := 0; off < len(body); off += 100_000 {
		end := min(off+100_000, len(body))
		s.send(requestBody(body[off:end], end == len(body)))
	}
	r := s.recv()
	hr := r.GetRequestHeaders()
	if hr == nil {
		t.Fatalf("first answer %T, want request headers", r.GetResponse())
	}
	// preferOrder: a (1.0), b (0.9), c (0.8); chosen a, two fallbacks
	if got := destination(t, hr.GetResponse(), r.GetDynamicMetadata()); got != epA+","+epB+","+epC {
		t.Errorf("destination %q, want %q", got, epA+","+epB+","+epC)
	}
	var cl string
	for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "content-length" {
			cl = string(h.GetHeader().GetRawValue())
		}
	}
	if cl != strconv.Itoa(len(body)) {
		t.Errorf("content-length %q, want %d", cl, len(body))
	}
	var echoed []byte
	chunks := 0
	for {
		br := s.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if br == nil {
			t.Fatal("want streamed request body chunks")
		}
		if len(br.GetBody()) >= 62000 {
			t.Fatalf("chunk of %d bytes, want < 62000", len(br.GetBody()))
		}
		chunks++
		echoed = append(echoed, br.GetBody()...)
		if br.GetEndOfStream() {
			break
		}
	}
	if !bytes.Equal(echoed, body) {
		t.Fatalf("body changed on the way back (%d bytes, want %d)", len(echoed), len(body))
	}
	// ⌈1,048,5xx / 61,440⌉ = 18 chunks
	if want := (len(body) + bodyChunk - 1) / bodyChunk; chunks != want {
		t.Errorf("%d chunks, want %d", chunks, want)
	}
	// Response: headers, then SSE chunk by chunk.
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200", "content-type", "text/event-stream")}}})
	rh := s.recv().GetResponseHeaders()
	if got := rh.GetResponse().GetHeaderMutation().GetSetHeaders(); len(got) != 1 || got[0].GetHeader().GetKey() != "x-trimtab-endpoint" || string(got[0].GetHeader().GetRawValue()) != epA {
		t.Errorf("response header mutation %v, want x-trimtab-endpoint: %s", got, epA)
	}
	events := []string{"data: {\"text\":\"a\"}\n\n", "data: {\"text\":\"b\"}\n\n", "data: [DONE]\n\n"}
	for i, ev := range events {
		eos := i == len(events)-1
		s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(ev), EndOfStream: eos}}})
		sr := s.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if string(sr.GetBody()) != ev || sr.GetEndOfStream() != eos {
			t.Fatalf("response chunk %d echoed as %q eos=%v", i, sr.GetBody(), sr.GetEndOfStream())
		}
	}
	if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess || o.Status != 200 {
		t.Errorf("outcome %+v, want success 200", o)
	}
	f.noMoreOutcomes(t)
	f.waitIdle(t)
	_ = s.s.CloseSend()
}

func TestExtProcBuffered1MiB(t *testing.T) {
	f := newFixture(t, preferOrder(epB, epA), epA, epB)
	cfg := DefaultConfig()
	// No protocol_config from Envoy: the configured modes apply.
	cfg.ExtProc.RequestBodyMode, cfg.ExtProc.ResponseBodyMode = BodyModeBuffered, BodyModeBuffered
	cfg.ExtProc.DestinationFallbacks = true
	c, _, _ := startExtProc(t, cfg, f)
	s := openStream(t, context.Background(), c)
	body := bigBody(1 << 20)
	s.send(requestHeaders(false, nil, nil))
	if hr := s.recv().GetRequestHeaders(); hr == nil || hr.GetResponse().GetHeaderMutation() != nil {
		t.Fatalf("buffered: headers must be answered at once, without a destination: %v", hr)
	}
	s.send(requestBody(body, true))
	r := s.recv()
	br := r.GetRequestBody()
	if br == nil || !br.GetResponse().GetClearRouteCache() || br.GetResponse().GetBodyMutation() != nil {
		t.Fatalf("body answer %v: want header mutation, clear_route_cache, body untouched", r)
	}
	if got := destination(t, br.GetResponse(), r.GetDynamicMetadata()); got != epB+","+epA {
		t.Errorf("destination %q, want %q", got, epB+","+epA)
	}
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200", "content-type", "application/json")}}})
	s.recv()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(`{"choices":[]}`), EndOfStream: true}}})
	if rb := s.recv().GetResponseBody(); rb == nil || rb.GetResponse().GetBodyMutation() != nil {
		t.Fatalf("buffered response body answer %v, want an empty body response", rb)
	}
	if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess {
		t.Errorf("outcome %+v", o)
	}
	f.waitIdle(t)
}

func TestExtProcSubsetHint(t *testing.T) {
	tests := []struct {
		name     string
		subset   *structpb.Value
		wantDest string
		wantCode int
	}{
		{name: "single endpoint", subset: subsetList(epC), wantDest: epC},
		// candidates b (0.9) and c (0.8): a is excluded
		{name: "two endpoints ranked", subset: subsetList(epC, epB), wantDest: epB + "," + epC},
		{name: "comma-separated entry", subset: subsetList(epB + ", " + epC), wantDest: epB + "," + epC},
		{name: "unknown addresses are ignored", subset: subsetList("10.9.9.9:1", epC), wantDest: epC},
		{name: "empty list → 503", subset: subsetList(), wantCode: 503},
		{name: "none in the pool → 503", subset: subsetList("10.9.9.9:1"), wantCode: 503},
		{name: "not a list → 400", subset: structpb.NewStringValue(epA), wantCode: 400},
	}
	f := newFixture(t, preferOrder(epA, epB, epC), epA, epB, epC)
	cfg := DefaultConfig()
	cfg.ExtProc.DestinationFallbacks = true
	c, _, _ := startExtProc(t, cfg, f)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStream(t, context.Background(), c)
			s.send(requestHeaders(false, subsetMD(tt.subset), duplex))
			s.send(requestBody([]byte(`{"model":"m","prompt":"x"}`), true))
			r := s.recv()
			if tt.wantCode != 0 {
				ir := r.GetImmediateResponse()
				if ir == nil || int(ir.GetStatus().GetCode()) != tt.wantCode {
					t.Fatalf("answer %v, want immediate %d", r, tt.wantCode)
				}
				return
			}
			if got := destination(t, r.GetRequestHeaders().GetResponse(), r.GetDynamicMetadata()); got != tt.wantDest {
				t.Errorf("destination %q, want %q", got, tt.wantDest)
			}
			s.recv()            // body
			_ = s.s.CloseSend() // Envoy gives up: the decision finishes as cancelled
			if o := f.outcome(t); o.Kind != scheduler.OutcomeCanceled {
				t.Errorf("outcome %+v, want canceled", o)
			}
		})
	}
	f.waitIdle(t)
}

func TestExtProcErrors(t *testing.T) {
	tests := []struct {
		name       string
		pool       []string
		body       string
		wantStatus int
		wantCode   string
		retryAfter bool
	}{
		{name: "invalid JSON", body: `{"model"`, wantStatus: 400, wantCode: "invalid_json"},
		{name: "missing model", body: `{"prompt":"x"}`, wantStatus: 400, wantCode: "missing_model"},
		{name: "unknown model", body: `{"model":"nope"}`, wantStatus: 404, wantCode: "model_not_found"},
		{name: "too large", body: `{"model":"m","prompt":"` + strings.Repeat("x", 5000) + `"}`, wantStatus: 413, wantCode: "body_too_large"},
		{name: "no endpoints", pool: []string{}, body: `{"model":"m"}`, wantStatus: 503, wantCode: "no_endpoints", retryAfter: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, epA)
			if tt.pool != nil {
				setPool(f.sched, tt.pool...)
			}
			cfg := DefaultConfig()
			cfg.MaxBodyBytes = 4096
			c, _, _ := startExtProc(t, cfg, f)
			s := openStream(t, context.Background(), c)
			s.send(requestHeaders(false, nil, duplex))
			b := []byte(tt.body)
			half := len(b) / 2
			s.send(requestBody(b[:half], false))
			s.send(requestBody(b[half:], true))
			checkImmediate(t, s.recv(), tt.wantStatus, tt.wantCode, tt.retryAfter)
			f.noMoreOutcomes(t)
		})
	}
}

func checkImmediate(t *testing.T, r *extprocv3.ProcessingResponse, status int, code string, retryAfter bool) {
	t.Helper()
	ir := r.GetImmediateResponse()
	if ir == nil || int(ir.GetStatus().GetCode()) != status {
		t.Fatalf("answer %v, want immediate %d", r, status)
	}
	if got := errorCode(t, string(ir.GetBody())); got != code {
		t.Errorf("error code %q, want %q", got, code)
	}
	var ra, ct string
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		switch h.GetHeader().GetKey() {
		case "retry-after":
			ra = string(h.GetHeader().GetRawValue())
		case "content-type":
			ct = string(h.GetHeader().GetRawValue())
		}
	}
	if ct != "application/json" || (ra != "") != retryAfter {
		t.Errorf("content-type %q, retry-after %q (want present=%v)", ct, ra, retryAfter)
	}
}

func TestExtProcOverloadedAndCancel(t *testing.T) {
	f := newFixture(t, nil, epA)
	cfg := DefaultConfig()
	cfg.ExtProc.MaxInFlight = 1
	c, _, _ := startExtProc(t, cfg, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := openStream(t, ctx, c)
	first.send(requestHeaders(false, nil, duplex))
	first.send(requestBody([]byte(`{"model":"m"}`), true))
	first.recv()
	first.recv()
	second := openStream(t, context.Background(), c)
	second.send(requestHeaders(false, nil, duplex))
	second.send(requestBody([]byte(`{"model":"m"}`), true))
	checkImmediate(t, second.recv(), 429, "overloaded", true)
	// The first client goes away mid-response: the decision finishes as
	// cancelled and its slot frees up.
	first.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200")}}})
	first.recv()
	cancel()
	if o := f.outcome(t); o.Kind != scheduler.OutcomeCanceled || o.Status != 200 {
		t.Errorf("outcome %+v, want canceled after status 200", o)
	}
	f.waitIdle(t)
	third := openStream(t, context.Background(), c)
	third.send(requestHeaders(false, nil, duplex))
	third.send(requestBody([]byte(`{"model":"m"}`), true))
	if r := third.recv(); r.GetRequestHeaders() == nil {
		t.Fatalf("after the first stream ended: %v, want a pick", r)
	}
}

func TestExtProcNoBodyAndTrailers(t *testing.T) {
	// Two endpoints, default config: the destination names only the
	// first choice (ORIGINAL_DST takes one address).
	f := newFixture(t, preferOrder(epA, epB), epA, epB)
	c, _, _ := startExtProc(t, DefaultConfig(), f)
	// A GET: headers end the request; it is routed without a model.
	s := openStream(t, context.Background(), c)
	s.send(requestHeaders(true, nil, duplex))
	r := s.recv()
	if got := destination(t, r.GetRequestHeaders().GetResponse(), r.GetDynamicMetadata()); got != epA {
		t.Errorf("destination %q", got)
	}
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200"), EndOfStream: true}}})
	s.recv()
	if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess {
		t.Errorf("outcome %+v", o)
	}
	// Body followed by trailers: the pick happens at the trailers.
	s = openStream(t, context.Background(), c)
	s.send(requestHeaders(false, nil, duplex))
	s.send(requestBody([]byte(`{"model":"m"}`), false))
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}})
	if s.recv().GetRequestHeaders() == nil || s.recv().GetRequestBody() == nil || s.recv().GetRequestTrailers() == nil {
		t.Fatal("want headers, body, trailers answers in order")
	}
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "503")}}})
	s.recv()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}})
	s.recv()
	if o := f.outcome(t); o.Kind != scheduler.OutcomeError || o.Status != 503 {
		t.Errorf("outcome %+v, want error 503", o)
	}
	f.noMoreOutcomes(t)
	f.waitIdle(t)
}

func TestExtProcHealth(t *testing.T) {
	f := newFixture(t, nil, epA)
	e, err := NewExtProc(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, e)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, svc := range []string{"", extprocv3.ExternalProcessor_ServiceDesc.ServiceName} {
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, resp, err)
		}
	}
}

// TestExtProcHealthProtocolServices checks the grpc.health.v1 services the
// endpoint-picker protocol names: "liveness" is SERVING while the server
// runs; "readiness" follows /readyz (at least one endpoint with fresh
// metrics) and changes as the pool does.
func TestExtProcHealthProtocolServices(t *testing.T) {
	f := newFixture(t, nil, epA, epB)
	e, err := NewExtProc(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, e)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health %q: %v", svc, err)
		}
		return resp.GetStatus()
	}
	const serving, notServing = healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	stale := func(addrs ...string) []scheduler.Endpoint {
		eps := make([]scheduler.Endpoint, len(addrs))
		for i, a := range addrs {
			eps[i] = scheduler.Endpoint{Address: a, Models: []string{"m"}, State: scheduler.StateStale}
		}
		return eps
	}
	steps := []struct {
		name      string
		pool      func()
		readiness healthpb.HealthCheckResponse_ServingStatus
	}{
		{"two fresh endpoints", func() {}, serving},
		{"every endpoint stale", func() { f.sched.SetEndpoints(stale(epA, epB)) }, notServing},
		{"no endpoints", func() { f.sched.SetEndpoints(nil) }, notServing},
		{"one fresh again", func() { setPool(f.sched, epC) }, serving},
	}
	for _, st := range steps {
		st.pool()
		if got := check("readiness"); got != st.readiness {
			t.Errorf("%s: readiness %v, want %v", st.name, got, st.readiness)
		}
		if got := check("liveness"); got != serving {
			t.Errorf("%s: liveness %v, want SERVING", st.name, got)
		}
	}
}

func TestExtProcScoresHeader(t *testing.T) {
	f := newFixture(t, nil, epA)
	cfg := DefaultConfig()
	cfg.ExtProc.ScoresHeader = true
	c, _, _ := startExtProc(t, cfg, f)
	s := openStream(t, context.Background(), c)
	s.send(requestHeaders(false, nil, duplex, "x-request-id", "r1"))
	s.send(requestBody([]byte(`{"model":"m"}`), true))
	s.recv()
	s.recv()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200"), EndOfStream: true}}})
	got := map[string]string{}
	for _, h := range s.recv().GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		got[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	// one scorer "test" scoring 0.5 with weight 1: total 0.5
	if got["x-trimtab-endpoint"] != epA || got["x-trimtab-scores"] != "total=0.5000; test=0.5000*1" {
		t.Errorf("response headers %v", got)
	}
	if rec := f.rec.Recent(); len(rec) != 1 || rec[0].RequestID != "r1" {
		b, _ := json.Marshal(rec)
		t.Errorf("recorded %s", b)
	}
	f.outcome(t)
}

func TestExtProcResponseBodyNone(t *testing.T) {
	f := newFixture(t, nil, epA)
	c, _, _ := startExtProc(t, DefaultConfig(), f)
	s := openStream(t, context.Background(), c)
	s.send(requestHeaders(false, nil, &extprocv3.ProtocolConfiguration{
		RequestBodyMode: filterv3.ProcessingMode_BUFFERED, ResponseBodyMode: filterv3.ProcessingMode_NONE}))
	s.recv()
	s.send(requestBody([]byte(`{"model":"m"}`), true))
	s.recv()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200")}}})
	s.recv()
	// Envoy closes the stream when the response is done: that is success,
	// not a cancellation, since the body is never shown to trimtab.
	_ = s.s.CloseSend()
	if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess || o.Status != 200 || o.TTFT <= 0 {
		t.Errorf("outcome %+v, want success 200 with a first-byte time", o)
	}
	f.waitIdle(t)
}

func TestBufferPoolClasses(t *testing.T) {
	var p bufferPool
	tests := []struct {
		n, wantCap int
	}{
		{0, 256}, {1, 256}, {256, 256}, // class 0: 2^8
		{257, 512},               // 2^9
		{33 << 10, 64 << 10},     // an 8k-token body: 2^16
		{1 << 20, 1 << 20},       // exactly 2^20
		{16 << 20, 16 << 20},     // the largest class, 2^24
		{16<<20 + 1, 16<<20 + 1}, // beyond: unpooled, exact
	}
	for _, tt := range tests {
		b := p.Get(tt.n)
		if len(*b) != tt.n || cap(*b) != tt.wantCap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", tt.n, len(*b), cap(*b), tt.n, tt.wantCap)
		}
		p.Put(b)
		// A recycled buffer must come back with room for the request.
		if b2 := p.Get(tt.n); len(*b2) != tt.n || cap(*b2) < tt.n {
			t.Errorf("Get(%d) after Put: len %d cap %d", tt.n, len(*b2), cap(*b2))
		}
	}
}

func TestExtProcDrainDeadlineCancelsStreams(t *testing.T) {
	f := newFixture(t, nil, epA)
	cfg := DefaultConfig()
	cfg.DrainTimeout = 50 * time.Millisecond
	c, _, stop := startExtProc(t, cfg, f)
	s := openStream(t, context.Background(), c)
	s.send(requestHeaders(false, nil, duplex))
	s.send(requestBody([]byte(`{"model":"m"}`), true))
	s.recv()
	s.recv()
	stop() // the stream never ends on its own: cut at the deadline
	if o := f.outcome(t); o.Kind != scheduler.OutcomeCanceled {
		t.Errorf("outcome %+v, want canceled", o)
	}
	f.waitIdle(t)
	if _, err := s.s.Recv(); err == nil {
		t.Error("stream still open after Run returned")
	}
}
