package fleet

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// TestFleetRecoveredAt: a scrape that answers after unreachable failures
// (refused connections, HTTP errors, timeouts) stamps RecoveredAt with its
// time, in the next snapshot; one after unusable answers does not (the
// server was up all along).
func TestFleetRecoveredAt(t *testing.T) {
	good := []byte("vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n")
	tests := []struct {
		name, mode, body string
		state            scheduler.State // while the fault lasts
		want             bool            // RecoveredAt set after the fault
	}{
		{"http 500", "status", "", scheduler.StateUnhealthy, true},
		{"garbage", "body", "<html>502 Bad Gateway</html>", scheduler.StateStale, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := testScrapeConfig()
			sc.Timeout = 5 * time.Second
			h := newHarness(t, sc)
			srv := newModelServer(t, good)
			addr := srv.addr()
			h.disc.push(Target{Address: addr, Ready: true})
			h.eventually("fresh", stateOf(addr, scheduler.StateFresh))
			if e := h.f.Load().Lookup(addr); !e.RecoveredAt.IsZero() {
				t.Fatalf("RecoveredAt = %v before any failure, want zero", e.RecoveredAt)
			}
			srv.set(tt.mode, []byte(tt.body), "")
			h.eventually(tt.state.String(), stateOf(addr, tt.state))
			faultEnd := h.clk.Now()
			srv.set("body", good, "")
			s := h.eventually("fresh again", stateOf(addr, scheduler.StateFresh))
			e := s.Lookup(addr)
			if !tt.want {
				if !e.RecoveredAt.IsZero() {
					t.Errorf("RecoveredAt = %v after unusable answers, want zero", e.RecoveredAt)
				}
				return
			}
			// The recovering scrape's time: after the fault ended and no later
			// than the snapshot's scrape (the poll, stepping the fake clock
			// while scrapes run, may first see a snapshot one scrape later)…
			if e.RecoveredAt.IsZero() || e.RecoveredAt.After(e.ScrapedAt) || e.RecoveredAt.Before(faultEnd) {
				t.Errorf("RecoveredAt = %v, ScrapedAt %v, fault ended %v: want the recovering scrape's time", e.RecoveredAt, e.ScrapedAt, faultEnd)
			}
			// … and it stays that time on the scrapes after it.
			rec, at := e.RecoveredAt, e.ScrapedAt
			s = h.eventually("a later scrape", func(s *Snapshot) bool {
				e := s.Lookup(addr)
				return e != nil && e.ScrapedAt.After(at)
			})
			if got := s.Lookup(addr).RecoveredAt; !got.Equal(rec) {
				t.Errorf("RecoveredAt moved to %v on a later scrape, want it kept at %v", got, rec)
			}
		})
	}
}

// upstream is a model server on 127.0.0.1: /metrics answers vLLM metrics,
// any other path a completion, counted.
type upstream struct {
	srv  *httptest.Server
	hits atomic.Int64
}

func startUpstream(t *testing.T, l net.Listener) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			io.WriteString(w, "vllm:num_requests_waiting 0\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.2\n")
			return
		}
		u.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	if l != nil {
		u.srv.Listener.Close()
		u.srv.Listener = l
	}
	u.srv.Start()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

// prefer scores the endpoint at addr 1 and the others 0.5, so every pick
// that may go there does.
type prefer struct{ addr string }

func (prefer) Category() scheduler.Category { return scheduler.CategoryNone }
func (p prefer) Score(_ *scheduler.CycleState, _ *scheduler.Request, eps []*scheduler.Endpoint, out []float64) {
	for i, e := range eps {
		out[i] = 0.5
		if e.Address == p.addr {
			out[i] = 1
		}
	}
}

