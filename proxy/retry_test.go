package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trimtab/trimtab/scheduler"
)

// dyingUpstream accepts each request, reads it whole, then closes the
// connection without sending a byte of response: a model server killed
// between accepting a request and answering it.
func dyingUpstream(t *testing.T) (addr string, hits *atomic.Int64) {
	hits = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		hits.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), hits
}

// TestHTTPRetriesUpstreamDyingBeforeHeaders: an endpoint that accepted the
// request and died before sending its headers is retried on the
// decision's fallback, on the scheduled and the pass-through path; when
// every endpoint dies, the 502 names the last endpoint tried.
func TestHTTPRetriesUpstreamDyingBeforeHeaders(t *testing.T) {
	t.Run("fallback answers", func(t *testing.T) {
		dying, hits := dyingUpstream(t)
		live := newUpstream(t)
		f := newFixture(t, preferOrder(dying, live.addr), dying, live.addr)
		h, err := NewHTTP(DefaultConfig(), f.deps(t))
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := start(t, h)
		resp := post(t, "http://"+addr+"/v1/completions", `{"model":"m","prompt":"x"}`, nil)
		body := readAll(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get(HeaderEndpoint) != live.addr {
			t.Fatalf("status %d from %q: %s; want 200 from the fallback %s", resp.StatusCode, resp.Header.Get(HeaderEndpoint), body, live.addr)
		}
		if hits.Load() != 1 || testutil.ToFloat64(h.m.retries) != 1 {
			t.Errorf("dying endpoint hit %d times, retries %v; want 1 and 1", hits.Load(), testutil.ToFloat64(h.m.retries))
		}
		if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess {
			t.Errorf("outcome %+v, want success", o)
		}
		f.noMoreOutcomes(t)
		f.waitIdle(t)
	})
	t.Run("pass-through fallback answers", func(t *testing.T) {
		dying, _ := dyingUpstream(t)
		live := newUpstream(t)
		f := newFixture(t, nil, dying, live.addr)
		h, err := NewHTTP(DefaultConfig(), f.deps(t))
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := start(t, h)
		// Round robin starts on either endpoint: two requests make sure
		// one of them starts on the dying one.
		for i := 0; i < 2; i++ {
			resp := post(t, "http://"+addr+"/v1/version", `{}`, nil)
			body := readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get(HeaderEndpoint) != live.addr {
				t.Fatalf("request %d: status %d from %q: %s; want 200 from %s", i, resp.StatusCode, resp.Header.Get(HeaderEndpoint), body, live.addr)
			}
		}
	})
	t.Run("all die", func(t *testing.T) {
		a, _ := dyingUpstream(t)
		b, _ := dyingUpstream(t)
		f := newFixture(t, preferOrder(a, b), a, b)
		h, err := NewHTTP(DefaultConfig(), f.deps(t))
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := start(t, h)
		for _, path := range []string{"/v1/completions", "/v1/version"} {
			resp := post(t, "http://"+addr+path, `{"model":"m","prompt":"x"}`, nil)
			body := readAll(t, resp.Body)
			resp.Body.Close()
			ep := resp.Header.Get(HeaderEndpoint)
			if resp.StatusCode != http.StatusBadGateway || errorCode(t, body) != "upstream_unreachable" || (ep != a && ep != b) {
				t.Errorf("%s: status %d, %s: %s; want 502 upstream_unreachable naming %s or %s", path, resp.StatusCode, HeaderEndpoint, ep, a, b)
			}
		}
		if o := f.outcome(t); o.Kind != scheduler.OutcomeError {
			t.Errorf("outcome %+v, want error", o)
		}
		f.waitIdle(t)
	})
}
