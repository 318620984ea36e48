package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/scheduler"
)

// adminService builds (but does not run) a serve service over a static
// profile whose detector reads the scraped-load CV signal, and runs only
// its admin server on loopback. The test ticks the control loop itself,
// over pools it makes, so the signal is deterministic.
func adminService(t *testing.T, server string) (*service, string) {
	t.Helper()
	dir := t.TempDir()
	epsFile := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(epsFile, []byte("endpoints:\n  - address: 10.0.0.1:8000\n    models: [m]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(profileYAML(epsFile, 3, false), "  enabled: false\n", "  enabled: false\n  detector:\n    signal: cv\n    smoothing: 1\n", 1) + server
	f, err := configs.Load(writeProfile(t, dir, body))
	if err != nil {
		t.Fatal(err)
	}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	adminLn := listen()
	s, err := newService(f, serviceOptions{Logger: slog.New(slog.DiscardHandler), HTTP: listen(), Admin: adminLn, DisableExtProc: true, NoRuntimeM: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.admin.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("admin Run: %v", err)
		}
	})
	return s, "http://" + adminLn.Addr().String()
}

// loadedPool is three fresh endpoints with the given running counts.
func loadedPool(running ...float64) []*scheduler.Endpoint {
	eps := make([]*scheduler.Endpoint, len(running))
	for i, r := range running {
		eps[i] = &scheduler.Endpoint{Address: fmt.Sprintf("10.0.0.%d:8000", i+1), Models: []string{"m"}, State: scheduler.StateFresh, Running: r, Capacity: 1}
	}
	return eps
}

func getWeights(t *testing.T, adminURL string) (v struct {
	Version       uint64  `json:"version"`
	Signal        float64 `json:"signal"`
	WeightsSignal float64 `json:"weights_signal"`
	Scorers       []struct {
		Name       string  `json:"name"`
		Weight     float64 `json:"weight"`
		BaseWeight float64 `json:"base_weight"`
	} `json:"scorers"`
}) {
	t.Helper()
	resp, err := http.Get(adminURL + "/debug/weights")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/debug/weights: status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDebugWeightsShowsLiveSignalAndReloadedBase: /debug/weights reports
// the signal of the loop's latest tick (not of the tick that published
// the weights in force) and, after a reload, the reloaded profile's base
// weights.
func TestDebugWeightsShowsLiveSignalAndReloadedBase(t *testing.T) {
	s, adminURL := adminService(t, "")
	t0 := time.Unix(1_700_000_000, 0)

	// Tick 1 on an idle pool: static mode publishes the profile weights
	// with signal 0 (total load 0 < min_load 5: gate low_load).
	s.loop.Tick(t0, loadedPool(0, 0, 0))
	first := getWeights(t, adminURL)
	if first.Signal != 0 {
		t.Fatalf("idle pool: signal %v, want 0", first.Signal)
	}

	// Tick 2 on a pool with all load on one endpoint: loads 30, 0, 0,
	// mean 10, population σ = √((400+100+100)/3) = 14.14, CV 1.414,
	// normalised CV/√(N−1) = 1.414/1.414 = 1. Static weights do not
	// change, so the publication's signal stays 0.
	tk := s.loop.Tick(t0.Add(time.Second), loadedPool(30, 0, 0))
	if tk.Changed() || tk.Signal.Value < 0.99 {
		t.Fatalf("tick 2: changed %v, signal %v; want no new version and signal ≈ 1", tk.Changed(), tk.Signal.Value)
	}
	live := getWeights(t, adminURL)
	if live.Signal != tk.Signal.Value {
		t.Errorf("/debug/weights signal %v, want the latest tick's %v", live.Signal, tk.Signal.Value)
	}
	if live.WeightsSignal != 0 || live.Version != first.Version {
		t.Errorf("weights_signal %v version %d, want the publication's 0 and version %d", live.WeightsSignal, live.Version, first.Version)
	}

	// A reload to prefix weight 5: base_weight follows once the loop has
	// applied it, as does weight (static mode publishes the base).
	f := *s.running
	f.Scorers = append([]configs.ScorerConfig(nil), s.running.Scorers...)
	five := 5.0
	f.Scorers[0].Weight = &five
	if err := s.reload(&f); err != nil {
		t.Fatal(err)
	}
	s.loop.Tick(t0.Add(2*time.Second), loadedPool(30, 0, 0))
	after := getWeights(t, adminURL)
	if got := after.Scorers[0]; got.Name != "prefix" || got.BaseWeight != 5 || got.Weight != 5 {
		t.Errorf("after reload: %+v, want prefix with base_weight 5 and weight 5", got)
	}
	if got := after.Scorers[1]; got.BaseWeight != 2 {
		t.Errorf("after reload: %+v, want queue base_weight 2", got)
	}
}

// TestServeAdminTokenFile: server.admin.token_file is read at start (white
// space trimmed) and then guards /debug/* and /ui; /metrics stays open. A
// missing or empty file is an error naming the key.
func TestServeAdminTokenFile(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	const token = "9f2c1e7a5b3d4c6e8a0b"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, adminURL := adminService(t, fmt.Sprintf("server:\n  admin:\n    token_file: %s\n", tokenFile))
	s.loop.Tick(time.Unix(1_700_000_000, 0), loadedPool(0, 0, 0))
	get := func(path, auth string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, adminURL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tt := range []struct {
		path, auth string
		want       int
	}{
		{"/metrics", "", 200},
		{"/healthz", "", 200},
		{"/debug/weights", "", 401},
		{"/debug/history", "", 401},
		{"/ui", "", 401},
		{"/debug/weights", "Bearer " + token, 200},
		{"/debug/history", "Bearer " + token, 200},
		{"/ui", "Bearer " + token, 200},
	} {
		if got := get(tt.path, tt.auth); got != tt.want {
			t.Errorf("GET %s with %q: %d, want %d", tt.path, tt.auth, got, tt.want)
		}
	}

	for _, tt := range []struct{ name, content, want string }{
		{"missing", "", "server.admin.token_file"},
		{"empty", " \n", "server.admin.token_file: " + filepath.Join(dir, "empty") + " is empty"},
	} {
		path := filepath.Join(dir, tt.name)
		if tt.content != "" {
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_, err := configs.Parse([]byte("scorers:\n  - type: queue\n    weight: 1\nserver:\n  admin:\n    token_file: " + path + "\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s token file: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}
