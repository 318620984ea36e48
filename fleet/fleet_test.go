package fleet

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/scheduler"
)

// modelServer is a real HTTP server on 127.0.0.1 whose /metrics answer can
// be switched while it runs.
type modelServer struct {
	*httptest.Server
	mu        sync.Mutex
	mode      string // "body", "status", "hang", "huge", "huge-cl"
	body      []byte
	ctype     string
	arrived   chan struct{} // receives (non-blocking) when a request arrives
	written   atomic.Int64  // most bytes written by one "huge" answer
	hugeBytes int64
}

func newModelServer(t testing.TB, body []byte) *modelServer {
	s := &modelServer{mode: "body", body: body, arrived: make(chan struct{}, 1), hugeBytes: 50 << 20}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *modelServer) set(mode string, body []byte, ctype string) {
	s.mu.Lock()
	s.mode, s.body, s.ctype = mode, body, ctype
	s.mu.Unlock()
}

func (s *modelServer) addr() string { return strings.TrimPrefix(s.URL, "http://") }

func (s *modelServer) serve(w http.ResponseWriter, r *http.Request) {
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	s.mu.Lock()
	mode, body, ctype := s.mode, s.body, s.ctype
	s.mu.Unlock()
	if r.URL.Path != "/metrics" {
		http.NotFound(w, r)
		return
	}
	switch mode {
	case "status":
		http.Error(w, "engine dead", http.StatusInternalServerError)
	case "hang":
		<-r.Context().Done()
	case "huge", "huge-cl":
		if mode == "huge-cl" {
			w.Header().Set("Content-Length", strconv.FormatInt(s.hugeBytes, 10))
		}
		chunk := []byte(strings.Repeat("# padding padding padding padding padding padding padding\n", 1024))
		n := int64(0)
		defer func() {
			for old := s.written.Load(); n > old && !s.written.CompareAndSwap(old, n); old = s.written.Load() {
			}
		}()
		for n < s.hugeBytes {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			n += int64(len(chunk))
		}
	default:
		if ctype == "" {
			ctype = "text/plain; version=0.0.4; charset=utf-8"
		}
		w.Header().Set("Content-Type", ctype)
		w.Write(body)
	}
}

// listDiscoverer hands target lists to the fleet as they are pushed.
type listDiscoverer struct {
	ch   chan []Target
	done chan struct{}
}

func newListDiscoverer() *listDiscoverer {
	return &listDiscoverer{ch: make(chan []Target), done: make(chan struct{})}
}

func (d *listDiscoverer) Run(ctx context.Context, sink Sink) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ts := <-d.ch:
			sink.Update(ts)
			d.done <- struct{}{}
		}
	}
}

// push sends a list and waits until Update has returned.
func (d *listDiscoverer) push(ts ...Target) { d.ch <- ts; <-d.done }

type harness struct {
	t     *testing.T
	f     *Fleet
	clk   *clocktesting.FakeClock
	disc  *listDiscoverer
	reg   *prometheus.Registry
	stop  func()
	iv    time.Duration
	errCh chan error
}

func testScrapeConfig() ScrapeConfig {
	c := DefaultConfig().Scrape
	c.Timeout = 100 * time.Millisecond
	c.MaxBackoff = 400 * time.Millisecond
	return c
}

func newHarness(t *testing.T, sc ScrapeConfig) *harness {
	h := &harness{t: t, clk: clocktesting.NewFakeClock(time.Unix(1_764_500_000, 0)), disc: newListDiscoverer(),
		reg: prometheus.NewRegistry(), iv: sc.Interval, errCh: make(chan error, 1)}
	f, err := New(Config{Scrape: sc}, Deps{Clock: h.clk, Registerer: h.reg, Discoverer: h.disc})
	if err != nil {
		t.Fatal(err)
	}
	h.f = f
	ctx, cancel := context.WithCancel(context.Background())
	go func() { h.errCh <- f.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-h.errCh; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(h.stop)
	return h
}

// eventually steps the fake clock by one interval every few real
// milliseconds until cond holds, failing after a bounded real-time wait.
func (h *harness) eventually(what string, cond func(s *Snapshot) bool) *Snapshot {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if s := h.f.Load(); cond(s) {
			return s
		}
		select {
		case <-deadline:
			h.t.Fatalf("timed out waiting for %s; last snapshot %+v", what, h.f.Load())
		case <-time.After(2 * time.Millisecond):
		}
		h.clk.Step(h.iv)
	}
}

