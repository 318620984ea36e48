package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
	cfg.HTTP.MaxConnectionsPerClient = 0 // every test connection comes from 127.0.0.1
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
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(refusedMetric(1, 0)), "trimtab_proxy_connections_refused_total"); err != nil {
		t.Error(err)
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

// refusedMetric renders trimtab_proxy_connections_refused_total with total
// and perClient refusals.
func refusedMetric(total, perClient int) string {
	return `# HELP trimtab_proxy_connections_refused_total Client connections refused on arrival, by the cap they were over (max_connections: the proxy's; max_connections_per_client: their address's).
# TYPE trimtab_proxy_connections_refused_total counter
trimtab_proxy_connections_refused_total{reason="max_connections"} ` + strconv.Itoa(total) + `
trimtab_proxy_connections_refused_total{reason="max_connections_per_client"} ` + strconv.Itoa(perClient) + "\n"
}

// served polls (bounded) until a new connection to addr gets 200 for a
// pass-through request.
func served(t *testing.T, addr, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + "/v1/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no new connection served within 10s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHTTPConnectionCapPerClient: with http.max_connections_per_client 2,
// one client address (every test connection comes from 127.0.0.1) holding
// two idle keep-alive connections gets its third answered 429
// too_many_client_connections with Retry-After and closed, without
// reaching an endpoint, while the proxy's total cap (4096) is far off;
// once one of the two closes, a new connection is served. A peer in
// http.trusted_proxies carries many clients and is exempt.
func TestHTTPConnectionCapPerClient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted []string
		refused bool
	}{
		{name: "capped", refused: true},
		{name: "trusted proxy exempt", trusted: []string{"127.0.0.0/8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t)
			f := newFixture(t, nil, u.addr)
			cfg := DefaultConfig()
			cfg.HTTP.MaxConnectionsPerClient = 2
			cfg.HTTP.TrustedProxies = tc.trusted
			h, err := NewHTTP(cfg, f.deps(t))
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := start(t, h)
			held, _ := keepAlive(t, addr)
			keepAlive(t, addr)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !tc.refused {
				// A refused connection is answered on arrival; sending
				// nothing leaves no unread bytes that would make the
				// close a reset.
				fmt.Fprint(c, "GET /v1/version HTTP/1.1\r\nHost: trimtab\r\n\r\n")
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("third connection: %v, want an answer", err)
			}
			body := readAll(t, resp.Body)
			resp.Body.Close()
			refusals := 0
			if tc.refused {
				refusals = 1
				if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || errorCode(t, body) != "too_many_client_connections" {
					t.Errorf("third connection from one address over a cap of 2: %d (Retry-After %q) %s; want 429 too_many_client_connections, Retry-After 1",
						resp.StatusCode, resp.Header.Get("Retry-After"), body)
				}
				if _, err := br.ReadByte(); err != io.EOF {
					t.Errorf("refused connection: read %v, want closed (EOF)", err)
				}
				if n := u.hits.Load(); n != 0 {
					t.Errorf("endpoint got %d requests, want 0", n)
				}
			} else if resp.StatusCode != 200 {
				t.Errorf("third connection from a trusted proxy: %d %s, want 200", resp.StatusCode, body)
			}
			if err := testutil.GatherAndCompare(f.reg, strings.NewReader(refusedMetric(0, refusals)), "trimtab_proxy_connections_refused_total"); err != nil {
				t.Error(err)
			}
			held.Close()
			served(t, addr, "after one of the client's connections closed")
		})
	}
}
