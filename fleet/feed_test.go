package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// poolSink records what Feed installs.
type poolSink struct {
	mu   sync.Mutex
	last []scheduler.Endpoint
	n    int
}

func (p *poolSink) SetEndpoints(eps []scheduler.Endpoint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last, p.n = eps, p.n+1
}

func (p *poolSink) addrs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out string
	for _, e := range p.last {
		out += e.Address + " "
	}
	return out
}

// TestFeed: Feed installs the snapshot in force at once, then every new
// one, and returns nil when its context ends.
func TestFeed(t *testing.T) {
	h := newHarness(t, testScrapeConfig())
	s := newModelServer(t, readTestdata(t, "vllm.txt"))
	h.disc.push(Target{Address: s.addr(), Ready: true})
	h.eventually("first endpoint", stateOf(s.addr(), scheduler.StateFresh))

	sink := &poolSink{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.f.Feed(ctx, sink) }()
	wait := func(what, want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); sink.addrs() != want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: installed %q, want %q", what, sink.addrs(), want)
			}
		}
	}
	wait("snapshot at start", s.addr()+" ")
	s2 := newModelServer(t, readTestdata(t, "vllm.txt"))
	h.disc.push(Target{Address: s.addr(), Ready: true}, Target{Address: s2.addr(), Ready: true})
	h.eventually("second endpoint", stateOf(s2.addr(), scheduler.StateFresh))
	wait("after discovery", h.f.Load().Endpoints[0].Address+" "+h.f.Load().Endpoints[1].Address+" ")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Feed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Feed did not return after cancel")
	}
}
