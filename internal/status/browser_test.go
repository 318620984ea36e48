package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/internal/testenv"
	"github.com/trimtab/trimtab/proxy"
	"github.com/trimtab/trimtab/scheduler"
)

// funcScorer scores with a func; the browser test needs real decisions
// with varied per-scorer scores, not a particular policy.
type funcScorer struct {
	cat scheduler.Category
	f   func(req *scheduler.Request, e *scheduler.Endpoint) float64
}

func (f *funcScorer) Category() scheduler.Category { return f.cat }
func (f *funcScorer) Score(_ *scheduler.CycleState, req *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i, e := range eps {
		out[i] = f.f(req, e)
	}
}

// prefixLike gives 0.9 to the endpoint a request's "system prompt" (its ID's
// last digit) lives on and 0.1 elsewhere; the others read the endpoint.
func prefixLike(req *scheduler.Request, e *scheduler.Endpoint) float64 {
	home := fixtureAddrs[int(req.ID[len(req.ID)-1]-'0')%3] // three prompt groups over the first three endpoints
	if e.Address == home {
		return 0.9
	}
	return 0.1
}
func queueLike(_ *scheduler.Request, e *scheduler.Endpoint) float64 {
	return 1 - math.Min(1, e.Waiting/20)
}
func kvLike(_ *scheduler.Request, e *scheduler.Endpoint) float64 { return 1 - e.KVUtil }

// pageFixture is a real scheduler, a Recorder fed a synthetic burst, and
// the real admin server (proxy.Admin: /debug/endpoints, /debug/decisions,
// /debug/weights) with the Recorder's handlers mounted on it, as serve
// does.
type pageFixture struct {
	rec   *Recorder
	sched *scheduler.Scheduler
	dec   *proxy.Recorder
	names []string
	srv   *httptest.Server
}

var (
	fixtureAddrs = []string{"10.0.0.11:8000", "10.0.0.12:8000", "10.0.0.13:8000", "10.0.0.14:8000"}
	fixtureKV    = []float64{0.93, 0.5, 0, 1}
)

