package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestAdminDefaultBindsLoopback(t *testing.T) {
	if got := DefaultConfig().Admin.Addr; got != "127.0.0.1:9090" {
		t.Fatalf("default admin addr %q, want 127.0.0.1:9090 (loopback only)", got)
	}
	// The data-path servers keep listening on every interface.
	if c := DefaultConfig(); c.HTTP.Addr != ":8080" || c.ExtProc.Addr != ":9002" {
		t.Errorf("data-path defaults %q, %q; want :8080 and :9002", c.HTTP.Addr, c.ExtProc.Addr)
	}
}

// TestAdminToken: with server.admin.token set, /debug/* and /ui (and
// anything added with Handle) need it, as a bearer token or as the Basic
// password a browser sends; /metrics, /healthz and /readyz stay open.
func TestAdminToken(t *testing.T) {
	const token = "0123456789abcdef-admin"
	f := newFixture(t, nil, epA)
	cfg := DefaultConfig()
	cfg.Admin.Token = token
	a, err := NewAdmin(cfg, f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	a.Handle("GET /ui", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ui")) }))
	a.Handle("GET /ui/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ui asset")) }))
	a.Handle("GET /debug/history", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) }))
	addr, _ := start(t, a)

	const (
		none   = ""
		bearer = "Bearer " + token
		wrong  = "Bearer 0123456789abcdef-admiN"
		prefix = "Bearer 0123456789abcdef" // a prefix of the token is not the token
	)
	basic := func(user, pass string) string {
		req, _ := http.NewRequest(http.MethodGet, "/", nil)
		req.SetBasicAuth(user, pass)
		return req.Header.Get("Authorization")
	}
	tests := []struct {
		path, auth string
		want       int
	}{
		{"/metrics", none, 200},
		{"/healthz", none, 200},
		{"/readyz", none, 200},
		{"/debug/weights", none, 401},
		{"/debug/endpoints", none, 401},
		{"/debug/decisions", none, 401},
		{"/debug/history", none, 401},
		{"/ui", none, 401},
		{"/ui/app.js", none, 401},
		{"/debug/weights", wrong, 401},
		{"/debug/weights", prefix, 401},
		{"/debug/weights", "Bearer", 401},
		{"/debug/weights", token, 401}, // no scheme
		{"/debug/weights", basic("admin", "nope"), 401},
		{"/debug/weights", bearer, 200},
		{"/debug/weights", "bearer " + token, 200}, // the scheme is case-insensitive
		{"/debug/decisions", bearer, 200},
		{"/debug/history", bearer, 200},
		{"/ui", bearer, 200},
		{"/ui/app.js", bearer, 200},
		{"/ui", basic("anyone", token), 200},
		{"/metrics", wrong, 200},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("GET %s with %q: %d, want %d", tt.path, tt.auth, resp.StatusCode, tt.want)
			continue
		}
		if tt.want == 401 {
			ch := resp.Header.Values("WWW-Authenticate")
			if len(ch) == 0 || !strings.HasPrefix(ch[0], "Bearer ") {
				t.Errorf("GET %s with %q: WWW-Authenticate %q, want a Bearer challenge first", tt.path, tt.auth, ch)
			}
			if strings.Contains(body, token) {
				t.Errorf("GET %s: the 401 body shows the token", tt.path)
			}
		}
	}
}

func TestAdminTokenConfig(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"short token", func(c *Config) { c.Admin.Token = "short" }, "server.admin.token: 5 bytes, want at least 16"},
		{"token with space", func(c *Config) { c.Admin.Token = "0123456789 abcdef" }, "server.admin.token: must not contain spaces"},
		{"token and file", func(c *Config) { c.Admin.Token, c.Admin.TokenFile = "0123456789abcdef", "/run/secrets/t" }, "server.admin.token_file: set token or token_file, not both"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

// TestDebugDecisionsHashSessionIDs: /debug/decisions never shows a
// client's session id, only its 64-bit xxhash in hex, so decisions of one
// session can still be matched.
func TestDebugDecisionsHashSessionIDs(t *testing.T) {
	u := newUpstream(t)
	f := newFixture(t, nil, u.addr)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, _ := start(t, h)
	a, err := NewAdmin(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, a)
	for _, tc := range []struct {
		hdr  map[string]string
		body string
	}{
		{map[string]string{"X-Session-Id": "alice-session-42"}, `{"model":"m","prompt":"x"}`},
		{nil, `{"model":"m","prompt":"x","user":"bob@example.com"}`},
	} {
		resp := post(t, "http://"+proxyAddr+"/v1/completions", tc.body, tc.hdr)
		readAll(t, resp.Body)
		resp.Body.Close()
		f.outcome(t)
	}
	resp, err := http.Get("http://" + addr + "/debug/decisions")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp.Body)
	resp.Body.Close()
	for _, raw := range []string{"alice-session-42", "bob@example.com"} {
		if strings.Contains(body, raw) {
			t.Errorf("/debug/decisions shows the session id %q:\n%s", raw, body)
		}
		if want := fmt.Sprintf(`"session_id": "%016x"`, xxhash.Sum64String(raw)); !strings.Contains(body, want) {
			t.Errorf("/debug/decisions lacks %s:\n%s", want, body)
		}
	}
}
