package status

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/scheduler"
)

// TestStatusPageFlowCard loads /ui in headless Chromium next to a real
// flow controller on the fixture's scheduler, and checks the flow-control
// card against what the controller did. Each of the 4 endpoints is full
// at one request (100 prompt bytes = 25 tokens + 256 output = 281 ≥ 0.8 ×
// 100 tokens), max_queue 1:
//
//	4 × interactive (chat): dispatched      interactive dispatched 4
//	sheddable (job-1): queued               then shed by the standard request
//	standard (api): queued                  standard waiting 1
//	sheddable (job-2): queue full           sheddable drops "queue-full 1, shed 1"
//	one chat request ends, drain            standard waiting 0, dispatched 1, dispatched/s > 0
//
// With flow control off (the fixture's /debug/flow) the card is hidden.
func TestStatusPageFlowCard(t *testing.T) {
	f := newPageFixture(t, time.Now())
	cfg := flow.DefaultConfig()
	cfg.Enabled = true
	cfg.MaxQueue = 1
	cfg.Saturation.CapacityTokens = 100
	cfg.Saturation.QueueDepth, cfg.Saturation.KVUtil = 0, 0 // the router's own opinion only
	fc, err := flow.New(cfg, flow.Deps{Scheduler: f.sched, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+flow.PathFlow, fc.Handler())
	mux.Handle("/", f.srv.Config.Handler)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := 0
	req := func() *scheduler.Request {
		n++
		return &scheduler.Request{ID: fmt.Sprintf("flow-%d", n), Model: "llama-3.1-8b", Prompt: make([]byte, 100), Arrival: time.Now()}
	}
	type held struct {
		d *scheduler.Decision
		l flow.Lease
	}
	var running []held
	for range len(fixtureAddrs) {
		d, l, err := fc.Pick(ctx, req(), flow.Class{Band: 0, Tenant: "chat"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		running = append(running, held{d, l})
	}
	type answer struct {
		d   *scheduler.Decision
		l   flow.Lease
		err error
	}
	pickAsync := func(band int, tenant string) <-chan answer {
		ch := make(chan answer, 1)
		q := req()
		go func() {
			d, l, err := fc.Pick(ctx, q, flow.Class{Band: band, Tenant: tenant}, 0)
			ch <- answer{d, l, err}
		}()
		return ch
	}
	waitLen := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for fc.Len() != n {
			if time.Now().After(deadline) {
				t.Fatalf("queue holds %d, want %d", fc.Len(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	job1 := pickAsync(2, "job-1")
	waitLen(1)
	api := pickAsync(1, "api")
	if a := <-job1; a.err != flow.ErrShed {
		t.Fatalf("job-1 after a standard request took its place: %v, want %v", a.err, flow.ErrShed)
	}
	waitLen(1)
	if _, _, err := fc.Pick(ctx, req(), flow.Class{Band: 2, Tenant: "job-2"}, 0); err != flow.ErrQueueFull {
		t.Fatalf("job-2 with the queue full: %v, want %v", err, flow.ErrQueueFull)
	}

	bctx, stop := browser(t, false)
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+PathUI+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	wait := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			t.Fatalf("waiting for %s (%s): %v", what, expr, err)
		}
	}
	row := func(band string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#flow tbody tr[data-band="`+band+`"]').innerText`))
		if err != nil {
			t.Fatalf("row %s: %v", band, err)
		}
		return v
	}
	wait("the flow card", `!document.getElementById("card-flow").hidden && document.querySelectorAll("#flow tbody tr[data-band]").length === 3`)
	// Cells: band, waiting, dispatched/s, mean wait, dispatched, drops, tenants.
	cells := func(band string) []string { return strings.Split(row(band), "\t") }
	if c := cells("interactive"); c[1] != "0" || c[4] != "4" || c[5] != "none" || !strings.Contains(c[6], "chat 0 / 4 / 0") {
		t.Errorf("interactive row %q: want 0 waiting, 4 dispatched, no drops, chat 0 / 4 / 0", c)
	}
	if c := cells("standard"); c[1] != "1" || c[4] != "0" || !strings.Contains(c[6], "api 1 / 0 / 0") {
		t.Errorf("standard row %q: want 1 waiting (api), 0 dispatched", c)
	}
	if c := cells("sheddable"); c[5] != "queue-full 1, shed 1" {
		t.Errorf("sheddable row %q: want drops queue-full 1, shed 1", c)
	}
	if note, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("flow-note").textContent`)); note != "1 of 1 waiting in the router" {
		t.Errorf("note %q, want 1 of 1 waiting in the router", note)
	}

	running[0].d.Done(scheduler.Outcome{})
	running[0].l.Release()
	fc.Drain()
	a := <-api
	if a.err != nil {
		t.Fatal(a.err)
	}
	running = append(running[1:], held{a.d, a.l})
	wait("the standard request dispatched", `(() => { const c = document.querySelector('#flow tbody tr[data-band="standard"]').innerText.split("\t");
		return c[1] === "0" && c[4] === "1" && Number(c[2]) > 0 && c[3].endsWith(" ms"); })()`)
	for _, h := range running {
		h.d.Done(scheduler.Outcome{})
		h.l.Release()
	}
	for _, p := range stop() {
		t.Errorf("browser console: %s", p)
	}

	// The fixture alone serves flow control off: no card.
	bctx, stop = browser(t, false)
	if err := chromedp.Do(bctx, chromedp.Navigate(f.srv.URL+PathUI+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	wait("two polls with flow control off", `Number(document.body.dataset.polls || 0) >= 2 && document.getElementById("card-flow").hidden`)
	for _, p := range stop() {
		t.Errorf("browser console: %s", p)
	}
}