func newPageFixture(t *testing.T, end time.Time) *pageFixture {
	t.Helper()
	f := &pageFixture{rec: mustNew(t, DefaultConfig())}
	entries := []scheduler.ScorerEntry{
		{Name: "prefix", Type: "prefix", Scorer: &funcScorer{scheduler.CategoryAffinity, prefixLike}, Weight: 3},
		{Name: "queue", Type: "queue", Scorer: &funcScorer{scheduler.CategoryDistribution, queueLike}, Weight: 2},
		{Name: "kvcache", Type: "kvcache", Scorer: &funcScorer{scheduler.CategoryDistribution, kvLike}, Weight: 2},
	}
	// Ejections last 10m, longer than the test runs on the real clock.
	cfg := scheduler.DefaultConfig()
	cfg.Outlier.BaseEjection, cfg.Outlier.MaxEjection = 10*time.Minute, 10*time.Minute
	s, err := scheduler.New(cfg, entries, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	f.sched = s
	for _, e := range entries {
		f.names = append(f.names, e.Name)
	}
	f.rec.SetScorers(s.Scorers())
	f.scrape(end)
	f.feedHistory(end)

	f.dec = proxy.NewRecorder(64, 1)
	admin, err := proxy.NewAdmin(proxy.DefaultConfig(), proxy.Deps{View: s, Recorder: f.dec})
	if err != nil {
		t.Fatal(err)
	}
	admin.Handle("GET "+PathHistory, f.rec.Handler())
	admin.Handle("GET "+PathUI, UI())
	admin.Handle("GET "+PathUI+"/", UI())
	// What /debug/peers (package replica) shows on a replica syncing with
	// two peers, one of them lost.
	admin.Handle("GET /debug/peers", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"enabled": true, "id": "trimtab-0", "listen": ":9003", "sync_key": "prefix:hash=xxh3-link,block_bytes=256,shards=16",
  "picks_logged": 1200, "picks_dropped": 0,
  "peers": [{"address": "trimtab-1.trimtab-peers:9003", "id": "trimtab-1", "connected": true, "since": "2026-01-01T00:00:00Z", "queued": 0, "batches_sent": 900, "batches_dropped": 0, "snapshots_received": 1},
            {"address": "trimtab-2.trimtab-peers:9003", "connected": false, "since": "2026-01-01T00:01:00Z", "last_error": "rpc error: code = Unavailable desc = connection refused", "queued": 256, "batches_sent": 400, "batches_dropped": 31, "snapshots_received": 1}],
  "inbound": [{"id": "trimtab-1", "streams": 1, "last_seen": "2026-01-01T00:02:00Z", "batches_applied": 870, "lag_ms": 6.5, "expired": false, "in_flight": 7},
              {"id": "trimtab-2", "streams": 0, "last_seen": "2026-01-01T00:01:00Z", "batches_applied": 390, "lag_ms": 9.1, "expired": true, "in_flight": 0}]}`)
	}))
	admin.Handle("GET "+flow.PathFlow, flow.OffHandler()) // TestStatusPageFlowCard serves a controller's
	f.srv = httptest.NewServer(admin)
	t.Cleanup(f.srv.Close)
	return f
}

// fail reports five consecutive 500 answers from endpoint i, which ejects it.
func (f *pageFixture) fail(t *testing.T, i int) {
	t.Helper()
	for range 5 {
		d, err := f.sched.Pick(context.Background(), &scheduler.Request{ID: "failing-1", Model: "llama-3.1-8b", Subset: fixtureAddrs[i : i+1], Arrival: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		d.Done(scheduler.Outcome{Kind: scheduler.OutcomeError, Status: 500})
	}
}

// scrape installs the pool as a scrape at now would: endpoint 0 is hot
// (waiting 14, KV 93 %), endpoint 3 is stale; the KV meters span the
// scale (93 %, 50 %, 0 %, 100 %).
func (f *pageFixture) scrape(now time.Time) {
	eps := make([]scheduler.Endpoint, len(fixtureAddrs))
	for i, a := range fixtureAddrs {
		eps[i] = scheduler.Endpoint{
			Address: a, Name: fmt.Sprintf("vllm-%d", i), Models: []string{"llama-3.1-8b"},
			Labels:  map[string]string{"app": "vllm"},
			Waiting: float64([]int{14, 2, 0, 3}[i]), Running: float64([]int{48, 31, 22, 35}[i]),
			KVUtil: fixtureKV[i], Capacity: 1, CacheBlockSize: 16, CacheBlocks: 8192,
			ScrapedAt: now.Add(-time.Duration(12+9*i) * time.Millisecond), State: scheduler.StateFresh,
		}
	}
	eps[3].State = scheduler.StateStale
	eps[3].ScrapedAt = now.Add(-1500 * time.Millisecond)
	f.sched.SetEndpoints(eps)
}

// signalAt is a synthetic hot-prefix burst over 60 s: calm, a rise to
// about 0.8 from 20 s to 40 s, calm again; plus a small wobble.
func signalAt(sec float64) float64 {
	burst := 0.8 / (1 + math.Exp(-(sec-22)/1.5)) * (1 - 1/(1+math.Exp(-(sec-40)/2)))
	return math.Max(0, math.Min(1, 0.08+burst+0.03*math.Sin(sec*1.7)))
}

// tick records one control tick at time at (sec seconds into the run) the
// way the configurator behaves: a mode machine with hysteresis (enter
// rebalance at ≥ 0.5, leave at ≤ 0.3), a distribution budget D that is 0.3
// while calm and 0.3 + 0.6·signal in rebalance, slewed by at most 0.05 per
// tick, and a new version whenever the mode changes or D moves by ≥ 0.01.
// Weights are prefix 7(1 − D), queue and kvcache 3.5·D each.
func (f *pageFixture) tick(at time.Time, sec float64) {
	sig := signalAt(sec)
	w := f.sched.Weights()
	mode := w.Mode
	switch {
	case mode != "rebalance" && sig >= 0.5:
		mode = "rebalance"
	case mode == "rebalance" && sig <= 0.3:
		mode = "calm"
	}
	cur := w.Values[1] / 3.5
	target := 0.3
	if mode == "rebalance" {
		target = 0.3 + 0.6*sig
	}
	d := cur + math.Max(-0.05, math.Min(0.05, target-cur))
	if mode != w.Mode || math.Abs(d-cur) >= 0.01 {
		reason := fmt.Sprintf("%s: signal %.3f, D %.3f → %.3f (target %.3f)", mode, sig, cur, d, target)
		switch {
		case mode == "rebalance" && w.Mode != mode:
			reason = fmt.Sprintf("signal %.3f ≥ theta_on 0.500: rebalance", sig)
		case mode == "calm" && w.Mode != mode:
			reason = fmt.Sprintf("signal %.3f ≤ theta_off 0.300: calm", sig)
		}
		nw := &scheduler.Weights{Version: w.Version + 1, Values: []float64{7 * (1 - d), 3.5 * d, 3.5 * d},
			Mode: mode, Reason: reason, Signal: sig, At: at}
		if err := f.sched.Publish(nw); err == nil {
			f.rec.RecordChange(w, nw, f.names)
			w = nw
		}
	}
	// The herd signal (the default): the signal is the herd component.
	s := Sample{At: at, Signal: sig, Components: map[string]float64{
		"herd": sig, "request_cv": math.Min(1, sig*1.05), "kv_cv": sig * 0.7, "raw": math.Min(1, sig*1.05),
		"smoothed": sig * 0.9, "pressure": 0.1 + 0.3*sig, "endpoints": 4, "total_load": 80 + 120*sig,
	}}
	s.SetWeights(w, f.names)
	f.rec.Record(s)
}

func (f *pageFixture) feedHistory(end time.Time) {
	start := end.Add(-60 * time.Second)
	old := f.sched.Weights()
	calm := &scheduler.Weights{Version: 2, Values: []float64{4.9, 1.05, 1.05}, Mode: "calm", Reason: "adaptive mode on", At: start}
	if err := f.sched.Publish(calm); err != nil {
		panic(err)
	}
	f.rec.RecordChange(old, calm, f.names)
	for i := 0; i <= 1200; i++ { // 60 s of 50 ms ticks
		f.tick(start.Add(time.Duration(i)*50*time.Millisecond), float64(i)*0.05)
	}
	for i := 0; i < 40; i++ {
		f.pick(fmt.Sprintf("req-%04d", i))
	}
}

// pick runs a real decision and keeps its explanation, as the proxy does.
func (f *pageFixture) pick(id string) {
	d, err := f.sched.Pick(context.Background(), &scheduler.Request{ID: id, Model: "llama-3.1-8b"})
	if err != nil {
		return
	}
	f.dec.Record(d.Explain())
	d.Done(scheduler.Outcome{Kind: scheduler.OutcomeSuccess, Status: 200})
}

// TestStatusPageInBrowser loads /ui in a real headless Chromium against a
// Recorder that is being fed live samples and checks that the page polls,
// draws the charts and fills every table, with no console error (a CSP
// violation or a script exception fails the test). Screenshots go to
// $TRIMTAB_SCREENSHOT_DIR when set. It needs Chromium (Debian's
// headless-capable browser; see internal/testenv).
func TestStatusPageInBrowser(t *testing.T) {
	chromium := testenv.Program(t, "chromium", "apt-get update && apt-get install -y chromium (./test.sh does it on Debian)")
	shots := os.Getenv("TRIMTAB_SCREENSHOT_DIR")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	f := newPageFixture(t, start)

	// Live feed: keep ticking (and picking) while the browser watches.
	liveCtx, stopLive := context.WithCancel(context.Background())
	var live sync.WaitGroup
	live.Add(1)
	go func() {
		defer live.Done()
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for i := 0; ; i++ {
			select {
			case <-liveCtx.Done():
				return
			case now := <-tk.C:
				f.tick(now, 60+now.Sub(start).Seconds())
				if i%4 == 0 {
					f.scrape(now)
					f.pick(fmt.Sprintf("live-%04d", i))
				}
			}
		}
	}()
	defer live.Wait()
	defer stopLive()

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), testenv.BrowserOptions(chromium, t.TempDir(), chromedp.WindowSize(1440, 1600))...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	// Backstop: whatever hangs, the browser goes away after two minutes.
	backstop := time.AfterFunc(2*time.Minute, cancel)
	defer backstop.Stop()

	var (
		console  sync.WaitGroup
		mu       sync.Mutex
		problems []string
		tolerant atomic.Bool // only exceptions count
	)
	msgs := chromedp.Console(ctx)
	console.Add(1)
	go func() {
		defer console.Done()
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || (m.Type == chromedp.ConsoleError && !tolerant.Load()) {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s %s:%d %s", m.Type, m.URL, m.Line+1, m.Text))
				mu.Unlock()
			}
		}
	}()
	defer console.Wait()
	defer cancel()

	if err := chromedp.Do(ctx, chromedp.Navigate(f.srv.URL+"/ui")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	wait := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			t.Fatalf("waiting for %s (%s): %v", what, expr, err)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}

	wait("two polls", `Number(document.body.dataset.polls || 0) >= 2`)
	// 60 s of history at 500 ms is ~120 samples, all inside the 5 min view.
	wait("the signal chart", `Number(document.getElementById("signal-chart").dataset.points || 0) >= 100`)
	wait("the weights chart", `Number(document.getElementById("weights-chart").dataset.points || 0) >= 100`)
	wait("endpoint rows", `document.querySelectorAll("#endpoints tbody tr[data-address]").length === 4`)
	wait("weight changes", `document.querySelectorAll("#changes tbody tr[data-seq]").length >= 2`)
	wait("decisions", `document.querySelectorAll("#decisions tbody tr.dec").length === 15`)
	wait("the newest decision on top", `document.querySelector("#decisions tbody tr.dec").dataset.id.startsWith("live-")`)
	wait("weight bars", `document.querySelectorAll("#weights .bar-row").length === 3`)
	wait("replica peers", `!document.getElementById("card-peers").hidden && document.querySelectorAll("#peers tbody tr[data-peer]").length === 4`)
	if lost := eval(`document.querySelector('#peers tbody tr[data-peer="trimtab-2.trimtab-peers:9003"]').innerText`); !strings.Contains(lost, "down") || !strings.Contains(lost, "connection refused") || !strings.Contains(lost, "31") {
		t.Errorf("lost peer row %q: want down, its error and 31 dropped batches", lost)
	}
	if in := eval(`document.querySelector('#peers tbody tr[data-peer="trimtab-1"]').innerText`); !strings.Contains(in, "connected") || !strings.Contains(in, "6.5 ms") || !strings.Contains(in, "7") {
		t.Errorf("inbound peer row %q: want connected, 6.5 ms lag, 7 in flight", in)
	}

	// Live data keeps arriving: the chart grows by a point per 500 ms slot.
	before := eval(`document.getElementById("signal-chart").dataset.points`)
	wait("new live samples", fmt.Sprintf(`Number(document.getElementById("signal-chart").dataset.points) > %s`, before))

	if mode := eval(`document.getElementById("kpi-mode").textContent`); mode != "calm" && mode != "rebalance" {
		t.Errorf("mode KPI = %q, want calm or rebalance", mode)
	}
	// The herd signal leads: the signal and the herd share, 2 lines; the
	// other components are folded behind one legend item.
	if lines, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#signal-chart path.line").length`)); err != nil || lines != 2 {
		t.Errorf("signal chart draws %d lines (%v), want 2 (signal, herd)", lines, err)
	}
	if label := eval(`document.querySelector('#signal-legend [data-key="signal"]').innerText`); !strings.Contains(label, "signal (herd)") {
		t.Errorf("signal legend %q does not say the herd signal is in force", label)
	}
	// Unfolded: + request_cv, kv_cv, raw and pressure (smoothed is hidden
	// by default): 6 lines.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#signal-legend [data-key="fold"]`))); err != nil {
		t.Fatal(err)
	}
	wait("the folded components drawn", `document.querySelectorAll("#signal-chart path.line").length === 6`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#signal-legend [data-key="fold"]`))); err != nil {
		t.Fatal(err)
	}
	wait("the other components folded again", `document.querySelectorAll("#signal-chart path.line").length === 2`)
	row := eval(`document.querySelector('#endpoints tbody tr[data-address="10.0.0.11:8000"]').innerText`)
	// Endpoint 0: waiting 14, running 48, KV 0.93 → 93%.
	for _, want := range []string{"10.0.0.11:8000", "vllm-0", "fresh", "14", "48", "93%"} {
		if !strings.Contains(row, want) {
			t.Errorf("endpoint row %q lacks %q", row, want)
		}
	}
	checkMeters(t, eval)
	if stale := eval(`document.querySelector('#endpoints tbody tr[data-address="10.0.0.14:8000"] .pill').textContent`); stale != "stale" {
		t.Errorf("endpoint 3 state pill = %q, want stale", stale)
	}
	// Picks spread over the three prompt groups' endpoints: share cells
	// show percentages.
	if shares := eval(`Array.from(document.querySelectorAll("#endpoints tbody tr[data-address] td:nth-child(8)")).map(td => td.innerText).join("|")`); !strings.Contains(shares, "%") {
		t.Errorf("share-of-picks cells %q show no percentage", shares)
	}
	// Changes: static → calm, then per burst calm → rebalance, the slew in
	// rebalance (merged, "N steps"), rebalance → calm, the slew back.
	changes := eval(`document.querySelector("#changes tbody").innerText`)
	for _, want := range []string{"theta_on 0.500: rebalance", "theta_off 0.300: calm", "steps", "adaptive mode on"} {
		if !strings.Contains(changes, want) {
			t.Errorf("weight changes table lacks %q:\n%s", want, changes)
		}
	}

	// Open the newest decision: a candidate table with all four endpoints.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#decisions tbody tr.dec"))); err != nil {
		t.Fatal(err)
	}
	wait("the candidate table", `document.querySelectorAll("#decisions tr.cands tbody tr").length === 4`)

	// Endpoint 1 fails five times in a row: outlier ejection labels it.
	f.fail(t, 1)
	wait("the ejected label", `document.querySelectorAll("#endpoints .st-ejected").length === 1`)
	if ej := eval(`Array.from(document.querySelectorAll('#endpoints tbody tr[data-address="10.0.0.12:8000"] .pill')).map(p => p.textContent).join(" ")`); ej != "fresh ejected" {
		t.Errorf("endpoint 1 state pills = %q, want \"fresh ejected\"", ej)
	}

	shot := func(name string) {
		t.Helper()
		// Scrolled to the top, so the sticky header is where it belongs in
		// a full-page capture.
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`window.scrollTo(0, 0)`)); err != nil {
			t.Fatal(err)
		}
		buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		p := filepath.Join(shots, name)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}
	shot("status-ui-light.png")
	if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
	}); err != nil {
		t.Fatal(err)
	}
	polls := eval(`document.body.dataset.polls`)
	wait("a redraw in dark mode", fmt.Sprintf(`Number(document.body.dataset.polls) > %s`, polls))
	shot("status-ui-dark.png")

	// Tolerance: the Recorder alone (no proxy debug endpoints, so 404s) and
	// an empty history. The page must say what is missing and not throw;
	// from here on the browser's own "404" log lines are expected.
	tolerant.Store(true)
	bare := httptest.NewServer(mustNew(t, DefaultConfig()).Handler())
	defer bare.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(bare.URL+"/ui/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	wait("two polls of the bare server", `Number(document.body.dataset.polls || 0) >= 2`)
	if txt := eval(`document.querySelector("#endpoints tbody").innerText`); !strings.Contains(txt, "unavailable") || !strings.Contains(txt, "404") {
		t.Errorf("endpoints placeholder %q, want it to say the endpoints are unavailable (404)", txt)
	}
	if txt := eval(`document.getElementById("signal-chart").textContent`); !strings.Contains(txt, "No samples yet") {
		t.Errorf("empty chart says %q, want \"No samples yet\"", txt)
	}
	if live := eval(`document.getElementById("conn-text").textContent`); !strings.HasPrefix(live, "live") {
		t.Errorf("connection indicator %q, want live (the history answers)", live)
	}

	cancel()
	console.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("browser console: %s", p)
	}
}

