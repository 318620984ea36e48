package main

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
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

// TestServeFlowStatus: the admin server's /debug/flow, which the status
// page's flow-control card reads, says whether flow control is on and,
// when it is, lists the profile's bands.
func TestServeFlowStatus(t *testing.T) {
	for _, tt := range []struct {
		name, server string
		bands        []string
	}{
		{"off", "", nil},
		{"on", "flow:\n  enabled: true\n", []string{"interactive", "standard", "sheddable"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, adminURL := adminService(t, tt.server)
			resp, err := http.Get(adminURL + "/debug/flow")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var st struct {
				Enabled bool `json:"enabled"`
				Bands   []struct {
					Name string `json:"name"`
				} `json:"bands"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
				t.Fatalf("/debug/flow: %d, %v", resp.StatusCode, err)
			}
			var names []string
			for _, b := range st.Bands {
				names = append(names, b.Name)
			}
			if st.Enabled != (tt.bands != nil) || !slices.Equal(names, tt.bands) {
				t.Errorf("/debug/flow: enabled %v, bands %v; want %v, %v", st.Enabled, names, tt.bands != nil, tt.bands)
			}
		})
	}
}
