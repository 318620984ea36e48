package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// keepAlive opens a connection to addr, makes one GET /v1/models on it
// and leaves it open and idle.
func keepAlive(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	br := bufio.NewReader(c)
	fmt.Fprint(c, "GET /v1/models HTTP/1.1\r\nHost: trimtab\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("keep-alive request: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("keep-alive request: status %d", resp.StatusCode)
	}
	return c, br
}

// TestHTTPConnectionCap: with http.max_connections 4, four idle
// keep-alive connections fill the cap and a fifth is refused with 503 (or
// cut) without reaching an endpoint; once one of the four closes, a new
// connection is served.
func TestHTTPConnectionCap(t *testing.T) {
	u := newUpstream(t)
	f := newFixture(t, nil, u.addr)
	cfg := DefaultConfig()
	cfg.HTTP.MaxConnections = 4
	h, err := NewHTTP(cfg, f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	var held []net.Conn
	for i := 0; i < 4; i++ {
		c, _ := keepAlive(t, addr)
		held = append(held, c)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /v1/version HTTP/1.1\r\nHost: trimtab\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("fifth connection over a cap of 4: status %d, want 503 or a closed connection", resp.StatusCode)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("fifth connection over a cap of 4 was left waiting: %v", err)
	}
	if u.hits.Load() != 0 {
		t.Errorf("endpoint got %d requests, want 0", u.hits.Load())
	}
	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v1/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection served after one of the four closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestHTTPIdleTimeout: an idle keep-alive connection is closed by the
// server after idle_timeout.
func TestHTTPIdleTimeout(t *testing.T) {
	f := newFixture(t, nil, epA)
	cfg := DefaultConfig()
	cfg.IdleTimeout = 200 * time.Millisecond
	h, err := NewHTTP(cfg, f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	c, br := keepAlive(t, addr)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection after 5s: %v, want closed by the server (EOF) after 200ms", err)
	}
	if d := DefaultConfig().IdleTimeout; d <= 0 || d > 60*time.Second {
		t.Errorf("default idle_timeout %v, want a short one (≤ 60s)", d)
	}
	if DefaultConfig().HTTP.MaxConnections <= 0 {
		t.Error("default http.max_connections is unlimited")
	}
}
