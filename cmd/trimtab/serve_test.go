package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/sim/fakeserver"
)

// startFakeFleet runs n simulated vLLM servers on loopback (10× real
// time) until the test ends and returns their addresses.
func startFakeFleet(t *testing.T, n int) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, n)
	t.Cleanup(func() {
		cancel()
		for i := 0; i < n; i++ {
			<-done
		}
	})
	addrs := make([]string, n)
	for i := range addrs {
		cfg := fakeserver.DefaultConfig()
		cfg.Name = fmt.Sprintf("fake-%d", i)
		cfg.TimeScale = 10
		srv, err := fakeserver.New(cfg, fakeserver.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = ln.Addr().String()
		go func() {
			_ = srv.Serve(ctx, ln)
			done <- struct{}{}
		}()
	}
	return addrs
}

// testService is a running `serve` with its three listeners.
type testService struct {
	svc                *service
	proxyURL, adminURL string
	profile            string
	stop               func() error
}

func writeProfile(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "profile.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func profileYAML(endpointsFile string, prefixWeight int, adaptive bool) string {
	return fmt.Sprintf(`scorers:
  - type: prefix
    weight: %d
  - type: queue
    weight: 2
  - type: kvcache
    weight: 2
  - type: inflight
    weight: 1
adaptive:
  enabled: %v
endpoints:
  mode: static
  file: %s
scrape:
  interval: 50ms
`, prefixWeight, adaptive, endpointsFile)
}

func startService(t *testing.T, addrs []string, adaptive bool, opts ...func(*serviceOptions)) *testService {
	t.Helper()
	return startServiceWith(t, addrs, adaptive, "", opts...)
}