func stateOf(addr string, st scheduler.State) func(*Snapshot) bool {
	return func(s *Snapshot) bool {
		e := s.Lookup(addr)
		return e != nil && e.State == st
	}
}

func TestFleetScrapesEveryEngine(t *testing.T) {
	sc := testScrapeConfig()
	sc.MaxAge = time.Hour // fake time runs faster than scrapes here; staleness is tested elsewhere
	h := newHarness(t, sc)
	servers := map[string]*modelServer{}
	want := map[string]Metrics{}
	var targets []Target
	for _, c := range []struct {
		engine, file, ctype string
		want                Metrics
	}{
		{EngineVLLM, "vllm.txt", "", Metrics{Waiting: 3, Running: 7, KVUtil: 0.4213,
			LoRA:           scheduler.LoRAState{Active: []string{"sql-lora"}, Waiting: []string{"chat-lora"}, Max: 4},
			CacheBlockSize: 16, CacheBlocks: 27690}},
		{EngineVLLM, "vllm_openmetrics.txt", "application/openmetrics-text; version=1.0.0; charset=utf-8",
			Metrics{Waiting: 1, Running: 2, KVUtil: 0.5}},
		{EngineSGLang, "sglang.txt", "", Metrics{Waiting: 2826, Running: 162, KVUtil: 0.28}},
		{EngineTGI, "tgi.txt", "", Metrics{Waiting: 5, Running: 12}},
		{EngineTRTLLM, "trtllm.txt", "", Metrics{Waiting: 4, Running: 9, KVUtil: 0.4875, CacheBlockSize: 64, CacheBlocks: 6240}},
	} {
		s := newModelServer(t, readTestdata(t, c.file))
		s.set("body", readTestdata(t, c.file), c.ctype)
		servers[s.addr()] = s
		want[s.addr()] = c.want
		targets = append(targets, Target{Address: s.addr(), Name: c.file, Engine: c.engine, Ready: true,
			Models: []string{"m"}, Labels: map[string]string{"engine": c.engine}, Capacity: 2})
	}
	updates, unsubscribe := h.f.Subscribe()
	defer unsubscribe()
	h.disc.push(targets...)
	select {
	case <-updates:
	default:
		t.Fatal("no notification after a discovery update")
	}
	snap := h.eventually("every endpoint fresh", func(s *Snapshot) bool { return s.Count(scheduler.StateFresh) == len(targets) })
	for i := 1; i < len(snap.Endpoints); i++ {
		if snap.Endpoints[i-1].Address >= snap.Endpoints[i].Address {
			t.Fatalf("endpoints not sorted by address: %s before %s", snap.Endpoints[i-1].Address, snap.Endpoints[i].Address)
		}
	}
	for _, e := range snap.Endpoints {
		w := want[e.Address]
		got := Metrics{Waiting: e.Waiting, Running: e.Running, KVUtil: e.KVUtil, LoRA: e.LoRA,
			CacheBlockSize: e.CacheBlockSize, CacheBlocks: e.CacheBlocks}
		if !metricsEqual(got, w) {
			t.Errorf("%s (%s): got %+v, want %+v", e.Address, e.Name, got, w)
		}
		if e.Capacity != 2 || len(e.Models) != 1 || e.Labels["engine"] == "" || e.ScrapedAt.IsZero() {
			t.Errorf("%s: discovery data not merged: %+v", e.Address, e)
		}
		if e.InFlight() != 0 {
			t.Errorf("%s: snapshot carries in-flight count %d", e.Address, e.InFlight())
		}
	}
	if n := testutil.ToFloat64(h.f.m.changes[ChangeAdded]); n != float64(len(targets)) {
		t.Errorf("added = %v, want %d", n, len(targets))
	}
}

