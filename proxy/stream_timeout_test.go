package proxy

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/scheduler"
)

// hangingUpstream is a model server that answers every request with its
// response headers (and first, when set), then sends nothing more until
// the request is cut: a pod stuck after it started answering.
type hangingUpstream struct {
	addr   string
	hits   atomic.Int64
	held   chan struct{} // one token per request, once it has gone silent
	first  string        // body bytes sent before going silent
	length int           // Content-Length to declare; 0 sends the body chunked
}

func newHangingUpstream(t *testing.T, first string, length int) *hangingUpstream {
	u := &hangingUpstream{held: make(chan struct{}, 64), first: first, length: length}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		u.hits.Add(1)
		if u.length > 0 {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(u.length))
		} else {
			w.Header().Set("Content-Type", "text/event-stream")
		}
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, u.first)
		_ = http.NewResponseController(w).Flush()
		u.held <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	u.addr = srv.Listener.Addr().String()
	return u
}

// waitHeld waits until u holds a request silent.
func (u *hangingUpstream) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-u.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the hanging upstream got no request within 10s")
	}
}

// expireIdle steps clk past the stream idle timeout once the proxy has
// armed it (polled, bounded): the proxy is then waiting on a silent
// endpoint, the only request in flight.
func expireIdle(t *testing.T, clk *clocktesting.FakeClock, idle time.Duration) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the proxy armed no stream idle timer within 10s of the endpoint going silent")
		}
		time.Sleep(2 * time.Millisecond)
	}
	clk.Step(idle)
}

// idleFixture is a scheduler over addrs (preferred in that order) and an
// HTTP proxy with a stream idle timeout of idle, both on a fake clock.
func idleFixture(t *testing.T, idle time.Duration, addrs ...string) (*fixture, *clocktesting.FakeClock, string) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sc := &testScorer{prefer: preferOrder(addrs...), done: make(chan scheduler.Outcome, 64)}
	reg := prometheus.NewRegistry()
	s, err := scheduler.New(scheduler.DefaultConfig(),
		[]scheduler.ScorerEntry{{Name: "test", Type: "test", Scorer: sc, Weight: 1}},
		[]scheduler.Filter{scheduler.ModelFilter{}, scheduler.HealthyFilter{}}, scheduler.MaxScore{},
		scheduler.Deps{Registerer: reg, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	setPool(s, addrs...)
	f := &fixture{sched: s, scorer: sc, reg: reg, rec: NewRecorder(64, 0)}
	deps := f.deps(t)
	deps.Clock = clk
	cfg := DefaultConfig()
	cfg.HTTP.StreamIdleTimeout = idle
	h, err := NewHTTP(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	return f, clk, addr
}

type answer struct {
	status   int
	endpoint string
	body     string
	err      error // reading the body
}

// postAsync sends body to url and delivers the whole answer on the channel.
func postAsync(url, body string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			ch <- answer{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- answer{status: resp.StatusCode, endpoint: resp.Header.Get(HeaderEndpoint), body: string(b), err: err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan answer, what string) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer within 10s", what)
		return answer{}
	}
}

// TestHTTPStreamIdleTimeoutRetriesAndEjects: a pod that sends its response
// headers and then nothing is cut after http.stream_idle_timeout; as
// nothing reached the client, the request is retried on the healthy
// fallback. Each timeout counts towards outlier ejection, so after
// outlier.consecutive_failures (5) the silent pod gets no more traffic:
// of 30 requests it gets 5, and every one of the 30 is answered 200 by
// the healthy pod. The timeouts are counted in
// trimtab_proxy_stream_timeouts_total{stage="first_byte"}.
func TestHTTPStreamIdleTimeoutRetriesAndEjects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		length int
	}{
		{"stream", `{"model":"m","stream":true,"prompt":"x"}`, 0},
		{"json with a content length", `{"model":"m","prompt":"x"}`, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const idle = 2 * time.Second
			hang, good := newHangingUpstream(t, "", tc.length), newUpstream(t)
			f, clk, addr := idleFixture(t, idle, hang.addr, good.addr)
			for i := 1; i <= 30; i++ {
				ch := postAsync("http://"+addr+"/v1/completions", tc.body)
				if i <= 5 { // 5 = outlier.consecutive_failures
					hang.waitHeld(t)
					expireIdle(t, clk, idle)
				}
				a := await(t, ch, "request "+strconv.Itoa(i))
				if a.err != nil || a.status != 200 || a.endpoint != good.addr {
					t.Fatalf("request %d: %d from %s (%v): %q; want 200 from the healthy %s", i, a.status, a.endpoint, a.err, a.body, good.addr)
				}
				if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess {
					t.Fatalf("request %d: outcome %+v, want success", i, o)
				}
			}
			if n := hang.hits.Load(); n != 5 {
				t.Errorf("the silent pod got %d of 30 requests, want 5 (then ejected)", n)
			}
			want := strings.ReplaceAll(`
# HELP trimtab_scheduler_ejections_total Outlier ejections of an endpoint after consecutive failures, since this router first saw it.
# TYPE trimtab_scheduler_ejections_total counter
trimtab_scheduler_ejections_total{endpoint="GOOD"} 0
trimtab_scheduler_ejections_total{endpoint="HANG"} 1
# HELP trimtab_proxy_retries_total Requests moved to a fallback endpoint after a failure before any byte reached the client.
# TYPE trimtab_proxy_retries_total counter
trimtab_proxy_retries_total 5
# HELP trimtab_proxy_stream_timeouts_total Endpoint responses cut after http.stream_idle_timeout without a body byte, by stage (first_byte: none had arrived; mid_stream: some had).
# TYPE trimtab_proxy_stream_timeouts_total counter
trimtab_proxy_stream_timeouts_total{stage="first_byte"} 5
trimtab_proxy_stream_timeouts_total{stage="mid_stream"} 0
`, "HANG", hang.addr)
			want = strings.ReplaceAll(want, "GOOD", good.addr)
			if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), "trimtab_scheduler_ejections_total",
				"trimtab_proxy_retries_total", "trimtab_proxy_stream_timeouts_total"); err != nil {
				t.Error(err)
			}
			f.waitIdle(t)
		})
	}
}

