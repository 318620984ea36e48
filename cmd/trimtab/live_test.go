package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/trimtab/trimtab/internal/dashboards"
	"github.com/trimtab/trimtab/internal/loadgen"
	"github.com/trimtab/trimtab/internal/status"
	"github.com/trimtab/trimtab/internal/testenv"
)

// TestLiveDashboardAndStatusPage runs serve in front of simulated vLLM
// servers under a short hot-prefix burst, then checks what operators look
// at: a real Prometheus server scrapes trimtab and the model servers, and
// every query of the Grafana dashboard returns data through its HTTP API;
// and the status page, opened in a real headless Chromium, fills its chart
// and tables with live data. A screenshot is saved (TRIMTAB_SCREENSHOT_DIR,
// else the test's temp dir). It needs both programs (see internal/testenv).
func TestLiveDashboardAndStatusPage(t *testing.T) {
	promBin := testenv.Program(t, "prometheus", "apt-get install prometheus (./test.sh does it on Debian)")
	chromium := testenv.Program(t, "chromium", "apt-get install chromium (./test.sh does it on Debian)")
	addrs := startFakeFleet(t, 4)
	ts := startService(t, addrs, true)
	admin := strings.TrimPrefix(ts.adminURL, "http://")

	promURL := startPrometheus(t, promBin, admin, addrs)
	// Counters must be seen at zero before the burst, or increase() has
	// nothing to compare the first transition with.
	eventually(t, 30*time.Second, "prometheus scraped trimtab", func() bool {
		return len(promQuery(t, promURL, `trimtab_configurator_transitions_total`)) > 0
	})

	// Load: calm, a burst dominated by one system prompt, calm.
	cfg := loadgen.DefaultConfig()
	cfg.URL = ts.proxyURL
	cfg.Phases = []loadgen.Phase{
		{Name: "calm", Duration: 2 * time.Second, Concurrency: 2},
		{Name: "burst", Duration: 6 * time.Second, Concurrency: 32},
		{Name: "calm again", Duration: 2 * time.Second, Concurrency: 2},
	}
	cfg.HotSystemTokens, cfg.SystemTokens, cfg.OutputTokens = 1500, 400, 16
	gen, err := loadgen.New(cfg, loadgen.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	// The burst must move the adaptive loop into rebalance. On a busy
	// machine the fake fleet serves fewer requests per second than the
	// herd signal's min_picks gate needs, so the load is played up to
	// three times before the test gives up.
	rebalanced := false
	for try := 1; try <= 3 && !rebalanced; try++ {
		st := loadgen.Summarise(gen.Run(context.Background()))
		if st.Requests == 0 || st.Failed > 0 {
			t.Fatalf("load, try %d: %d requests, %d failed", try, st.Requests, st.Failed)
		}
		for _, c := range ts.svc.hist.History(status.Query{}).Changes {
			rebalanced = rebalanced || c.ToMode == "rebalance"
		}
	}
	if !rebalanced {
		t.Errorf("three hot-prefix bursts never put the configurator in rebalance mode")
	}

	t.Run("dashboard queries return data", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join("..", "..", dashboards.Path))
		if err != nil {
			t.Fatal(err)
		}
		qs, err := dashboards.Queries(data, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) < 10 {
			t.Fatalf("only %d dashboard queries", len(qs))
		}
		// Wait until Prometheus has scraped trimtab after the load.
		eventually(t, 30*time.Second, "prometheus scraped the burst", func() bool {
			return len(promQuery(t, promURL, `trimtab_scheduler_picks_total > 100`)) > 0
		})
		for _, q := range qs {
			if n := len(promQuery(t, promURL, q.PromQL)); n == 0 {
				t.Errorf("%s: no data for %s", q.Where, q.PromQL)
			}
		}
	})

	t.Run("status page in a real browser", func(t *testing.T) {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), testenv.BrowserOptions(chromium, t.TempDir(), chromedp.WindowSize(1440, 1600))...)
		defer cancelAlloc()
		ctx, cancel := chromedp.NewContext(actx)
		defer cancel()
		backstop := time.AfterFunc(90*time.Second, cancel)
		defer backstop.Stop()
		if err := chromedp.Do(ctx, chromedp.Navigate(ts.adminURL+"/ui")); err != nil {
			t.Fatalf("navigate: %v", err)
		}
		for what, expr := range map[string]string{
			"signal chart drawn": `document.querySelectorAll("#signal-chart path.line").length > 0`,
			"endpoint rows":      fmt.Sprintf(`document.querySelectorAll("#endpoints tbody tr[data-address]").length === %d`, len(addrs)),
			"recent decisions":   `document.querySelectorAll("#decisions tbody tr.dec").length > 0`,
			"weight bars":        `document.querySelectorAll("#weights .bar-row").length === 4`,
			"weight changes":     `document.querySelectorAll("#changes tbody tr[data-seq]").length > 0`,
		} {
			if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
				t.Errorf("waiting for %s (%s): %v", what, expr, err)
			}
		}
		buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		dir := os.Getenv("TRIMTAB_SCREENSHOT_DIR")
		if dir == "" {
			dir = t.TempDir()
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "status-ui-live.png")
		if err := os.WriteFile(path, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	})
}

// startPrometheus runs a real Prometheus on loopback scraping trimtab's
// admin server and the model servers every second, until the test ends.
func startPrometheus(t *testing.T, bin, admin string, servers []string) string {
	t.Helper()
	dir := t.TempDir()
	quoted := make([]string, len(servers))
	for i, s := range servers {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: trimtab
    static_configs: [{targets: [%q]}]
  - job_name: vllm
    static_configs: [{targets: [%s]}]
`, admin, strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	u := "http://" + addr
	eventually(t, 30*time.Second, "prometheus ready", func() bool {
		resp, err := http.Get(u + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return u
}

// promQuery runs an instant query and returns its series (or samples).
func promQuery(t *testing.T, base, q string) []json.RawMessage {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	if out.Status != "success" {
		t.Fatalf("query %s: %s", q, out.Error)
	}
	var series []json.RawMessage
	if out.Data.ResultType == "scalar" {
		return []json.RawMessage{out.Data.Result}
	}
	if err := json.Unmarshal(out.Data.Result, &series); err != nil {
		t.Fatalf("query %s: result %s: %v", q, out.Data.Result, err)
	}
	return series
}
