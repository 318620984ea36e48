package proxy

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestHTTPPassThroughRefusesDotSegmentsAndOddMethods: pass-through paths
// with dot segments, plain or percent-encoded, get 400 and never reach an
// endpoint; methods the OpenAI API does not use get 405; a path with
// doubled slashes is forwarded normalised.
func TestHTTPPassThroughRefusesDotSegmentsAndOddMethods(t *testing.T) {
	u := newUpstream(t)
	f := newFixture(t, nil, u.addr)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	tests := []struct {
		method, target string
		status         int
		code           string
	}{
		{"GET", "/v1/../metrics", 400, "invalid_path"},
		{"GET", "/v1/%2e%2e/metrics", 400, "invalid_path"},
		{"GET", "/v1/%2E%2e/metrics", 400, "invalid_path"},
		{"GET", "/v1/./version", 400, "invalid_path"},
		{"GET", "/v1/%2e/version", 400, "invalid_path"},
		{"GET", "/v1/tokenize/..", 400, "invalid_path"},
		{"GET", "/v1/a%2f..%2fmetrics", 400, "invalid_path"},
		{"POST", "/v1/completions/../../metrics", 400, "invalid_path"},
		{"PUT", "/v1/version", 405, "method_not_allowed"},
		{"PATCH", "/v1/version", 405, "method_not_allowed"},
		{"TRACE", "/v1/version", 405, "method_not_allowed"},
		{"OPTIONS", "/v1/version", 405, "method_not_allowed"},
		{"GET", "/v1//version", 200, ""},
		{"DELETE", "/v1/version", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			before := u.hits.Load()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: trimtab\r\nContent-Length: 0\r\n\r\n", tt.method, tt.target)
			resp, body := readResponse(t, c, 10*time.Second)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tt.status)
			}
			if tt.code != "" {
				if got := errorCode(t, body); got != tt.code {
					t.Errorf("code %q, want %q", got, tt.code)
				}
				if n := u.hits.Load() - before; n != 0 {
					t.Errorf("the endpoint got %d requests, want 0", n)
				}
				if tt.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
					t.Error("405 without Allow")
				}
				return
			}
			if u.hits.Load()-before != 1 {
				t.Errorf("endpoint hits %d, want 1", u.hits.Load()-before)
			}
			if want := "/v1/version"; u.lastPath() != want {
				t.Errorf("forwarded path %q, want %q", u.lastPath(), want)
			}
		})
	}
}