// meterProbe is one drawn meter: its track and fill widths in CSS pixels
// and the number printed beside it.
type meterProbe struct {
	Addr  string  `json:"addr"`
	Col   int     `json:"col"`
	Track float64 `json:"track"`
	Fill  float64 `json:"fill"`
	Text  string  `json:"text"`
}

// checkMeters measures every meter of the endpoints table in the browser:
// the fill is as wide as its number says, within 1.5 px. The KV column is
// also checked against the fixture: on the 90 px track, 0.93 → 83.7 px,
// 0.5 → 45 px (half), 0 → 0 px, 1 → 90 px (full). The printed percentage
// is rounded (0 or 1 decimals), so it moves the expected width by at most
// 0.05 % of the track: 0.05 px.
func checkMeters(t *testing.T, eval func(string) string) {
	t.Helper()
	raw := eval(`JSON.stringify(Array.from(document.querySelectorAll("#endpoints tbody tr[data-address] td")).flatMap((td) => {
		const m = td.querySelector(".meter"), tr = m && m.querySelector(".track"), f = m && m.querySelector(".fill");
		if (!tr || !f) return [];
		return [{addr: td.parentElement.dataset.address, col: td.cellIndex + 1, track: tr.getBoundingClientRect().width,
			fill: f.getBoundingClientRect().width, text: m.innerText.trim()}];
	}))`)
	var ms []meterProbe
	if err := json.Unmarshal([]byte(raw), &ms); err != nil {
		t.Fatalf("meters %s: %v", raw, err)
	}
	const tol = 1.5
	kv := 0
	for _, m := range ms {
		pct, err := strconv.ParseFloat(strings.TrimSuffix(m.Text, "%"), 64)
		if err != nil {
			t.Errorf("meter %s col %d prints %q, want a percentage", m.Addr, m.Col, m.Text)
			continue
		}
		if m.Track < 20 {
			t.Errorf("meter %s col %d: track %.1f px wide, want a visible track", m.Addr, m.Col, m.Track)
		}
		if want := m.Track * min(100, max(0, pct)) / 100; math.Abs(m.Fill-want) > tol {
			t.Errorf("meter %s col %d prints %s but its fill is %.1f of %.1f px, want %.1f ± %.1f px",
				m.Addr, m.Col, m.Text, m.Fill, m.Track, want, tol)
		}
		if m.Col != 5 {
			continue
		}
		kv++
		i := slices.Index(fixtureAddrs, m.Addr)
		if want := m.Track * fixtureKV[i]; math.Abs(m.Fill-want) > tol {
			t.Errorf("KV meter of %s (KV %.2f): fill %.1f of %.1f px, want %.1f ± %.1f px", m.Addr, fixtureKV[i], m.Fill, m.Track, want, tol)
		}
	}
	if kv != len(fixtureAddrs) {
		t.Errorf("measured %d KV meters, want %d: %s", kv, len(fixtureAddrs), raw)
	}
}