// TestHTTPStreamIdleTimeoutAfterBytes: when the endpoint goes silent after
// bytes reached the client, or no fallback is left, the request cannot be
// retried. A stream ends with an upstream_timeout error event in the API's
// format and a cut connection (never a clean end that could pass for a
// whole answer); a body not yet begun is answered 504 upstream_timeout.
// Either way the outcome is an error and the timeout is counted.
func TestHTTPStreamIdleTimeoutAfterBytes(t *testing.T) {
	const event = "data: {\"choices\":[{\"index\":0,\"text\":\"t0\"}]}\n\n"
	for _, tc := range []struct {
		name      string
		fallback  bool   // a healthy fallback endpoint exists
		first     string // sent before the silence
		length    int
		body      string
		path      string
		status    int
		wantBody  string // the client's body starts with it
		wantEvent string // …and contains it
		wantCut   bool
		stage     string
	}{
		{name: "mid-stream, with a fallback", fallback: true, first: event, path: "/v1/completions",
			body: `{"model":"m","stream":true,"prompt":"x"}`, status: 200, wantBody: event,
			wantEvent: "\n\ndata: {\"error\":{\"message\":", wantCut: true, stage: "mid_stream"},
		{name: "messages stream, no fallback", path: "/v1/messages",
			body:   `{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
			status: 200, wantEvent: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"", wantCut: true, stage: "first_byte"},
		{name: "json, no fallback", length: 100, path: "/v1/completions", body: `{"model":"m","prompt":"x"}`,
			status: 504, wantBody: `{"error":{"message":`, wantEvent: `"code":"upstream_timeout"`, stage: "first_byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const idle = 2 * time.Second
			hang := newHangingUpstream(t, tc.first, tc.length)
			addrs := []string{hang.addr}
			var good *upstream
			if tc.fallback {
				good = newUpstream(t)
				addrs = append(addrs, good.addr)
			}
			f, clk, addr := idleFixture(t, idle, addrs...)
			ch := postAsync("http://"+addr+tc.path, tc.body)
			hang.waitHeld(t)
			expireIdle(t, clk, idle)
			a := await(t, ch, tc.name)
			if a.status != tc.status || a.endpoint != hang.addr || !strings.HasPrefix(a.body, tc.wantBody) || !strings.Contains(a.body, tc.wantEvent) {
				t.Errorf("%d from %s: %q; want %d from %s starting %q, with %q", a.status, a.endpoint, a.body, tc.status, hang.addr, tc.wantBody, tc.wantEvent)
			}
			if cut := a.err != nil; cut != tc.wantCut {
				t.Errorf("body read error %v, want a cut connection: %v", a.err, tc.wantCut)
			}
			if o := f.outcome(t); o.Kind != scheduler.OutcomeError {
				t.Errorf("outcome %+v, want error", o)
			}
			f.noMoreOutcomes(t)
			if good != nil && good.hits.Load() != 0 {
				t.Errorf("the fallback got %d requests after bytes had reached the client, want 0", good.hits.Load())
			}
			var other string
			if tc.stage == "first_byte" {
				other = "mid_stream"
			} else {
				other = "first_byte"
			}
			want := "# HELP trimtab_proxy_stream_timeouts_total Endpoint responses cut after http.stream_idle_timeout without a body byte, by stage (first_byte: none had arrived; mid_stream: some had).\n" +
				"# TYPE trimtab_proxy_stream_timeouts_total counter\n"
			lines := []string{`trimtab_proxy_stream_timeouts_total{stage="` + tc.stage + `"} 1`, `trimtab_proxy_stream_timeouts_total{stage="` + other + `"} 0`}
			if lines[0] > lines[1] {
				lines[0], lines[1] = lines[1], lines[0]
			}
			want += strings.Join(lines, "\n") + "\n"
			if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), "trimtab_proxy_stream_timeouts_total"); err != nil {
				t.Error(err)
			}
			f.waitIdle(t)
		})
	}
}

// TestHTTPStreamIdleTimeoutPassThrough: a pass-through request to a silent
// endpoint is cut after the idle timeout too.
func TestHTTPStreamIdleTimeoutPassThrough(t *testing.T) {
	const idle = 2 * time.Second
	hang := newHangingUpstream(t, "", 0)
	_, clk, addr := idleFixture(t, idle, hang.addr)
	ch := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/v1/version")
		if err == nil {
			_, err = io.Copy(io.Discard, bufio.NewReader(resp.Body))
			resp.Body.Close()
		}
		ch <- err
	}()
	hang.waitHeld(t)
	expireIdle(t, clk, idle)
	select {
	case err := <-ch:
		if err == nil {
			t.Error("a pass-through answer cut by the idle timeout ended cleanly")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pass-through request to a silent endpoint did not end within 10s")
	}
}
