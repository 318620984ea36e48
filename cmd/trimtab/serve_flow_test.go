package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/trimtab/trimtab/internal/testenv"
)

// TestServeFlowControl: serve with flow control on (a profile file with
// flow.enabled, one request in flight per endpoint — saturation
// max_in_flight 1 —, max_queue 1, the scraped opinion off) in front of one
// fake server on 127.0.0.1:
//
//	A: streaming, 1,500 tokens            dispatched at once; the endpoint is saturated
//	B: waits in the router                queued 1 of 1
//	C: the queue is full                  429, X-Trimtab-Drop-Reason: queue-full, Retry-After: 3
//	A ends                                B is dispatched to the freed endpoint and answers 200
//
// /debug/flow then shows 2 dispatches and the queue-full drop of the
// standard band.
func TestServeFlowControl(t *testing.T) {
	addrs := startFakeFleet(t, 1)
	ts := startServiceWith(t, addrs, false, `flow:
  enabled: true
  max_queue: 1
  saturation:
    max_in_flight: 1
    queue_depth: 0
    kv_util: 0
server:
  retry_after: 3s
`)
	url := ts.proxyURL + "/v1/completions"
	body := func(tokens int, stream bool) string {
		b, _ := json.Marshal(map[string]any{"model": "llama-3.1-8b-instruct", "prompt": "tell me a story", "max_tokens": tokens, "ignore_eos": true, "stream": stream})
		return string(b)
	}
	a, err := http.Post(url, "application/json", strings.NewReader(body(1500, true)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Body.Close()
	if a.StatusCode != http.StatusOK {
		t.Fatalf("A: %d", a.StatusCode)
	}
	ar := bufio.NewReader(a.Body)
	if _, err := ar.ReadString('\n'); err != nil { // A is streaming: its endpoint holds it
		t.Fatal(err)
	}

	type answer struct {
		status   int
		endpoint string
		err      error
	}
	bc := make(chan answer, 1)
	go func() {
		resp, err := http.Post(url, "application/json", strings.NewReader(body(4, false)))
		if err != nil {
			bc <- answer{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		bc <- answer{status: resp.StatusCode, endpoint: resp.Header.Get("x-trimtab-endpoint")}
	}()
	flowStatus := func() (st struct {
		Queued int `json:"queued"`
		Bands  []struct {
			Name       string            `json:"name"`
			Dispatched int               `json:"dispatched"`
			Drops      map[string]uint64 `json:"drops"`
		} `json:"bands"`
	}) {
		resp, err := http.Get(ts.adminURL + "/debug/flow")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	eventually(t, 10*time.Second, "B waiting in the router", func() bool { return flowStatus().Queued == 1 })

	c, cbody := post(t, url, body(4, false))
	if c.StatusCode != http.StatusTooManyRequests || c.Header.Get("X-Trimtab-Drop-Reason") != "queue-full" || c.Header.Get("Retry-After") != "3" {
		t.Fatalf("C with the queue full: %d, drop reason %q, Retry-After %q (%s); want 429, queue-full, 3",
			c.StatusCode, c.Header.Get("X-Trimtab-Drop-Reason"), c.Header.Get("Retry-After"), cbody)
	}
	select {
	case b := <-bc:
		t.Fatalf("B answered (%d, %v) while A held the only endpoint", b.status, b.err)
	default:
	}

	if _, err := io.Copy(io.Discard, ar); err != nil { // A runs to its end
		t.Fatal(err)
	}
	a.Body.Close()
	select {
	case b := <-bc:
		if b.err != nil || b.status != http.StatusOK || b.endpoint != addrs[0] {
			t.Fatalf("B after A ended: %d on %q (%v), want 200 on %s", b.status, b.endpoint, b.err, addrs[0])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B was not dispatched after A ended")
	}
	st := flowStatus()
	for _, band := range st.Bands {
		if band.Name == "standard" && (band.Dispatched != 2 || band.Drops["queue-full"] != 1) {
			t.Errorf("/debug/flow standard band: %d dispatched, drops %v; want 2 and queue-full 1", band.Dispatched, band.Drops)
		}
	}
}

// TestServeFlowCardInBrowser: serve's status page in headless Chromium
// shows the flow-control card when flow control is on: a row per band,
// and the standard band's dispatch of the one request sent.
func TestServeFlowCardInBrowser(t *testing.T) {
	chromium := testenv.Program(t, "chromium", "apt-get install chromium (./test.sh does it on Debian)")
	addrs := startFakeFleet(t, 1)
	ts := startServiceWith(t, addrs, false, "flow:\n  enabled: true\n")
	if resp, b := post(t, ts.proxyURL+"/v1/completions", `{"model": "llama-3.1-8b-instruct", "prompt": "hi", "max_tokens": 2}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("request: %d %s", resp.StatusCode, b)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), testenv.BrowserOptions(chromium, t.TempDir())...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	backstop := time.AfterFunc(90*time.Second, cancel)
	defer backstop.Stop()
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.adminURL+"/ui")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	expr := `!document.getElementById("card-flow").hidden && document.querySelectorAll("#flow tbody tr[data-band]").length === 3 &&
		document.querySelector('#flow tbody tr[data-band="standard"]').innerText.split("\t")[4] === "1"`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		row, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector("#card-flow") || {}).innerText || "no card"`))
		t.Fatalf("waiting for the flow card with the standard band's dispatch: %v; card: %q", err, row)
	}
}