// browser starts a headless Chromium for one test and returns its context
// and a function that stops it and returns the script exceptions (and,
// unless only exceptions count, console errors) it logged.
func browser(t *testing.T, onlyExceptions bool) (context.Context, func() []string) {
	t.Helper()
	chromium := testenv.Program(t, "chromium", "apt-get update && apt-get install -y chromium (./test.sh does it on Debian)")
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), testenv.BrowserOptions(chromium, t.TempDir(), chromedp.WindowSize(1440, 1200))...)
	ctx, cancel := chromedp.NewContext(actx)
	backstop := time.AfterFunc(2*time.Minute, cancel)
	var (
		console  sync.WaitGroup
		mu       sync.Mutex
		problems []string
	)
	msgs := chromedp.Console(ctx)
	console.Go(func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || (m.Type == chromedp.ConsoleError && !onlyExceptions) {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s %s:%d %s", m.Type, m.URL, m.Line+1, m.Text))
				mu.Unlock()
			}
		}
	})
	var once sync.Once
	stop := func() []string {
		once.Do(func() {
			backstop.Stop()
			cancel()
			console.Wait()
			cancelAlloc()
		})
		mu.Lock()
		defer mu.Unlock()
		return problems
	}
	t.Cleanup(func() { stop() })
	return ctx, stop
}

