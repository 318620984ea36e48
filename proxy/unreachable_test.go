package proxy

import (
	"context"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
)

// setStates installs addrs serving "m" with the given metrics states.
func setStates(s *scheduler.Scheduler, addrs []string, states []scheduler.State) {
	eps := make([]scheduler.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = scheduler.Endpoint{Address: a, Models: []string{"m"}, State: states[i]}
	}
	s.SetEndpoints(eps)
}

// Every endpoint unreachable (its scrapes keep failing): ext_proc must not
// name a dead endpoint but answer 503; merely stale metrics still fail open.
func TestExtProcAllUnreachableIs503(t *testing.T) {
	tests := []struct {
		name     string
		states   []scheduler.State
		wantDest string // "" means a 503 immediate response
	}{
		{name: "all unreachable", states: []scheduler.State{scheduler.StateUnhealthy, scheduler.StateUnhealthy}},
		// a is preferred but unreachable; b is stale: fail open picks b alone.
		{name: "stale fails open, unreachable dropped", states: []scheduler.State{scheduler.StateUnhealthy, scheduler.StateStale}, wantDest: epB},
		{name: "all stale fail open", states: []scheduler.State{scheduler.StateStale, scheduler.StateStale}, wantDest: epA + "," + epB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, preferOrder(epA, epB), epA, epB)
			setStates(f.sched, []string{epA, epB}, tt.states)
			cfg := DefaultConfig()
			cfg.ExtProc.DestinationFallbacks = true
			c, _, _ := startExtProc(t, cfg, f)
			s := openStream(t, context.Background(), c)
			s.send(requestHeaders(false, nil, duplex))
			s.send(requestBody([]byte(`{"model":"m","prompt":"x"}`), true))
			r := s.recv()
			if tt.wantDest == "" {
				checkImmediate(t, r, 503, "endpoints_unreachable", true)
				f.noMoreOutcomes(t)
				return
			}
			if got := destination(t, r.GetRequestHeaders().GetResponse(), r.GetDynamicMetadata()); got != tt.wantDest {
				t.Errorf("destination %q, want %q", got, tt.wantDest)
			}
			s.recv() // body
			_ = s.s.CloseSend()
			f.outcome(t)
			f.waitIdle(t)
		})
	}
}

// The HTTP proxy answers 503 too, without dialling the dead endpoints.
func TestHTTPAllUnreachableIs503(t *testing.T) {
	up := newUpstream(t) // alive, but its scrapes are reported failing
	dead := deadAddr(t)
	f := newFixture(t, preferOrder(up.addr, dead), up.addr, dead)
	setStates(f.sched, []string{up.addr, dead}, []scheduler.State{scheduler.StateUnhealthy, scheduler.StateUnhealthy})
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	resp := post(t, "http://"+addr+"/v1/completions", `{"model":"m","prompt":"x"}`, nil)
	body := readAll(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || errorCode(t, body) != "endpoints_unreachable" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, body %q, Retry-After %q: want 503 endpoints_unreachable with Retry-After", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if n := up.hits.Load(); n != 0 {
		t.Errorf("unreachable endpoint got %d requests, want 0", n)
	}
	f.noMoreOutcomes(t)
}
