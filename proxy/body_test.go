package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// rawPost opens a connection to addr and sends a POST to path that
// declares a Content-Length of declared bytes, followed by the first
// sent bytes of the body; the rest is never sent.
func rawPost(t *testing.T, addr, path string, declared int, sent string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: trimtab\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, declared, sent)
	return c
}

// readResponse reads one HTTP response from c, waiting at most wait.
func readResponse(t *testing.T, c net.Conn, wait time.Duration) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response within %v: %v", wait, err)
	}
	defer resp.Body.Close()
	return resp, readAll(t, resp.Body)
}

// TestHTTPBodyGrowsWithBytesReceived: eight clients each declare a 16 MiB
// body and send one byte. The proxy's memory grows with the bytes that
// arrived, not with the declared length (8 × 16 MiB = 128 MiB before),
// and the body read deadline answers each with 408, on the scheduled and
// the pass-through path alike.
func TestHTTPBodyGrowsWithBytesReceived(t *testing.T) {
	for _, path := range []string{"/v1/completions", "/v1/tokenize"} {
		t.Run(strings.TrimPrefix(path, "/v1/"), func(t *testing.T) {
			u := newUpstream(t)
			f := newFixture(t, nil, u.addr)
			cfg := DefaultConfig()
			cfg.BodyReadTimeout = 500 * time.Millisecond
			h, err := NewHTTP(cfg, f.deps(t))
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := start(t, h)
			const clients = 8
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			conns := make([]net.Conn, clients)
			for i := range conns {
				conns[i] = rawPost(t, addr, path, 16<<20, "{")
			}
			for _, c := range conns {
				resp, body := readResponse(t, c, 10*time.Second)
				if resp.StatusCode != http.StatusRequestTimeout || errorCode(t, body) != "body_timeout" {
					t.Errorf("slow body: %d %s, want 408 body_timeout", resp.StatusCode, body)
				}
			}
			runtime.ReadMemStats(&after)
			// Each request may reserve its first 32 KiB step: 8 × 32 KiB =
			// 256 KiB, far under 16 MiB, let alone 8 × 16 MiB.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("%d clients that sent 1 byte each made the proxy allocate %d MiB", clients, grew>>20)
			}
			if n := h.budget.used.Load(); n != 0 {
				t.Errorf("body memory in use after every request ended: %d bytes, want 0", n)
			}
			if u.hits.Load() != 0 {
				t.Errorf("upstream got %d requests, want 0", u.hits.Load())
			}
		})
	}
}

// TestHTTPBodyMemoryBudget: bodies share one memory budget. Two clients
// hold 100 KiB each of a declared 128 KiB body, which reserves 2 × 128
// KiB = the whole 256 KiB budget, so a third request is answered 503
// body_memory_exhausted with Retry-After; once one of them goes away,
// requests get through again.
func TestHTTPBodyMemoryBudget(t *testing.T) {
	u := newUpstream(t)
	f := newFixture(t, nil, u.addr)
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 128 << 10
	cfg.BodyMemoryBytes = 256 << 10
	h, err := NewHTTP(cfg, f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	prefix := `{"model":"m","prompt":"` + strings.Repeat("x", 100<<10)
	holders := []net.Conn{rawPost(t, addr, "/v1/completions", 128<<10, prefix), rawPost(t, addr, "/v1/completions", 128<<10, prefix)}
	deadline := time.Now().Add(10 * time.Second)
	for h.budget.used.Load() < 256<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("body memory in use %d, want the whole budget %d", h.budget.used.Load(), 256<<10)
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp := post(t, "http://"+addr+"/v1/completions", `{"model":"m","prompt":"hi"}`, nil)
	body := readAll(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, body) != "body_memory_exhausted" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over budget: %d %s (Retry-After %q), want 503 body_memory_exhausted with Retry-After", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	holders[0].Close()
	for h.budget.used.Load() > 128<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("body memory in use %d after a holder left, want ≤ %d", h.budget.used.Load(), 128<<10)
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp = post(t, "http://"+addr+"/v1/completions", `{"model":"m","prompt":"hi"}`, nil)
	body = readAll(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after a holder left: %d %s, want 200", resp.StatusCode, body)
	}
}

// TestDefaultsBoundTheDataPath: the shipped defaults limit concurrency
// and body memory, and time bodies out.
func TestDefaultsBoundTheDataPath(t *testing.T) {
	c := DefaultConfig()
	if c.HTTP.MaxInFlight <= 0 || c.ExtProc.MaxInFlight <= 0 {
		t.Errorf("max_in_flight defaults http %d, ext_proc %d: want a limit", c.HTTP.MaxInFlight, c.ExtProc.MaxInFlight)
	}
	if c.BodyReadTimeout <= 0 || c.BodyMemoryBytes < c.MaxBodyBytes {
		t.Errorf("body_read_timeout %v, body_memory_bytes %d: want a deadline and a budget ≥ max_body_bytes", c.BodyReadTimeout, c.BodyMemoryBytes)
	}
}

// TestExtProcBodyMemoryBudget: ext_proc bodies are charged to the same
// kind of budget. One stream holds 60 KiB of a 64 KiB budget, so a
// second stream's 10 KiB body is answered 503 body_memory_exhausted; the
// held bytes are given back when the first stream ends.
func TestExtProcBodyMemoryBudget(t *testing.T) {
	f := newFixture(t, nil, epA)
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 64 << 10
	cfg.BodyMemoryBytes = 64 << 10
	c, e, _ := startExtProc(t, cfg, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := openStream(t, ctx, c)
	first.send(requestHeaders(false, nil, duplex))
	first.send(requestBody([]byte(`{"model":"m","prompt":"`+strings.Repeat("x", 60<<10)), false))
	deadline := time.Now().Add(10 * time.Second)
	for e.budget.used.Load() < 60<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("body memory in use %d, want ≥ 60 KiB", e.budget.used.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	second := openStream(t, context.Background(), c)
	second.send(requestHeaders(false, nil, duplex))
	second.send(requestBody([]byte(`{"model":"m","prompt":"`+strings.Repeat("y", 10<<10)+`"}`), true))
	checkImmediate(t, second.recv(), 503, "body_memory_exhausted", true)
	cancel()
	for e.budget.used.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("body memory in use %d after the streams ended, want 0", e.budget.used.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