// TestStatusPageRouterRestart loads /ui/ from a router that goes away right
// after sending the page, as one that restarts does, and comes back later.
// The page needs nothing but itself to draw: it is styled at once, says
// that the router is unreachable and that it keeps retrying while it is,
// and fills in once the router answers again.
func TestStatusPageRouterRestart(t *testing.T) {
	f := newPageFixture(t, time.Now())
	var down atomic.Bool
	admin := f.srv.Config.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() { // the connection drops, as it does when the process is gone
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		admin.ServeHTTP(w, r)
		if r.URL.Path == PathUI+"/" {
			down.Store(true)
		}
	}))
	defer srv.Close()

	// Failed loads are logged as console errors; only exceptions count.
	ctx, stop := browser(t, true)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+PathUI+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	wait := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			t.Fatalf("waiting for %s (%s): %v", what, expr, err)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	if !down.Load() {
		t.Fatal("the page was not fetched")
	}
	// style.css: the header is sticky, a card has rounded corners.
	if got := eval(`getComputedStyle(document.querySelector("header.top")).position + " " + getComputedStyle(document.querySelector(".card")).borderTopLeftRadius`); got != "sticky 10px" {
		t.Errorf("with the router gone after the page: header position and card radius %q, want \"sticky 10px\" (the page is unstyled)", got)
	}
	wait("the unreachable notice", `(() => { const b = document.getElementById("offline"); return !!b && !b.hidden && b.offsetHeight > 0 && /unreachable/.test(b.innerText) && /retrying/.test(b.innerText); })()`)

	down.Store(false)
	wait("the notice to go", `document.getElementById("offline").hidden`)
	wait("endpoint rows", `document.querySelectorAll("#endpoints tbody tr[data-address]").length === 4`)
	if live := eval(`document.getElementById("conn-text").textContent`); !strings.HasPrefix(live, "live") {
		t.Errorf("connection indicator %q, want live", live)
	}
	for _, p := range stop() {
		t.Errorf("browser console: %s", p)
	}
}

// TestStatusPageOpenAdminBanner: served for an admin server on every
// interface without a token, the page shows the warning banner in
// Chromium, above the cards, while it polls.
func TestStatusPageOpenAdminBanner(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET "+PathHistory, mustNew(t, DefaultConfig()).Handler())
	ui := NewUI(UIConfig{AdminAddr: ":9090"})
	mux.Handle("GET "+PathUI, ui)
	mux.Handle("GET "+PathUI+"/", ui)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx, stop := browser(t, true) // the debug views 404 here; only exceptions count
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+PathUI+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`Number(document.body.dataset.polls || 0) >= 1`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("waiting for a poll: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const b = document.getElementById("admin-open"), r = b && b.getBoundingClientRect();
		const main = document.querySelector("main").getBoundingClientRect();
		return b ? [r.height > 0 && r.width > 0 && r.bottom <= main.top, b.innerText].join(" | ") : "none";
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "true | ") || !strings.Contains(got, ":9090 without a token") {
		t.Errorf("banner %q: want it visible above the cards, naming :9090 and the missing token", got)
	}
	for _, p := range stop() {
		t.Errorf("browser console: %s", p)
	}
}
