package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestHTTPForwardedFor: the endpoint sees the address the proxy's peer
// connected from in X-Forwarded-For. A peer outside http.trusted_proxies
// cannot forge it: its X-Forwarded-For and the other forwarding headers
// are dropped and the list starts afresh with the peer. A trusted peer's
// list is kept and the peer appended, as net/http/httputil.ReverseProxy
// does. Every test connection comes from 127.0.0.1, on the scheduled and
// the pass-through path alike.
func TestHTTPForwardedFor(t *testing.T) {
	tests := []struct {
		name    string
		trusted []string
		xff     []string          // the client's X-Forwarded-For lines
		other   map[string]string // the client's other forwarding headers
		want    string            // X-Forwarded-For at the endpoint
		kept    bool              // other headers reach the endpoint
	}{
		{name: "untrusted, forged list dropped", xff: []string{"1.2.3.4"}, want: "127.0.0.1"},
		{name: "untrusted, no list", want: "127.0.0.1"},
		{name: "untrusted, forwarding headers dropped", trusted: []string{"10.0.0.0/8"}, xff: []string{"1.2.3.4, 5.6.7.8"},
			other: map[string]string{"Forwarded": "for=1.2.3.4", "X-Forwarded-Host": "evil", "X-Forwarded-Proto": "https"}, want: "127.0.0.1"},
		{name: "trusted prefix, peer appended", trusted: []string{"127.0.0.0/8"}, xff: []string{"1.2.3.4"}, want: "1.2.3.4, 127.0.0.1"},
		{name: "trusted address, lines joined", trusted: []string{"::1", "127.0.0.1"}, xff: []string{"1.2.3.4", "5.6.7.8"},
			other: map[string]string{"X-Forwarded-Proto": "https"}, want: "1.2.3.4, 5.6.7.8, 127.0.0.1", kept: true},
		{name: "trusted, no list", trusted: []string{"127.0.0.1/32"}, want: "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t)
			f := newFixture(t, nil, u.addr)
			cfg := DefaultConfig()
			cfg.HTTP.TrustedProxies = tt.trusted
			h, err := NewHTTP(cfg, f.deps(t))
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := start(t, h)
			for _, path := range []string{"/v1/completions", "/v1/version"} {
				req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(`{"model":"m","prompt":"x"}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header["X-Forwarded-For"] = tt.xff
				for k, v := range tt.other {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("%s: status %d", path, resp.StatusCode)
				}
				got := u.lastHeader()
				if xff := got.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != tt.want {
					t.Errorf("%s: the endpoint saw X-Forwarded-For %q, want %q", path, xff, tt.want)
				}
				for k, v := range tt.other {
					if g := got.Get(k); (g == v) != tt.kept {
						t.Errorf("%s: the endpoint saw %s %q; client sent %q, kept: want %v", path, k, g, v, tt.kept)
					}
				}
			}
			f.waitIdle(t)
		})
	}
}
