package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/proxy"
	"github.com/trimtab/trimtab/sim/fakeserver"
)

// otlpReceiver is an OTLP/gRPC collector on loopback that keeps every
// span it is sent.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr     string
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				r.services = append(r.services, kv.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) named(name string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, rcv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return rcv
}

// startTracedUpstream runs one fake vLLM server whose handler remembers
// the traceparent of every /v1/ request it receives.
func startTracedUpstream(t *testing.T) (addr string, traceparents func() []string) {
	t.Helper()
	cfg := fakeserver.DefaultConfig()
	cfg.TimeScale = 10
	fs, err := fakeserver.New(cfg, fakeserver.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	inner := fs.Handler()
	hs := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			mu.Lock()
			seen = append(seen, r.Header.Get("traceparent"))
			mu.Unlock()
		}
		inner.ServeHTTP(w, r)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	engine := make(chan struct{})
	go func() { defer close(engine); _ = fs.Run(ctx) }()
	served := make(chan struct{})
	go func() { defer close(served); _ = hs.Serve(ln) }()
	t.Cleanup(func() { cancel(); _ = hs.Close(); <-served; <-engine })
	return ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func attrs(s *tracepb.Span) map[string]*commonpb.AnyValue {
	m := map[string]*commonpb.AnyValue{}
	for _, kv := range s.GetAttributes() {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// TestServeExportsTraces runs serve's wiring with tracing on against an
// in-process OTLP collector: a request carrying a W3C traceparent gets a
// span that continues the client's trace, with the decision's attributes;
// the upstream receives a traceparent naming that span; the control loop's
// weight changes are spans too; shutdown flushes them all.
func TestServeExportsTraces(t *testing.T) {
	rcv := startOTLPReceiver(t)
	upstream, traceparents := startTracedUpstream(t)
	dir := t.TempDir()
	eps := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(eps, []byte(fmt.Sprintf("endpoints:\n  - address: %s\n    models: [llama-3.1-8b-instruct]\n", upstream)), 0o644); err != nil {
		t.Fatal(err)
	}
	body := profileYAML(eps, 3, true) + fmt.Sprintf("tracing:\n  enabled: true\n  endpoint: %s\n  insecure: true\n  service_name: trimtab-test\n", rcv.addr)
	f, err := configs.Load(writeProfile(t, dir, body))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := newTracing(f.Tracing)
	if err != nil {
		t.Fatal(err)
	}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	httpLn, extLn := listen(), listen()
	svc, err := newService(f, serviceOptions{Logger: slog.New(slog.DiscardHandler), HTTP: httpLn, Admin: listen(),
		ExtProc: extLn, NoRuntimeM: true, Tracer: tr.Tracer()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- svc.Run(ctx) }()
	url := "http://" + httpLn.Addr().String()
	eventually(t, 10*time.Second, "endpoint discovered and the loop's first tick", func() bool {
		p := svc.sched.Pool()
		return p != nil && len(p.Endpoints) == 1 && svc.loop.Last() != nil
	})

	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions",
		strings.NewReader(`{"model":"llama-3.1-8b-instruct","prompt":"hello","max_tokens":2}`))
	req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The same request through ext_proc, as Envoy passes it on (buffered
	// bodies, no protocol_config).
	const envoySpan = "b7ad6b7169203331"
	extTP := extProcRequest(t, extLn.Addr().String(), "00-"+clientTrace+"-"+envoySpan+"-01")

	// Shut down in serve's order: servers and loop first, the exporter
	// last, which flushes every span.
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	tr.Shutdown(5*time.Second, slog.New(slog.DiscardHandler))

	spans := rcv.named(proxy.SpanHTTP)
	if len(spans) != 1 {
		t.Fatalf("%d %s spans at the collector, want 1", len(spans), proxy.SpanHTTP)
	}
	s := spans[0]
	if got := hex.EncodeToString(s.GetTraceId()); got != clientTrace {
		t.Errorf("span trace id %s, want the client's %s", got, clientTrace)
	}
	if got := hex.EncodeToString(s.GetParentSpanId()); got != clientSpan {
		t.Errorf("span parent %s, want the client's span %s", got, clientSpan)
	}
	a := attrs(s)
	if a[proxy.AttrEndpoint].GetStringValue() != upstream || a[proxy.AttrServedBy].GetStringValue() != upstream {
		t.Errorf("endpoint attributes %v, want %s", s.GetAttributes(), upstream)
	}
	if a[proxy.AttrWeightsVersion].GetIntValue() < 1 || a[proxy.AttrMode].GetStringValue() == "" ||
		a[proxy.AttrStatus].GetIntValue() != 200 || a[proxy.AttrModel].GetStringValue() != "llama-3.1-8b-instruct" {
		t.Errorf("decision attributes %v", s.GetAttributes())
	}
	if top := a[proxy.AttrTopEndpoints].GetArrayValue().GetValues(); len(top) != 1 || top[0].GetStringValue() != upstream {
		t.Errorf("%s = %v, want [%s]", proxy.AttrTopEndpoints, top, upstream)
	}
	for _, scorer := range []string{"prefix", "queue", "kvcache", "inflight"} {
		if _, ok := a[proxy.AttrScorePrefix+scorer]; !ok {
			t.Errorf("no %s%s attribute", proxy.AttrScorePrefix, scorer)
		}
	}
	// The upstream continues the trace from trimtab's span.
	want := "00-" + clientTrace + "-" + hex.EncodeToString(s.GetSpanId()) + "-01"
	if got := traceparents(); len(got) != 1 || got[0] != want {
		t.Errorf("upstream traceparents %q, want [%s]", got, want)
	}
	ext := rcv.named(proxy.SpanExtProc)
	if len(ext) != 1 {
		t.Fatalf("%d %s spans at the collector, want 1", len(ext), proxy.SpanExtProc)
	}
	if got := hex.EncodeToString(ext[0].GetParentSpanId()); got != envoySpan || hex.EncodeToString(ext[0].GetTraceId()) != clientTrace {
		t.Errorf("ext_proc span parent %s, want Envoy's %s in the client's trace", got, envoySpan)
	}
	if a := attrs(ext[0]); a[proxy.AttrEndpoint].GetStringValue() != upstream || a[proxy.AttrStatus].GetIntValue() != 200 {
		t.Errorf("ext_proc span attributes %v", ext[0].GetAttributes())
	}
	if want := "00-" + clientTrace + "-" + hex.EncodeToString(ext[0].GetSpanId()) + "-01"; extTP != want {
		t.Errorf("ext_proc traceparent mutation %q, want %q", extTP, want)
	}
	if len(rcv.named(control.SpanWeights)) == 0 {
		t.Errorf("no %s span: the adaptive loop's first version was not traced", control.SpanWeights)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, name := range rcv.services {
		if name != "trimtab-test" {
			t.Errorf("service.name %q, want trimtab-test", name)
		}
	}
}

// TestTracingSampleRatio: the ratio applies to requests without a parent;
// a sampled or unsampled parent is followed (parent-based).
func TestTracingSampleRatio(t *testing.T) {
	cfg := configs.DefaultTracingConfig()
	cfg.Enabled, cfg.Endpoint, cfg.Insecure = true, "127.0.0.1:1", true
	for _, tt := range []struct {
		ratio        float64
		parent       trace.TraceFlags // 0xff: no parent
		wantRecorded bool
	}{
		{0, 0xff, false},
		{1, 0xff, true},
		{0, trace.FlagsSampled, true}, // sampled parent wins over ratio 0
		{1, 0, false},                 // unsampled parent wins over ratio 1
	} {
		cfg.SampleRatio = tt.ratio
		tr, err := newTracing(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if tt.parent != 0xff {
			ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: tt.parent, Remote: true}))
		}
		_, span := tr.Tracer().Start(ctx, "x")
		if span.IsRecording() != tt.wantRecorded {
			t.Errorf("ratio %v parent %v: recording %v, want %v", tt.ratio, tt.parent, span.IsRecording(), tt.wantRecorded)
		}
		span.End()
		tr.Shutdown(100*time.Millisecond, slog.New(slog.DiscardHandler)) // nothing listens: drop the span
	}
}

func TestTracingOffIsNil(t *testing.T) {
	tr, err := newTracing(configs.DefaultTracingConfig())
	if err != nil || tr != nil || tr.Tracer() != nil {
		t.Fatalf("tracing off: %v, %v; want nil and a nil Tracer", tr, err)
	}
	tr.Shutdown(time.Second, slog.New(slog.DiscardHandler)) // a no-op
}

// TestTracingTLS: with ca_file, spans reach a collector serving TLS with a
// certificate that CA signed; a file without a certificate is refused,
// naming the field.
func TestTracingTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test collector"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{addr: ln.Addr().String()}
	srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key})))
	coltracepb.RegisterTraceServiceServer(srv, rcv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })

	cfg := configs.DefaultTracingConfig()
	cfg.Enabled, cfg.Endpoint, cfg.CAFile = true, rcv.addr, caFile
	tr, err := newTracing(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer().Start(context.Background(), "over-tls")
	span.End()
	tr.Shutdown(5*time.Second, slog.New(slog.DiscardHandler))
	if got := rcv.named("over-tls"); len(got) != 1 {
		t.Fatalf("%d spans over TLS, want 1", len(got))
	}

	cfg.CAFile = filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(cfg.CAFile, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := newTracing(cfg); err == nil || !strings.Contains(err.Error(), "tracing.ca_file: ") {
		t.Errorf("error %v, want it to name tracing.ca_file", err)
	}
}

// extProcRequest plays Envoy for one request through the ext_proc server
// (buffered bodies) and returns the traceparent header mutation it got.
func extProcRequest(t *testing.T, addr, traceparent string) string {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdrs := func(kv ...string) *corev3.HeaderMap {
		m := &corev3.HeaderMap{}
		for i := 0; i+1 < len(kv); i += 2 {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return m
	}
	exchange := func(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: hdrs(":method", "POST", ":path", "/v1/completions", "traceparent", traceparent)}}})
	resp := exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: []byte(`{"model":"llama-3.1-8b-instruct","prompt":"hello"}`), EndOfStream: true}}})
	var tp string
	for _, h := range resp.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "traceparent" {
			tp = string(h.GetHeader().GetRawValue())
		}
	}
	exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrs(":status", "200")}}})
	exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: []byte(`{}`), EndOfStream: true}}})
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v, want EOF", err)
	}
	return tp
}