// startServiceWith is startService with extra appended to the profile
// (top-level sections the profile does not set, such as server:).
func startServiceWith(t *testing.T, addrs []string, adaptive bool, extra string, opts ...func(*serviceOptions)) *testService {
	t.Helper()
	dir := t.TempDir()
	var eps strings.Builder
	eps.WriteString("endpoints:\n")
	for _, a := range addrs {
		fmt.Fprintf(&eps, "  - address: %s\n    models: [llama-3.1-8b-instruct]\n", a)
	}
	epsFile := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(epsFile, []byte(eps.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	body := profileYAML(epsFile, 3, adaptive) // the field's static 3:2:2(:1)
	if adaptive {
		// Calm weights affinity-heavy, as in configs/adaptive.yaml. The fake
		// servers run 10× faster than real ones and every pod soon holds the
		// hot prefix, so a burst never herds router-side (the herd signal
		// stays near 0, as it should); these tests exercise the loop's
		// wiring end to end, so they read the scraped-load CV signal, which
		// the burst's queue imbalance does move.
		body = strings.Replace(profileYAML(epsFile, 16, true), "  enabled: true\n", "  enabled: true\n  detector:\n    signal: cv\n", 1)
	}
	path := writeProfile(t, dir, body+extra)
	f, err := configs.Load(path)
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
	httpLn, adminLn := listen(), listen()
	opt := serviceOptions{
		Logger: slog.New(slog.DiscardHandler), HTTP: httpLn, Admin: adminLn, ExtProc: listen(), NoRuntimeM: true,
	}
	for _, o := range opts {
		o(&opt)
	}
	svc, err := newService(f, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- svc.Run(ctx) }()
	ts := &testService{svc: svc, proxyURL: "http://" + httpLn.Addr().String(), adminURL: "http://" + adminLn.Addr().String(), profile: path}
	stopped := false
	ts.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-errc:
			return err
		case <-time.After(20 * time.Second):
			return fmt.Errorf("serve did not stop within 20s of cancellation")
		}
	}
	t.Cleanup(func() { _ = ts.stop() })
	eventually(t, 10*time.Second, "readyz", func() bool {
		resp, err := http.Get(ts.adminURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return ts
}

func eventually(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestServeEndToEnd(t *testing.T) {
	addrs := startFakeFleet(t, 3)
	ts := startService(t, addrs, true)

	t.Run("completion", func(t *testing.T) {
		resp, body := post(t, ts.proxyURL+"/v1/completions", `{"model":"llama-3.1-8b-instruct","prompt":"hello","max_tokens":4}`)
		if resp.StatusCode != 200 || !strings.Contains(body, `"text_completion"`) {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
		if ep := resp.Header.Get("x-trimtab-endpoint"); !slices.Contains(addrs, ep) {
			t.Errorf("x-trimtab-endpoint %q is not one of %v", ep, addrs)
		}
	})

	t.Run("streaming chat", func(t *testing.T) {
		resp, body := post(t, ts.proxyURL+"/v1/chat/completions",
			`{"model":"llama-3.1-8b-instruct","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}`)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		// Five tokens → five chunks, then [DONE].
		if n := strings.Count(body, "data: {"); n != 5 || !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
			t.Errorf("%d chunks, body %s", n, body)
		}
	})

	t.Run("unknown model", func(t *testing.T) {
		resp, body := post(t, ts.proxyURL+"/v1/completions", `{"model":"gpt-9","prompt":"x"}`)
		if resp.StatusCode != 404 || !strings.Contains(body, `"error"`) {
			t.Errorf("status %d body %s", resp.StatusCode, body)
		}
	})

	t.Run("shared system prompt sticks while calm", func(t *testing.T) {
		system := strings.Repeat("You are a careful assistant for the trimtab project. ", 40) // ≈ 2 KB
		seen := map[string]int{}
		for i := 0; i < 8; i++ {
			body := fmt.Sprintf(`{"model":"llama-3.1-8b-instruct","max_tokens":2,"messages":[{"role":"system","content":%q},{"role":"user","content":"question %d"}]}`, system, i)
			resp, _ := post(t, ts.proxyURL+"/v1/chat/completions", body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			seen[resp.Header.Get("x-trimtab-endpoint")]++
		}
		if len(seen) != 1 {
			t.Errorf("8 requests sharing a 2 KB system prompt went to %d endpoints: %v", len(seen), seen)
		}
	})

	t.Run("metrics and debug views", func(t *testing.T) {
		resp, err := http.Get(ts.adminURL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, name := range []string{
			"trimtab_scheduler_picks_total", "trimtab_detector_signal_ratio", "trimtab_scheduler_weights_version",
			"trimtab_configurator_mode", "trimtab_proxy_requests_total", "trimtab_fleet_scrape_duration_seconds",
		} {
			if !strings.Contains(string(b), name) {
				t.Errorf("/metrics has no %s", name)
			}
		}
		for _, path := range []string{"/debug/weights", "/debug/endpoints", "/debug/decisions", "/debug/history"} {
			resp, err := http.Get(ts.adminURL + path)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if resp.StatusCode != 200 || err != nil {
				t.Errorf("%s: status %d, JSON error %v", path, resp.StatusCode, err)
			}
		}
		resp, err = http.Get(ts.adminURL + "/ui")
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "<html") {
			t.Errorf("/ui: status %d", resp.StatusCode)
		}
	})

	if err := ts.stop(); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func TestServeReload(t *testing.T) {
	addrs := startFakeFleet(t, 2)
	ts := startService(t, addrs, false)
	prefixWeight := func() float64 { return ts.svc.sched.Weights().Values[0] }
	eventually(t, 5*time.Second, "static weights published", func() bool { return prefixWeight() == 3 })
	f, err := configs.Load(ts.profile)
	if err != nil {
		t.Fatal(err)
	}
	epsFile := f.Fleet.Endpoints.File

	// The real watcher: edits of the profile file are picked up.
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	watched, ready := make(chan error, 1), make(chan struct{})
	watch := configs.Watch{Path: ts.profile, Apply: ts.svc.reload, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Ready: func() { close(ready) }}
	go func() { watched <- watch.Run(ctx) }()
	defer func() { cancel(); <-watched }()
	<-ready

	// A bad edit is refused, says why, and the running weights stay.
	writeProfile(t, filepath.Dir(ts.profile), strings.Replace(profileYAML(epsFile, 3, false), "weight: 2", "weight: -2", 1))
	eventually(t, 5*time.Second, "refusal logged", func() bool {
		return strings.Contains(logs.String(), "profile reload refused") && strings.Contains(logs.String(), "weight: must be a finite number")
	})
	if prefixWeight() != 3 {
		t.Errorf("a refused reload changed the weights")
	}

	// A change that needs a restart is refused, naming the section.
	changed := *f
	changed.Scorers = changed.Scorers[:3]
	if err := ts.svc.reload(&changed); err == nil || !strings.Contains(err.Error(), "scorers") {
		t.Errorf("reload with a scorer removed: %v, want a refusal naming scorers", err)
	}

	// New weights apply at once (static mode publishes them as they are).
	writeProfile(t, filepath.Dir(ts.profile), profileYAML(epsFile, 5, false))
	eventually(t, 5*time.Second, "reloaded prefix weight 5", func() bool { return prefixWeight() == 5 })
	resp, _ := post(t, ts.proxyURL+"/v1/completions", `{"model":"llama-3.1-8b-instruct","prompt":"after reload","max_tokens":2}`)
	if resp.StatusCode != 200 {
		t.Errorf("after reload: status %d", resp.StatusCode)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeReloadRefusesOverflowingWeight: a weight that is finite but
// whose derived weights overflow (1e308) is refused by a reload, which
// names the field, and the running weights stay in force.
func TestServeReloadRefusesOverflowingWeight(t *testing.T) {
	addrs := startFakeFleet(t, 2)
	ts := startService(t, addrs, false)
	prefixWeight := func() float64 { return ts.svc.sched.Weights().Values[0] }
	eventually(t, 5*time.Second, "static weights published", func() bool { return prefixWeight() == 3 })
	f, err := configs.Load(ts.profile)
	if err != nil {
		t.Fatal(err)
	}

	// Through the file watcher: the edited file is refused when loaded.
	huge := strings.Replace(profileYAML(f.Fleet.Endpoints.File, 3, false), "weight: 2", "weight: 1e308", 1)
	if _, err := configs.Parse([]byte(huge)); err == nil || !strings.Contains(err.Error(), "scorers[1] (queue).weight: 1e+308 is above the maximum") {
		t.Errorf("profile with weight 1e308: %v, want a refusal naming scorers[1] (queue).weight", err)
	}

	// Through reload itself, with a profile that skipped Load.
	changed := *f
	changed.Scorers = slices.Clone(f.Scorers)
	w := 1e308
	changed.Scorers[1].Weight = &w
	running := ts.svc.running
	if err := ts.svc.reload(&changed); err == nil || !strings.Contains(err.Error(), "scorers[1] (queue).weight") {
		t.Errorf("reload with weight 1e308: %v, want a refusal naming scorers[1] (queue).weight", err)
	}
	if ts.svc.running != running {
		t.Errorf("a refused reload replaced the running profile")
	}
	// Three control ticks after the refusal: had the reload gone through,
	// the first would have applied it.
	refused := ts.svc.loop.Last()
	eventually(t, 5*time.Second, "three ticks after the refusal", func() bool {
		last := ts.svc.loop.Last()
		return refused != nil && last != nil && last.At.Sub(refused.At) >= 3*ts.svc.loop.Interval()
	})
	if got := ts.svc.sched.Weights().Values; got[0] != 3 || got[1] != 2 {
		t.Errorf("weights after the refused reload %v, want the running 3, 2, …", got)
	}
}