func TestFleetLearnsModelsFromMetrics(t *testing.T) {
	sc := testScrapeConfig()
	sc.MaxAge = time.Hour
	h := newHarness(t, sc)
	s := newModelServer(t, readTestdata(t, "vllm.txt"))
	s.set("body", readTestdata(t, "vllm.txt"), "")
	declared := newModelServer(t, readTestdata(t, "vllm.txt"))
	declared.set("body", readTestdata(t, "vllm.txt"), "")
	h.disc.push(
		Target{Address: s.addr(), Engine: EngineVLLM, Ready: true},
		Target{Address: declared.addr(), Engine: EngineVLLM, Ready: true, Models: []string{"declared"}},
	)
	snap := h.eventually("both fresh", func(s *Snapshot) bool { return s.Count(scheduler.StateFresh) == 2 })
	// No declared models: the model_name of vllm.txt's running series.
	if e := snap.Lookup(s.addr()); e == nil || strings.Join(e.Models, ",") != "meta-llama/Llama-3.1-8B-Instruct" {
		t.Errorf("undeclared endpoint models: %+v", e)
	}
	// Declared models win over what the metrics say.
	if e := snap.Lookup(declared.addr()); e == nil || strings.Join(e.Models, ",") != "declared" {
		t.Errorf("declared endpoint models: %+v", e)
	}
}

func metricsEqual(a, b Metrics) bool {
	return a.Waiting == b.Waiting && a.Running == b.Running && a.KVUtil == b.KVUtil &&
		a.CacheBlockSize == b.CacheBlockSize && a.CacheBlocks == b.CacheBlocks && a.LoRA.Max == b.LoRA.Max &&
		strings.Join(a.LoRA.Active, ",") == strings.Join(b.LoRA.Active, ",") &&
		strings.Join(a.LoRA.Waiting, ",") == strings.Join(b.LoRA.Waiting, ",")
}

func TestFleetBadServers(t *testing.T) {
	good := []byte("vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n")
	tests := []struct {
		name   string
		mode   string
		body   string
		reason string
		// final state while the fault lasts: refused connections and HTTP
		// errors make a server unhealthy after unhealthy_after (3)
		// failures; a hanging server (timeouts) and servers answering
		// unusable metrics go stale after max_age (4 × 50ms).
		state scheduler.State
	}{
		{"http 500", "status", "", ReasonHTTPStatus, scheduler.StateUnhealthy},
		{"hanging server", "hang", "", ReasonTimeout, scheduler.StateStale},
		{"connection refused", "closed", "", ReasonConnect, scheduler.StateUnhealthy},
		{"garbage", "body", "<html>502 Bad Gateway</html>", ReasonParse, scheduler.StateStale},
		{"missing metrics", "body", "vllm:num_requests_running 2\n", ReasonMissingMetric, scheduler.StateStale},
		{"NaN", "body", "vllm:num_requests_waiting NaN\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n", ReasonInvalidValue, scheduler.StateStale},
		{"negative", "body", "vllm:num_requests_waiting 1\nvllm:num_requests_running -2\nvllm:kv_cache_usage_perc 0.5\n", ReasonInvalidValue, scheduler.StateStale},
		{"50 MB chunked body", "huge", "", ReasonTooLarge, scheduler.StateStale},
		{"50 MB Content-Length", "huge-cl", "", ReasonTooLarge, scheduler.StateStale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := testScrapeConfig()
			if tt.mode != "hang" {
				// Only the hanging server is about the timeout; the others
				// must not time out on a busy machine (reading 4 MiB under
				// -race among them), or their reason would be miscounted.
				sc.Timeout = 5 * time.Second
			}
			h := newHarness(t, sc)
			bad := newModelServer(t, good)
			healthy := newModelServer(t, good)
			badAddr := bad.addr()
			h.disc.push(Target{Address: badAddr, Ready: true}, Target{Address: healthy.addr(), Ready: true})
			h.eventually("both fresh", func(s *Snapshot) bool { return s.Count(scheduler.StateFresh) == 2 })

			if tt.mode == "closed" {
				bad.Close()
			} else {
				bad.set(tt.mode, []byte(tt.body), "")
			}
			failures := h.f.m.failures[tt.reason]
			h.eventually(tt.state.String(), func(s *Snapshot) bool {
				return stateOf(badAddr, tt.state)(s) && testutil.ToFloat64(failures) > 0
			})
			// The healthy endpoint kept being scraped meanwhile.
			before := h.f.Load().Lookup(healthy.addr()).ScrapedAt
			h.eventually("healthy endpoint scraped again", func(s *Snapshot) bool {
				e := s.Lookup(healthy.addr())
				return e.State == scheduler.StateFresh && e.ScrapedAt.After(before)
			})
			for _, r := range Reasons {
				if r != tt.reason && testutil.ToFloat64(h.f.m.failures[r]) != 0 {
					t.Errorf("failures{reason=%q} = %v, want 0", r, testutil.ToFloat64(h.f.m.failures[r]))
				}
			}
			if tt.mode == "huge" && bad.written.Load() >= bad.hugeBytes/2 {
				t.Errorf("server wrote %d bytes: the 50 MB body was read, not cut off", bad.written.Load())
			}
			if tt.mode == "closed" {
				return
			}
			// Recovery is automatic once the server answers again.
			bad.set("body", good, "")
			h.eventually("recovered", stateOf(badAddr, scheduler.StateFresh))
		})
	}
}

