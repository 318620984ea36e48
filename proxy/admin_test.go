package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

func TestAdmin(t *testing.T) {
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
	a.Handle("GET /ui", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ui")) }))
	addr, _ := start(t, a)
	resp := post(t, "http://"+proxyAddr+"/v1/completions", `{"model":"m","prompt":"x"}`, map[string]string{"X-Request-Id": "r9"})
	readAll(t, resp.Body)
	resp.Body.Close()
	f.outcome(t)

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, readAll(t, resp.Body)
	}
	tests := []struct {
		path     string
		wantCode int
		contains []string
	}{
		{"/healthz", 200, []string{"ok"}},
		{"/readyz", 200, []string{`"fresh_endpoints": 1`}},
		{"/debug/weights", 200, []string{`"version": 1`, `"mode": "static"`, `"name": "test"`, `"weight": 1`}},
		{"/debug/endpoints", 200, []string{`"address": "` + u.addr + `"`, `"state": "fresh"`, `"in_flight": 0`}},
		{"/debug/decisions", 200, []string{`"request_id": "r9"`, `"chosen": "` + u.addr + `"`}},
		{"/metrics", 200, []string{`trimtab_proxy_requests_total{code="200",endpoint="` + u.addr + `"} 1`, "trimtab_proxy_ttfb_seconds_bucket"}},
		{"/ui", 200, []string{"ui"}},
	}
	for _, tt := range tests {
		code, body := get(tt.path)
		if code != tt.wantCode {
			t.Errorf("%s: %d, want %d", tt.path, code, tt.wantCode)
		}
		for _, c := range tt.contains {
			if !strings.Contains(body, c) {
				t.Errorf("%s: body lacks %q:\n%s", tt.path, c, body)
			}
		}
		if strings.HasPrefix(tt.path, "/debug/") && !json.Valid([]byte(body)) {
			t.Errorf("%s: not JSON", tt.path)
		}
	}
	// No fresh endpoint: not ready.
	eps := []scheduler.Endpoint{{Address: u.addr, State: scheduler.StateStale}}
	f.sched.SetEndpoints(eps)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, `"fresh_endpoints": 0`) {
		t.Errorf("/readyz with only stale endpoints: %d %s", code, body)
	}
}

func TestRecorderRing(t *testing.T) {
	tests := []struct {
		name        string
		size, every int
		decisions   int
		want        []string // request ids, newest first
	}{
		// 5 decisions into 3 slots: the last 3 survive
		{name: "keeps the newest", size: 3, every: 1, decisions: 5, want: []string{"4", "3", "2"}},
		// every 2nd of 0…4 sampled: 0, 2, 4
		{name: "samples one in every", size: 8, every: 2, decisions: 5, want: []string{"4", "2", "0"}},
		{name: "size 0 records nothing", size: 0, every: 1, decisions: 3, want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRecorder(tt.size, tt.every)
			for i := 0; i < tt.decisions; i++ {
				if r.Sample() {
					r.Record(scheduler.Explanation{RequestID: string(rune('0' + i))})
				}
			}
			got := []string{}
			for _, x := range r.Recent() {
				got = append(got, x.RequestID)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("recent %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	// Lowering only max_connections keeps the profile valid: the per-client
	// default (1024) then never binds before the total (100) does.
	lowered := DefaultConfig()
	lowered.HTTP.MaxConnections = 100
	if err := lowered.Validate(); err != nil {
		t.Errorf("max_connections 100 with the default per-client cap: %v, want valid", err)
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"body limit", func(c *Config) { c.MaxBodyBytes = 0 }, "server.max_body_bytes"},
		{"retries", func(c *Config) { c.HTTP.Retries = -1 }, "server.http.retries"},
		{"http addr", func(c *Config) { c.HTTP.Addr = "" }, "server.http.addr"},
		{"body mode", func(c *Config) { c.ExtProc.RequestBodyMode = "streamed" }, "server.ext_proc.request_body_mode"},
		{"response mode", func(c *Config) { c.ExtProc.ResponseBodyMode = "x" }, "server.ext_proc.response_body_mode"},
		{"lora self", func(c *Config) { c.LoRAAdapters = map[string]string{"a": "a"} }, "server.lora_adapters"},
		{"decisions every", func(c *Config) { c.Admin.DecisionsEvery = 0 }, "server.admin.decisions_every"},
		{"body memory", func(c *Config) { c.BodyMemoryBytes = c.MaxBodyBytes - 1 }, "server.body_memory_bytes"},
		{"body timeout", func(c *Config) { c.BodyReadTimeout = 0 }, "server.body_read_timeout"},
		{"message size", func(c *Config) { c.ExtProc.MaxMessageBytes = c.MaxBodyBytes }, "server.ext_proc.max_message_bytes"},
		{"idle timeout", func(c *Config) { c.IdleTimeout = 0 }, "server.idle_timeout"},
		{"max connections", func(c *Config) { c.HTTP.MaxConnections = -1 }, "server.http.max_connections"},
		{"per-client connections", func(c *Config) { c.HTTP.MaxConnectionsPerClient = -1 }, "server.http.max_connections_per_client"},
		{"connect timeout", func(c *Config) { c.HTTP.ConnectTimeout = 0 }, "server.http.connect_timeout"},
		{"trusted proxy", func(c *Config) { c.HTTP.TrustedProxies = []string{"10.0.0.0/8", "10.0.0.300"} }, "server.http.trusted_proxies[1]"},
		{"trusted proxy zone", func(c *Config) { c.HTTP.TrustedProxies = []string{"fe80::1%eth0"} }, "server.http.trusted_proxies[0]"},
		{"trusted proxies", func(c *Config) { c.HTTP.TrustedProxies = make([]string, 1025) }, "server.http.trusted_proxies: 1025 entries"},
		{"stream idle timeout", func(c *Config) { c.HTTP.StreamIdleTimeout = 0 }, "server.http.stream_idle_timeout"},
		{"stream idle timeout bare number", func(c *Config) { c.HTTP.StreamIdleTimeout = 15 }, "server.http.stream_idle_timeout: 15ns"},
		{"stream idle timeout too long", func(c *Config) { c.HTTP.StreamIdleTimeout = 25 * time.Hour }, "server.http.stream_idle_timeout"},
		{"emit scores top", func(c *Config) { c.ExtProc.EmitScoresTop = 0 }, "server.ext_proc.emit_scores_top: 0, want 1…64"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want one naming %s", tt.name, err, tt.want)
		}
	}
}
