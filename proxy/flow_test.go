package proxy

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/scheduler"
)

// startFlow runs a flow controller on f's scheduler in which every
// endpoint holds one request of the router's at a time (max_in_flight 1),
// on the real clock, polling every 5ms.
func startFlow(t *testing.T, f *fixture) *flow.Controller {
	t.Helper()
	cfg := flow.DefaultConfig()
	cfg.Enabled = true
	cfg.Saturation.MaxInFlight = 1
	cfg.Poll = 5 * time.Millisecond
	fl, err := flow.New(cfg, flow.Deps{Scheduler: f.sched})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("flow Run: %v", err)
		}
	})
	return fl
}

func waitLen(t *testing.T, fl *flow.Controller, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for fl.Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("flow queue holds %d, want %d", fl.Len(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// heldEndpoint starts the HTTP proxy with flow control in front of one
// gated upstream and sends a streaming request that holds the endpoint
// until u.gate is sent to: the pool is saturated for the next request.
func heldEndpoint(t *testing.T) (u *upstream, f *fixture, fl *flow.Controller, url string, first *http.Response) {
	t.Helper()
	u = newUpstream(t)
	u.gate = make(chan struct{})
	u.events = 1
	f = newFixture(t, nil, u.addr)
	fl = startFlow(t, f)
	deps := f.deps(t)
	deps.Flow = fl
	h, err := NewHTTP(DefaultConfig(), deps)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	url = "http://" + addr + "/v1/completions"
	first = post(t, url, `{"model":"m","stream":true,"prompt":"a"}`, nil)
	return u, f, fl, url, first
}

// A second request waits in the router while the only endpoint holds the
// first, and is dispatched when the first ends.
func TestHTTPFlowQueuesUntilTheEndpointHasRoom(t *testing.T) {
	u, f, fl, url, first := heldEndpoint(t)
	defer first.Body.Close()
	second := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Post(url, "application/json", strings.NewReader(`{"model":"m","prompt":"b"}`))
		if err != nil {
			t.Error(err)
		}
		second <- resp
	}()
	waitLen(t, fl, 1)
	if u.hits.Load() != 1 {
		t.Fatalf("upstream saw %d requests while one waits in the router, want 1", u.hits.Load())
	}
	u.gate <- struct{}{}
	readAll(t, bufio.NewReader(first.Body))
	select {
	case resp := <-second:
		if resp == nil {
			t.Fatal("second request failed")
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("second request: %d, want 200", resp.StatusCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued request was not dispatched after the first ended")
	}
	f.waitIdle(t)
	if l := fl.Load(u.addr); l != 0 {
		t.Fatalf("ledger %d after both ended, want 0", l)
	}
}

// A request whose TTL runs out in the queue gets 429 with the drop
// reason and Retry-After; one whose client goes away leaves the queue.
func TestHTTPFlowTTLAndClientGone(t *testing.T) {
	u, f, fl, url, first := heldEndpoint(t)
	defer first.Body.Close()

	resp := post(t, url, `{"model":"m","prompt":"b"}`, map[string]string{"X-Trimtab-Ttl": "20ms"})
	body := readAll(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get(flow.HeaderDropReason) != flow.ReasonTTL ||
		resp.Header.Get("Retry-After") == "" || errorCode(t, body) != "flow_ttl_expired" {
		t.Fatalf("expired: %d %v %s; want 429, drop reason ttl-expired, Retry-After, flow_ttl_expired", resp.StatusCode, resp.Header, body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"model":"m","prompt":"c"}`))
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitLen(t, fl, 1)
	cancel()
	<-gone
	waitLen(t, fl, 0)
	u.gate <- struct{}{}
	readAll(t, first.Body)
	f.waitIdle(t)
	if u.hits.Load() != 1 {
		t.Fatalf("upstream saw %d requests, want only the first", u.hits.Load())
	}
}

// On ext_proc the stream is held while its request waits: the pick
// answer comes only when the first request's stream ends.
func TestExtProcFlowHoldsTheStream(t *testing.T) {
	f := newFixture(t, nil, epA)
	fl := startFlow(t, f)
	deps := f.deps(t)
	deps.Flow = fl
	e, err := NewExtProc(DefaultConfig(), deps)
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
	first := openStream(t, context.Background(), c)
	first.send(requestHeaders(false, nil, duplex))
	first.send(requestBody([]byte(`{"model":"m"}`), true))
	if r := first.recv(); r.GetRequestHeaders() == nil {
		t.Fatalf("first: %v, want a pick", r)
	}
	first.recv()
	second := openStream(t, context.Background(), c)
	second.send(requestHeaders(false, nil, duplex, "x-trimtab-priority", "interactive"))
	second.send(requestBody([]byte(`{"model":"m"}`), true))
	got := make(chan *extprocv3.ProcessingResponse, 1)
	go func() { got <- second.recv() }()
	waitLen(t, fl, 1)
	select {
	case r := <-got:
		t.Fatalf("the queued stream was answered %v while the endpoint was full", r)
	default:
	}
	first.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200"), EndOfStream: true}}})
	first.recv()
	if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess {
		t.Fatalf("first outcome %+v", o)
	}
	select {
	case r := <-got:
		if r.GetRequestHeaders() == nil {
			t.Fatalf("second: %v, want a pick", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held stream got no pick after the endpoint had room")
	}
}