func TestFleetChurn(t *testing.T) {
	sc := testScrapeConfig()
	h := newHarness(t, sc)
	a, b, c := Target{Address: "127.0.0.1:1", Ready: true, Models: []string{"x"}},
		Target{Address: "127.0.0.1:2", Ready: true}, Target{Address: "127.0.0.1:3", Ready: false}
	count := func() [4]float64 {
		return [4]float64{testutil.ToFloat64(h.f.m.changes[ChangeAdded]), testutil.ToFloat64(h.f.m.changes[ChangeRemoved]),
			testutil.ToFloat64(h.f.m.changes[ChangeReady]), testutil.ToFloat64(h.f.m.changes[ChangeNotReady])}
	}
	addrs := func() string {
		var s []string
		for _, e := range h.f.Load().Endpoints {
			s = append(s, e.Address)
		}
		return strings.Join(s, " ")
	}
	steps := []struct {
		name    string
		targets []Target
		addrs   string
		changes [4]float64 // cumulative added, removed, ready, not_ready
	}{
		// a, b added ready; c added not ready (not published)
		{"initial", []Target{b, a, c}, "127.0.0.1:1 127.0.0.1:2", [4]float64{3, 0, 2, 0}},
		// c becomes ready: +1 ready
		{"c ready", []Target{a, b, {Address: c.Address, Ready: true}}, "127.0.0.1:1 127.0.0.1:2 127.0.0.1:3", [4]float64{3, 0, 3, 0}},
		// a not ready: +1 not_ready; b removed: +1 removed, +1 not_ready
		{"a not ready, b gone", []Target{{Address: a.Address}, {Address: c.Address, Ready: true}}, "127.0.0.1:3", [4]float64{3, 1, 3, 2}},
		// everything removed: +2 removed, +1 not_ready (c was ready)
		{"empty", nil, "", [4]float64{3, 3, 3, 3}},
	}
	for _, st := range steps {
		h.disc.push(st.targets...)
		if got := addrs(); got != st.addrs {
			t.Errorf("%s: snapshot addresses %q, want %q", st.name, got, st.addrs)
		}
		if got := count(); got != st.changes {
			t.Errorf("%s: changes (added, removed, ready, not_ready) = %v, want %v", st.name, got, st.changes)
		}
	}
	// A bad target is reported, the rest installed.
	h.disc.push(Target{Address: "no-port", Ready: true}, a)
	if got := addrs(); got != "127.0.0.1:1" {
		t.Errorf("after bad target: %q", got)
	}
	if n := testutil.ToFloat64(h.f.m.discoveryErrors); n != 1 {
		t.Errorf("discovery errors = %v, want 1", n)
	}
}

