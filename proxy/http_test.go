package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
	"github.com/trimtab/trimtab/scorers/prefix"
)

func TestHTTPNonStreamingPassThrough(t *testing.T) {
	a, b, c := newUpstream(t), newUpstream(t), newUpstream(t)
	f := newFixture(t, preferOrder(a.addr, b.addr), a.addr, b.addr, c.addr)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	body := `{"model":"m", "prompt":"hi there","max_tokens":5 ,"extra":[1,2,{"x":null}]}`
	// A client naming its own destination must be ignored and the header
	// never forwarded.
	resp := post(t, "http://"+addr+"/v1/completions", body, map[string]string{
		"X-Gateway-Destination-Endpoint": c.addr, "X-Session-Id": "s1", "Connection": "X-Secret", "X-Secret": "hop",
	})
	got := readAll(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(HeaderEndpoint) != a.addr {
		t.Fatalf("status %d endpoint %q, want 200 from %s", resp.StatusCode, resp.Header.Get(HeaderEndpoint), a.addr)
	}
	if want := `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"hello from ` + a.addr + `","finish_reason":"stop"}]}`; got != want {
		t.Errorf("response body %q, want %q", got, want)
	}
	if string(a.lastBody()) != body {
		t.Errorf("upstream got body %q, want the client's bytes %q", a.lastBody(), body)
	}
	hdr := a.lastHeader()
	if hdr.Get("X-Gateway-Destination-Endpoint") != "" || hdr.Get("X-Secret") != "" || hdr.Get("X-Session-Id") != "s1" {
		t.Errorf("upstream headers: destination %q, connection-listed %q, session %q", hdr.Get("X-Gateway-Destination-Endpoint"), hdr.Get("X-Secret"), hdr.Get("X-Session-Id"))
	}
	if c.hits.Load() != 0 {
		t.Errorf("the endpoint named by the client got %d requests, want 0", c.hits.Load())
	}
	if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess || o.Status != 200 {
		t.Errorf("outcome %+v, want success 200", o)
	}
	f.noMoreOutcomes(t)
	f.waitIdle(t)
	if n := testutil.ToFloat64(h.m.requests.WithLabelValues(a.addr, "200")); n != 1 {
		t.Errorf("trimtab_proxy_requests_total{endpoint=a,code=200} = %v, want 1", n)
	}
	if n := testutil.CollectAndCount(h.m.ttfb); n != 1 {
		t.Errorf("ttfb histogram has %d series, want 1", n)
	}
}

func TestHTTPStreamingFlushesEachEvent(t *testing.T) {
	u := newUpstream(t)
	u.gate = make(chan struct{})
	f := newFixture(t, nil, u.addr)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	resp := post(t, "http://"+addr+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content-type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	ep := f.sched.Pool().Pointers()[0]
	// Before the first event the prompt counts as pending prefill.
	if ep.PendingPrefill() <= 0 || ep.InFlight() != 1 {
		t.Fatalf("before the first byte: pending %d, in flight %d; want > 0 and 1", ep.PendingPrefill(), ep.InFlight())
	}
	// The upstream writes event i only after the test got event i-1: if
	// the proxy buffered, this would deadlock (and the test time out).
	for i := 0; i < u.events; i++ {
		if i == 1 {
			// The first byte has come back: nothing is pending, though
			// the request is still in flight.
			if ep.PendingPrefill() != 0 || ep.InFlight() != 1 {
				t.Errorf("after the first byte: pending %d, in flight %d; want 0 and 1", ep.PendingPrefill(), ep.InFlight())
			}
		}
		u.gate <- struct{}{}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := `data: {"choices":[{"index":0,"text":"t` + string(rune('0'+i)) + `"}]}` + "\n"; line != want {
			t.Fatalf("event %d = %q, want %q", i, line, want)
		}
		if blank, _ := br.ReadString('\n'); blank != "\n" {
			t.Fatalf("event %d not terminated by a blank line: %q", i, blank)
		}
	}
	if rest := readAll(t, br); rest != "data: [DONE]\n\n" {
		t.Fatalf("tail %q", rest)
	}
	if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess || o.TTFT <= 0 || o.Latency < o.TTFT {
		t.Errorf("outcome %+v, want success with 0 < TTFT ≤ latency", o)
	}
	f.waitIdle(t)
}

func TestHTTPUpstreamDiesMidStream(t *testing.T) {
	u := newUpstream(t)
	u.dieAfter = 1
	f := newFixture(t, nil, u.addr)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	resp := post(t, "http://"+addr+"/v1/completions", `{"model":"m","stream":true,"prompt":"x"}`, nil)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The client got the first event, then an error event, then a cut
	// connection: never a clean end that could pass for a full answer.
	if err == nil {
		t.Errorf("body ended cleanly: %q", b)
	}
	if !strings.HasPrefix(string(b), `data: {"choices":[{"index":0,"text":"t0"}]}`) || !strings.Contains(string(b), `"code":"upstream_broken"`) {
		t.Errorf("body %q: want the first event, then an upstream_broken error event", b)
	}
	if o := f.outcome(t); o.Kind != scheduler.OutcomeError {
		t.Errorf("outcome %+v, want error", o)
	}
	f.noMoreOutcomes(t)
	f.waitIdle(t)
}

func TestHTTPRetriesRefusedConnection(t *testing.T) {
	live := newUpstream(t)
	dead := deadAddr(t)
	f := newFixture(t, preferOrder(dead, live.addr), dead, live.addr)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	resp := post(t, "http://"+addr+"/v1/completions", `{"model":"m","prompt":"x"}`, nil)
	body := readAll(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(HeaderEndpoint) != live.addr || !strings.Contains(body, live.addr) {
		t.Fatalf("status %d from %q: %q; want 200 from %s", resp.StatusCode, resp.Header.Get(HeaderEndpoint), body, live.addr)
	}
	if n := testutil.ToFloat64(h.m.retries); n != 1 {
		t.Errorf("retries = %v, want 1", n)
	}
	if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess {
		t.Errorf("outcome %+v, want success", o)
	}
	f.noMoreOutcomes(t)
	f.waitIdle(t)
}

func TestHTTPRetryOn503(t *testing.T) {
	tests := []struct {
		name       string
		retries    int
		wantStatus int
		wantFrom   int // index of the upstream that answers
		wantRetry  float64
	}{
		{name: "retried on the fallback", retries: 2, wantStatus: 200, wantFrom: 1, wantRetry: 1},
		{name: "retries off: the 503 is passed on", retries: 0, wantStatus: 503, wantFrom: 0, wantRetry: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			busy, ok := newUpstream(t), newUpstream(t)
			busy.status = http.StatusServiceUnavailable
			ups := []*upstream{busy, ok}
			f := newFixture(t, preferOrder(busy.addr, ok.addr), busy.addr, ok.addr)
			cfg := DefaultConfig()
			cfg.HTTP.Retries = tt.retries
			h, err := NewHTTP(cfg, f.deps(t))
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := start(t, h)
			resp := post(t, "http://"+addr+"/v1/completions", `{"model":"m","prompt":"x"}`, nil)
			readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || resp.Header.Get(HeaderEndpoint) != ups[tt.wantFrom].addr {
				t.Fatalf("status %d from %s, want %d from %s", resp.StatusCode, resp.Header.Get(HeaderEndpoint), tt.wantStatus, ups[tt.wantFrom].addr)
			}
			if n := testutil.ToFloat64(h.m.retries); n != tt.wantRetry {
				t.Errorf("retries = %v, want %v", n, tt.wantRetry)
			}
			f.outcome(t)
			f.noMoreOutcomes(t)
			f.waitIdle(t)
		})
	}
}

func TestHTTPClientDisconnectCancelsUpstream(t *testing.T) {
	u := newUpstream(t)
	u.events, u.hold = 1, true
	f := newFixture(t, nil, u.addr)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/completions", strings.NewReader(`{"model":"m","stream":true,"prompt":"x"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	<-u.cancelled // the upstream saw its request cancelled
	if o := f.outcome(t); o.Kind != scheduler.OutcomeCanceled {
		t.Errorf("outcome %+v, want canceled", o)
	}
	f.waitIdle(t)
}

func TestHTTPErrors(t *testing.T) {
	u := newUpstream(t)
	tests := []struct {
		name       string
		method     string
		path, body string
		pool       []string
		wantStatus int
		wantCode   string
		retryAfter bool
	}{
		{name: "body over the limit", path: "/v1/completions", body: `{"model":"m","prompt":"` + strings.Repeat("x", 2048) + `"}`, wantStatus: 413, wantCode: "body_too_large"},
		{name: "invalid JSON", path: "/v1/completions", body: `{"model":`, wantStatus: 400, wantCode: "invalid_json"},
		{name: "missing model", path: "/v1/chat/completions", body: `{"messages":[]}`, wantStatus: 400, wantCode: "missing_model"},
		{name: "unknown model", path: "/v1/completions", body: `{"model":"nope","prompt":"x"}`, wantStatus: 404, wantCode: "model_not_found"},
		{name: "no endpoints", path: "/v1/completions", body: `{"model":"m","prompt":"x"}`, pool: []string{}, wantStatus: 503, wantCode: "no_endpoints", retryAfter: true},
		{name: "wrong method", method: http.MethodGet, path: "/v1/completions", wantStatus: 405, wantCode: "method_not_allowed"},
		{name: "not /v1", path: "/admin", body: `{}`, wantStatus: 404, wantCode: "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, u.addr)
			if tt.pool != nil {
				setPool(f.sched, tt.pool...)
			}
			cfg := DefaultConfig()
			cfg.MaxBodyBytes = 1024
			h, err := NewHTTP(cfg, f.deps(t))
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := start(t, h)
			m := tt.method
			if m == "" {
				m = http.MethodPost
			}
			req, _ := http.NewRequest(m, "http://"+addr+tt.path, strings.NewReader(tt.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tt.wantStatus, body)
			}
			if code := errorCode(t, body); code != tt.wantCode {
				t.Errorf("code %q, want %q", code, tt.wantCode)
			}
			if got := resp.Header.Get("Retry-After"); (got == "1") != tt.retryAfter {
				t.Errorf("Retry-After %q, want present=%v (1s)", got, tt.retryAfter)
			}
			f.noMoreOutcomes(t)
		})
	}
}

func TestHTTPOverloadedGets429(t *testing.T) {
	u := newUpstream(t)
	u.gate = make(chan struct{})
	f := newFixture(t, nil, u.addr)
	cfg := DefaultConfig()
	cfg.HTTP.MaxInFlight = 1
	h, err := NewHTTP(cfg, f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	first := post(t, "http://"+addr+"/v1/completions", `{"model":"m","stream":true,"prompt":"x"}`, nil)
	defer first.Body.Close()
	second := post(t, "http://"+addr+"/v1/completions", `{"model":"m","prompt":"x"}`, nil)
	body := readAll(t, second.Body)
	second.Body.Close()
	if second.StatusCode != 429 || errorCode(t, body) != "overloaded" || second.Header.Get("Retry-After") == "" {
		t.Fatalf("second request: %d %q, want 429 overloaded with Retry-After", second.StatusCode, body)
	}
	for i := 0; i < u.events; i++ {
		u.gate <- struct{}{}
	}
	readAll(t, first.Body)
	f.outcome(t)
	f.waitIdle(t)
}

func TestHTTPSharedSystemPromptLandsOnOneEndpoint(t *testing.T) {
	ups := []*upstream{newUpstream(t), newUpstream(t), newUpstream(t)}
	prefix, err := prefix.New("prefix", prefix.DefaultConfig(), prefix.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	queue, err := scorers.NewQueue("queue", scorers.DefaultQueueConfig(), scorers.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	// GIE default weights prefix 3 : queue 2; a calm pool (all queues 0)
	// leaves the prefix scorer to decide.
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{
		{Name: "prefix", Type: "prefix", Scorer: prefix, Weight: 3},
		{Name: "queue", Type: "queue", Scorer: queue, Weight: 2},
	}, []scheduler.Filter{scheduler.ModelFilter{}, scheduler.HealthyFilter{}}, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	setPool(s, ups[0].addr, ups[1].addr, ups[2].addr)
	h, err := NewHTTP(DefaultConfig(), Deps{Scheduler: s})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	system := strings.Repeat("You are a meticulous assistant. ", 40) // 1,280 bytes: 5 blocks of 256
	seen := map[string]int{}
	for i := 0; i < 12; i++ {
		body, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{
			{"role": "system", "content": system},
			{"role": "user", "content": "question number " + strings.Repeat("?", i)},
		}})
		resp := post(t, "http://"+addr+"/v1/chat/completions", string(body), nil)
		readAll(t, resp.Body)
		resp.Body.Close()
		seen[resp.Header.Get(HeaderEndpoint)]++
	}
	if len(seen) != 1 {
		t.Fatalf("12 requests sharing a system prompt went to %v, want one endpoint", seen)
	}
}

func TestHTTPModelsAndPassThrough(t *testing.T) {
	a, b := newUpstream(t), newUpstream(t)
	f := newFixture(t, nil, a.addr, b.addr)
	cfg := DefaultConfig()
	cfg.LoRAAdapters = map[string]string{"sql": "m", "orphan": "other"}
	h, err := NewHTTP(cfg, f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	resp, err := http.Get("http://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, resp.Body)
	resp.Body.Close()
	want := `{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"trimtab"},{"id":"sql","object":"model","created":0,"owned_by":"trimtab","parent":"m"}]}` + "\n"
	if got != want {
		t.Errorf("/v1/models = %s\nwant %s", got, want)
	}
	// Other /v1/* paths go to some fresh endpoint, query included.
	resp, err = http.Get("http://" + addr + "/v1/version?x=1")
	if err != nil {
		t.Fatal(err)
	}
	got = readAll(t, resp.Body)
	resp.Body.Close()
	ep := resp.Header.Get(HeaderEndpoint)
	if resp.StatusCode != 200 || (ep != a.addr && ep != b.addr) || !strings.Contains(got, `"server":"`+ep+`"`) || !strings.Contains(got, `"query":"x=1"`) {
		t.Errorf("pass-through: %d from %q: %s", resp.StatusCode, ep, got)
	}
	f.noMoreOutcomes(t)
}

func TestHTTPScoresHeaderAndDecisions(t *testing.T) {
	u := newUpstream(t)
	f := newFixture(t, nil, u.addr)
	cfg := DefaultConfig()
	cfg.HTTP.ScoresHeader = true
	h, err := NewHTTP(cfg, f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	resp := post(t, "http://"+addr+"/v1/completions", `{"model":"m","prompt":"x"}`, map[string]string{"X-Request-Id": "req-7"})
	readAll(t, resp.Body)
	resp.Body.Close()
	// one scorer "test" scoring 0.5 with weight 1: total 0.5
	if got := resp.Header.Get(HeaderScores); got != "total=0.5000; test=0.5000*1" {
		t.Errorf("x-trimtab-scores %q", got)
	}
	rec := f.rec.Recent()
	if len(rec) != 1 || rec[0].RequestID != "req-7" || rec[0].Chosen != u.addr {
		t.Errorf("recorded decisions %+v", rec)
	}
	f.outcome(t)
}

func TestHTTPDrainsInFlightStreamOnShutdown(t *testing.T) {
	u := newUpstream(t)
	u.gate = make(chan struct{})
	f := newFixture(t, nil, u.addr)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := start(t, h)
	resp := post(t, "http://"+addr+"/v1/completions", `{"model":"m","stream":true,"prompt":"x"}`, nil)
	defer resp.Body.Close()
	u.gate <- struct{}{}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	// Shutdown has begun; the stream keeps flowing to its end.
	for i := 1; i < u.events; i++ {
		u.gate <- struct{}{}
	}
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("stream during drain: %q, %v", rest, err)
	}
	<-stopped
	if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess {
		t.Errorf("outcome %+v", o)
	}
	// New connections are refused after shutdown.
	if resp, err := http.Get("http://" + addr + "/v1/models"); err == nil {
		resp.Body.Close()
		t.Error("server still accepts connections after Run returned")
	}
}

func TestHTTPMetricsExposition(t *testing.T) {
	live := newUpstream(t)
	dead := deadAddr(t)
	f := newFixture(t, preferOrder(dead, live.addr), dead, live.addr)
	deps := f.deps(t)
	// A clock that never moves makes every latency 0: the exposition is
	// deterministic.
	deps.Clock = clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h, err := NewHTTP(DefaultConfig(), deps)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	for _, body := range []string{`{"model":"m","prompt":"x"}`, `{"model":"m"`} {
		resp := post(t, "http://"+addr+"/v1/completions", body, nil)
		readAll(t, resp.Body)
		resp.Body.Close()
	}
	f.outcome(t)
	// request 1: connect error on dead (code 0), retried, 200 from live;
	// request 2: invalid JSON, rejected before a pick (endpoint none, 400).
	want := strings.NewReplacer("DEAD", dead, "LIVE", live.addr).Replace(`
# HELP trimtab_proxy_requests_total Requests by endpoint and HTTP status answered (endpoint "none": rejected before a pick; code 0: cut before any status).
# TYPE trimtab_proxy_requests_total counter
trimtab_proxy_requests_total{code="0",endpoint="DEAD"} 1
trimtab_proxy_requests_total{code="200",endpoint="LIVE"} 1
trimtab_proxy_requests_total{code="400",endpoint="none"} 1
# HELP trimtab_proxy_retries_total Requests moved to a fallback endpoint after a failure before any byte reached the client.
# TYPE trimtab_proxy_retries_total counter
trimtab_proxy_retries_total 1
`)
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), "trimtab_proxy_requests_total", "trimtab_proxy_retries_total"); err != nil {
		t.Error(err)
	}
	// One TTFB and one duration observation for the live endpoint, both 0.
	for _, name := range []string{"trimtab_proxy_ttfb_seconds", "trimtab_proxy_request_duration_seconds"} {
		mfs, _ := f.reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			if len(mf.Metric) != 1 || mf.Metric[0].GetHistogram().GetSampleCount() != 1 || mf.Metric[0].GetHistogram().GetSampleSum() != 0 {
				t.Errorf("%s: %v, want one series with one 0 s observation", name, mf.Metric)
			}
		}
	}
}

func TestHTTPDrainDeadlineCutsStreams(t *testing.T) {
	u := newUpstream(t)
	u.events, u.hold = 1, true // one event, then nothing until cancelled
	f := newFixture(t, nil, u.addr)
	cfg := DefaultConfig()
	cfg.DrainTimeout = 50 * time.Millisecond
	h, err := NewHTTP(cfg, f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := start(t, h)
	resp := post(t, "http://"+addr+"/v1/completions", `{"model":"m","stream":true,"prompt":"x"}`, nil)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stop() // returns only after the stream was cut and its handler returned
	<-u.cancelled
	if _, err := io.ReadAll(br); err == nil {
		t.Error("stream ended cleanly; want it cut at the drain deadline")
	}
	if o := f.outcome(t); o.Kind != scheduler.OutcomeCanceled {
		t.Errorf("outcome %+v, want canceled", o)
	}
	f.waitIdle(t)
}
