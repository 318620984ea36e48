package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
)

// upstream is a vLLM-like test server: non-streaming JSON answers, and SSE
// streams "data: {…}\n\n" … "data: [DONE]\n\n" when the body asks for
// "stream": true.
type upstream struct {
	t    *testing.T
	srv  *httptest.Server
	addr string

	// Set before traffic starts.
	status   int           // answer every request with this status
	events   int           // SSE events before [DONE] (default 3)
	gate     chan struct{} // SSE: wait for a token before each event
	dieAfter int           // SSE: cut the connection after this many events
	hold     bool          // SSE: after the events, wait for the client to go away

	hits      atomic.Int64
	cancelled chan struct{} // closed-over signal: request context ended while held
	mu        sync.Mutex
	bodies    [][]byte
	headers   []http.Header
	paths     []string // request URIs as received
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{t: t, events: 3, cancelled: make(chan struct{}, 16)}
	u.srv = httptest.NewServer(u)
	u.addr = u.srv.Listener.Addr().String()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) lastBody() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.bodies) == 0 {
		return nil
	}
	return u.bodies[len(u.bodies)-1]
}

func (u *upstream) lastPath() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.paths) == 0 {
		return ""
	}
	return u.paths[len(u.paths)-1]
}

func (u *upstream) lastHeader() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.headers) == 0 {
		return nil
	}
	return u.headers[len(u.headers)-1]
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.hits.Add(1)
	u.mu.Lock()
	u.bodies = append(u.bodies, body)
	u.headers = append(u.headers, r.Header.Clone())
	u.paths = append(u.paths, r.RequestURI)
	u.mu.Unlock()
	if u.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(u.status)
		fmt.Fprintf(w, `{"error":{"message":"status %d from %s"}}`, u.status, u.addr)
		return
	}
	if r.URL.Path == "/version" || r.URL.Path == "/v1/version" {
		fmt.Fprintf(w, `{"version":"test","server":%q,"query":%q}`, u.addr, r.URL.RawQuery)
		return
	}
	var req struct {
		Stream bool `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"hello from %s","finish_reason":"stop"}]}`, u.addr)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	for i := 0; i < u.events; i++ {
		if u.gate != nil {
			select {
			case <-u.gate:
			case <-r.Context().Done():
				u.cancelled <- struct{}{}
				return
			}
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t%d\"}]}\n\n", i)
		_ = rc.Flush()
		if u.dieAfter > 0 && i+1 == u.dieAfter {
			conn, _, err := rc.Hijack()
			if err != nil {
				u.t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
			return
		}
	}
	if u.hold {
		<-r.Context().Done()
		u.cancelled <- struct{}{}
		return
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// deadAddr returns a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// testScorer scores with prefer (0.5 everywhere when nil) and reports
// every completion on done.
type testScorer struct {
	prefer func(req *scheduler.Request, ep *scheduler.Endpoint) float64
	done   chan scheduler.Outcome
}

func (*testScorer) Category() scheduler.Category { return scheduler.CategoryNone }

func (s *testScorer) Score(_ *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i, e := range eps {
		if s.prefer == nil {
			out[i] = 0.5
		} else {
			out[i] = s.prefer(req, e)
		}
	}
}

func (s *testScorer) Done(_ *scheduler.Request, _ *scheduler.Endpoint, o scheduler.Outcome) {
	select {
	case s.done <- o:
	default:
	}
}

// preferOrder scores addrs[0] highest, then addrs[1], …; others 0.
func preferOrder(addrs ...string) func(*scheduler.Request, *scheduler.Endpoint) float64 {
	return func(_ *scheduler.Request, e *scheduler.Endpoint) float64 {
		for i, a := range addrs {
			if a == e.Address {
				return 1 - float64(i)*0.1
			}
		}
		return 0
	}
}

type fixture struct {
	sched  *scheduler.Scheduler
	scorer *testScorer
	reg    *prometheus.Registry
	rec    *Recorder
}

// newFixture builds a real scheduler (model and health filters, max-score
// picker, two fallbacks) over endpoints serving model "m".
func newFixture(t testing.TB, prefer func(*scheduler.Request, *scheduler.Endpoint) float64, addrs ...string) *fixture {
	t.Helper()
	sc := &testScorer{prefer: prefer, done: make(chan scheduler.Outcome, 1024)}
	s, err := scheduler.New(scheduler.DefaultConfig(),
		[]scheduler.ScorerEntry{{Name: "test", Type: "test", Scorer: sc, Weight: 1}},
		[]scheduler.Filter{scheduler.ModelFilter{}, scheduler.HealthyFilter{}}, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	setPool(s, addrs...)
	return &fixture{sched: s, scorer: sc, reg: prometheus.NewRegistry(), rec: NewRecorder(64, 1)}
}

func setPool(s *scheduler.Scheduler, addrs ...string) {
	eps := make([]scheduler.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = scheduler.Endpoint{Address: a, Name: fmt.Sprintf("pod-%d", i), Models: []string{"m"}, State: scheduler.StateFresh}
	}
	s.SetEndpoints(eps)
}

func (f *fixture) deps(t *testing.T) Deps {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return Deps{Scheduler: f.sched, View: f.sched, Registerer: f.reg, Gatherer: f.reg, Recorder: f.rec, Listener: ln}
}

// outcome waits for the next completion reported to the scorer.
func (f *fixture) outcome(t *testing.T) scheduler.Outcome {
	t.Helper()
	select {
	case o := <-f.scorer.done:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no Decision.Done within 10s")
		return scheduler.Outcome{}
	}
}

// noMoreOutcomes checks that Done was not called again.
func (f *fixture) noMoreOutcomes(t *testing.T) {
	t.Helper()
	select {
	case o := <-f.scorer.done:
		t.Fatalf("unexpected extra Done: %+v", o)
	default:
	}
}

// waitIdle polls (bounded) until no endpoint has requests in flight.
func (f *fixture) waitIdle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		busy := ""
		for _, e := range f.sched.Pool().Pointers() {
			if n := e.InFlight(); n != 0 {
				busy = fmt.Sprintf("%s has %d in flight", e.Address, n)
			}
		}
		if busy == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(busy)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runner runs a component for a test and checks it stops cleanly.
type runner interface {
	Listen() (net.Addr, error)
	Run(ctx context.Context) error
}

func start(t *testing.T, r runner) (addr string, stop func()) {
	t.Helper()
	a, err := r.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Error("Run did not return within 20s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return a.String(), stop
}

func post(t *testing.T, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

// errorCode decodes an OpenAI error body and returns its code.
func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("not an OpenAI error body: %q (%v)", body, err)
	}
	return e.Error.Code
}