func TestFleetRemovedMidScrape(t *testing.T) {
	sc := testScrapeConfig()
	sc.Timeout = time.Minute // only the removal can end the scrape
	h := newHarness(t, sc)
	s := newModelServer(t, nil)
	s.set("hang", nil, "")
	h.disc.push(Target{Address: s.addr(), Ready: true})
	deadline := time.After(10 * time.Second)
	for waiting := true; waiting; {
		select {
		case <-s.arrived:
			waiting = false
		case <-deadline:
			t.Fatal("no scrape arrived")
		case <-time.After(2 * time.Millisecond):
			h.clk.Step(sc.Interval)
		}
	}
	h.disc.push() // the pod is gone while its scrape hangs
	if n := len(h.f.Load().Endpoints); n != 0 {
		t.Fatalf("%d endpoints after removal", n)
	}
	h.stop() // Run returns: the hanging scrape was cancelled and waited for
	for _, r := range Reasons {
		if n := testutil.ToFloat64(h.f.m.failures[r]); n != 0 {
			t.Errorf("failures{reason=%q} = %v after a removal, want 0", r, n)
		}
	}
}

func TestFleetStalenessWithFakeClock(t *testing.T) {
	// No scrape loop: feed results directly and step the clock. max_age
	// defaults to 4 × 50ms = 200ms.
	sc := testScrapeConfig()
	f, err := New(Config{Scrape: sc}, Deps{Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), Discoverer: newListDiscoverer()})
	if err != nil {
		t.Fatal(err)
	}
	clk := f.clock.(*clocktesting.FakeClock)
	f.Update([]Target{{Address: "10.0.0.1:8000", Ready: true}})
	ep := f.eps["10.0.0.1:8000"].ep
	unreach := &ScrapeError{ReasonConnect, errors.New("refused")}
	steps := []struct {
		name  string
		step  time.Duration
		err   error // nil: a successful scrape at the new time
		skip  bool  // no scrape this step
		state scheduler.State
		next  time.Duration
	}{
		{"never scraped", 0, nil, true, scheduler.StateStale, 0},
		{"scraped", 0, nil, false, scheduler.StateFresh, 50 * time.Millisecond},
		// 200ms old = max_age: still fresh (stale means strictly older)
		{"at max age", 200 * time.Millisecond, nil, true, scheduler.StateFresh, 0},
		{"past max age", time.Millisecond, nil, true, scheduler.StateStale, 0},
		{"fresh again", 0, nil, false, scheduler.StateFresh, 50 * time.Millisecond},
		// failures 1 and 2 keep the metrics (fresh until max age)
		{"fail 1", 10 * time.Millisecond, unreach, false, scheduler.StateFresh, 50 * time.Millisecond},
		{"fail 2", 10 * time.Millisecond, unreach, false, scheduler.StateFresh, 50 * time.Millisecond},
		// third failure: unhealthy, back off 2 × 50ms = 100ms
		{"fail 3", 10 * time.Millisecond, unreach, false, scheduler.StateUnhealthy, 100 * time.Millisecond},
		// then 200ms, 400ms (max_backoff 400ms), 400ms
		{"fail 4", 100 * time.Millisecond, unreach, false, scheduler.StateUnhealthy, 200 * time.Millisecond},
		{"fail 5", 200 * time.Millisecond, unreach, false, scheduler.StateUnhealthy, 400 * time.Millisecond},
		{"fail 6", 400 * time.Millisecond, unreach, false, scheduler.StateUnhealthy, 400 * time.Millisecond},
		// data failures do not count towards unhealthy but do not refresh
		{"garbage", 0, &ScrapeError{ReasonParse, errors.New("x")}, false, scheduler.StateStale, 50 * time.Millisecond},
		{"recovered", 0, nil, false, scheduler.StateFresh, 50 * time.Millisecond},
	}
	for _, st := range steps {
		clk.Step(st.step)
		if !st.skip {
			if next := f.record(ep, Metrics{Waiting: 1}, st.err, clk.Now()); next != st.next {
				t.Errorf("%s: next scrape in %v, want %v", st.name, next, st.next)
			}
		}
		f.refresh(false)
		if got := f.Load().Endpoints[0].State; got != st.state {
			t.Errorf("%s: state %v, want %v", st.name, got, st.state)
		}
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		n    int
		want time.Duration
	}{
		{0, 100 * time.Millisecond}, // 2 × 50ms
		{1, 200 * time.Millisecond}, // × 2
		{3, 800 * time.Millisecond}, // 100ms × 2³
		{6, 5 * time.Second},        // 100ms × 2⁶ = 6.4s, capped at 5s
		{1000, 5 * time.Second},     // no overflow
	}
	for _, tt := range tests {
		if got := backoff(50*time.Millisecond, tt.n, 5*time.Second); got != tt.want {
			t.Errorf("backoff(n=%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestFleetMetricNames(t *testing.T) {
	sc := testScrapeConfig()
	sc.MaxAge = time.Hour
	h := newHarness(t, sc)
	s := newModelServer(t, readTestdata(t, "vllm.txt"))
	h.disc.push(Target{Address: s.addr(), Ready: true, Models: []string{"llama"}})
	h.eventually("fresh", stateOf(s.addr(), scheduler.StateFresh))
	h.f.Error(errors.New("bad edit"))
	want := []string{
		"trimtab_fleet_discovery_errors_total", "trimtab_fleet_endpoint_changes_total",
		"trimtab_fleet_endpoint_states", "trimtab_fleet_endpoints", "trimtab_fleet_metrics_age_seconds",
		"trimtab_fleet_refresh_duration_seconds", "trimtab_fleet_scrape_duration_seconds", "trimtab_fleet_scrape_failures_total",
	}
	fams, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		got = append(got, f.GetName())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("metric families\n got %v\nwant %v", got, want)
	}
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(`
# HELP trimtab_fleet_endpoints Ready endpoints in the current snapshot per served model ("*": serves any model).
# TYPE trimtab_fleet_endpoints gauge
trimtab_fleet_endpoints{model="llama"} 1
`), "trimtab_fleet_endpoints"); err != nil {
		t.Error(err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // substring of the error; "" for valid
	}{
		{"default static needs a file", func(c *Config) {}, "endpoints.file: required"},
		{"static ok", func(c *Config) { c.Endpoints.File = "e.yaml" }, ""},
		{"bad mode", func(c *Config) { c.Endpoints.Mode = "dns" }, "endpoints.mode"},
		{"pods needs selector", func(c *Config) {
			c.Endpoints = EndpointsConfig{Mode: ModePods, Namespace: "ns", TargetPort: 8000, Resync: time.Second}
		}, "endpoints.selector: required"},
		{"pods bad selector", func(c *Config) {
			c.Endpoints = EndpointsConfig{Mode: ModePods, Namespace: "ns", Selector: "a in (", TargetPort: 8000, Resync: time.Second}
		}, "endpoints.selector"},
		{"pods ok", func(c *Config) {
			c.Endpoints = EndpointsConfig{Mode: ModePods, Namespace: "ns", Selector: "app=vllm", TargetPort: 8000, Resync: time.Second}
		}, ""},
		{"slices need service and namespace", func(c *Config) {
			c.Endpoints = EndpointsConfig{Mode: ModeEndpointSlices, Resync: time.Second}
		}, "endpoints.service: required"},
		{"pool needs name", func(c *Config) {
			c.Endpoints = EndpointsConfig{Mode: ModeInferencePool, Namespace: "ns", Resync: time.Second}
		}, "endpoints.pool: required"},
		{"interval", func(c *Config) { c.Endpoints.File = "e"; c.Scrape.Interval = 0 }, "scrape.interval: must be > 0"},
		{"max_age below interval", func(c *Config) { c.Endpoints.File = "e"; c.Scrape.MaxAge = time.Millisecond }, "scrape.max_age"},
		{"engine", func(c *Config) { c.Endpoints.File = "e"; c.Scrape.Engine = "llamacpp" }, "scrape.engine"},
		{"bad override", func(c *Config) { c.Endpoints.File = "e"; c.Scrape.Metrics.Waiting = []string{"1bad"} }, "scrape.metrics.waiting"},
		{"body limit", func(c *Config) { c.Endpoints.File = "e"; c.Scrape.MaxBodyBytes = 0 }, "scrape.max_body_bytes"},
		{"path", func(c *Config) { c.Endpoints.File = "e"; c.Scrape.Path = "metrics" }, "scrape.path"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mutate(&c)
		err := c.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want it to mention %q", tt.name, err, tt.want)
		}
	}
}
