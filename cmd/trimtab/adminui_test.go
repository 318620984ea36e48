package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestServeUIWarnsOpenAdmin: serve tells the status page how the admin
// server listens: configured on every interface without a token, /ui
// shows the warning banner; on loopback (the default) or with a token,
// none. (The tests' listeners are on 127.0.0.1 whatever the setting.)
func TestServeUIWarnsOpenAdmin(t *testing.T) {
	for _, tt := range []struct {
		name, server string
		warn         bool
	}{
		{"every interface, no token", "server:\n  admin:\n    addr: \":9090\"\n", true},
		{"every interface, token", "server:\n  admin:\n    addr: \":9090\"\n    token: 0123456789abcdef-admin\n", false},
		{"loopback default", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, adminURL := adminService(t, tt.server)
			req, _ := http.NewRequest(http.MethodGet, adminURL+"/ui/", nil)
			req.Header.Set("Authorization", "Bearer 0123456789abcdef-admin")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("/ui/: %d", resp.StatusCode)
			}
			if got := strings.Contains(string(body), `id="admin-open"`); got != tt.warn {
				t.Errorf("banner %v, want %v", got, tt.warn)
			}
		})
	}
}