// TestRestartedUpstreamGetsTrafficAgain runs the fleet (scraping every
// 50 ms, on the real clock) feeding a real scheduler, and sends requests
// over HTTP the way the proxy does (on a refused connection, the next
// fallback). The favourite upstream is killed: its requests fail, it is
// ejected (30 s, the default). It restarts on the same port: within a few
// scrape intervals of answering its scrapes again it takes requests again,
// not after its 30 s ejection.
func TestRestartedUpstreamGetsTrafficAgain(t *testing.T) {
	fav, other := startUpstream(t, nil), startUpstream(t, nil)
	sc := DefaultConfig().Scrape
	// Requests, not scrapes, must find the killed upstream: marked
	// unhealthy it would get none and never be ejected. The requests below
	// fail 5 times within milliseconds on an idle machine; on a loaded one
	// they can take longer than 10 failed scrapes (0.5 s: the likely cause
	// of one failure in a gate run beside an oracle run), so here
	// scrapes never mark it unhealthy (1,000 failures take 50 s) and keep
	// their interval; the scrape that succeeds after failures is still
	// what makes it half-open.
	sc.UnhealthyAfter = 1000
	disc := newListDiscoverer()
	f, err := New(Config{Scrape: sc}, Deps{Discoverer: disc})
	if err != nil {
		t.Fatal(err)
	}
	cfg := scheduler.DefaultConfig()
	sched, err := scheduler.New(cfg, []scheduler.ScorerEntry{{Name: "prefer", Scorer: prefer{fav.addr()}, Weight: 1}},
		[]scheduler.Filter{scheduler.HealthyFilter{}}, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr, feedErr := make(chan error, 1), make(chan error, 1)
	go func() { runErr <- f.Run(ctx) }()
	go func() { feedErr <- f.Feed(ctx, sched) }()
	defer func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := <-feedErr; err != nil {
			t.Errorf("Feed: %v", err)
		}
	}()
	favAddr := fav.addr()
	disc.push(Target{Address: favAddr, Ready: true}, Target{Address: other.addr(), Ready: true})

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	send := func() {
		d, err := sched.Pick(context.Background(), &scheduler.Request{Arrival: time.Now()})
		if err != nil {
			return // no snapshot yet
		}
		for {
			resp, err := client.Post("http://"+d.Endpoint.Address+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi"}`))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				d.Done(scheduler.Outcome{Kind: scheduler.OutcomeSuccess, Status: resp.StatusCode})
				return
			}
			if !d.Advance() {
				d.Done(scheduler.Outcome{Kind: scheduler.OutcomeError})
				return
			}
		}
	}
	ejected := func() bool {
		for _, e := range sched.Pool().Pointers() {
			if e.Address == favAddr {
				return e.Ejected(time.Now())
			}
		}
		return false
	}
	// until sends requests, pause apart, until cond holds.
	until := func(what string, limit, pause time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > limit {
				t.Fatalf("%s: not within %v", what, limit)
			}
			send()
			time.Sleep(pause)
		}
		return time.Since(start)
	}
	const pause = 5 * time.Millisecond

	until("the favourite serves", 10*time.Second, pause, func() bool { return fav.hits.Load() > 0 })
	fav.srv.Close()
	until("the killed upstream is ejected", 10*time.Second, 0, ejected)
	// Down for a second: its scrapes fail; requests go to the other
	// upstream.
	down := time.Now()
	until("a second down", 10*time.Second, pause, func() bool { return time.Since(down) > time.Second })
	if !ejected() {
		t.Fatal("the killed upstream is back in service before it restarted: the test proves nothing")
	}
	l, err := net.Listen("tcp", favAddr)
	if err != nil {
		t.Fatalf("restart on %s: %v", favAddr, err)
	}
	back := startUpstream(t, l)
	// Its next scrape comes within an interval (50ms), the snapshot
	// within another, the trial with the next request: about 0.1 s. 3 s leaves room for a loaded machine and is a tenth of
	// the 30 s ejection.
	took := until("the restarted upstream takes requests", 3*time.Second, pause, func() bool { return back.hits.Load() > 0 })
	t.Logf("restarted upstream took its first request %v after it listened again", took)
	until("readmitted", 3*time.Second, pause, func() bool { return !ejected() })
	n := back.hits.Load()
	for range 20 {
		send()
	}
	if got := back.hits.Load() - n; got != 20 {
		t.Errorf("readmitted favourite took %d of the next 20 requests, want 20", got)
	}
}
