package loadgen

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim/fakeserver"
)

func TestQuantile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 5},   // rank round(0.5·10) = 5 → 5th smallest
		{0.9, 9},   // rank 9
		{0.99, 10}, // rank round(9.9) = 10
		{0, 1},     // rank 0 → clamped to the first
	} {
		if got := Quantile(ds, tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("empty quantile not 0")
	}
}

func TestTextIsDeterministicAndSized(t *testing.T) {
	a, b, c := text(1, 0, 100), text(1, 0, 100), text(2, 0, 100)
	if a != b || a == c || len(a) != 400 {
		t.Errorf("text: len %d, same seed equal %v, other seed differs %v", len(a), a == b, a != c)
	}
}

func TestValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"no url":       func(c *Config) { c.URL = "" },
		"no phases":    func(c *Config) { c.Phases = nil },
		"bad fraction": func(c *Config) { c.HotFraction = 2 },
		"zero output":  func(c *Config) { c.OutputTokens = 0 },
		"bad phase":    func(c *Config) { c.Phases[0].Concurrency = 0 },
	} {
		cfg := DefaultConfig()
		cfg.URL = "http://127.0.0.1:1"
		mut(&cfg)
		if cfg.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRunAgainstFakeServer(t *testing.T) {
	fcfg := fakeserver.DefaultConfig()
	fcfg.TimeScale = 20
	srv, err := fakeserver.New(fcfg, fakeserver.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { _ = srv.Serve(ctx, ln); close(served) }()
	defer func() { cancel(); <-served }()

	cfg := DefaultConfig()
	cfg.URL = "http://" + ln.Addr().String()
	cfg.Phases = []Phase{{Name: "a", Duration: 300 * time.Millisecond, Concurrency: 2}, {Name: "b", Duration: 300 * time.Millisecond, Concurrency: 3}}
	cfg.HotSystemTokens, cfg.SystemTokens, cfg.OutputTokens = 200, 100, 4
	g, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	res := g.Run(context.Background())
	phases := map[int]int{}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("request failed: %v", r.Err)
		}
		// max_tokens 4 → four streamed chunks; the first one sets TTFT.
		if r.Tokens != 4 || r.TTFT <= 0 || r.E2E < r.TTFT {
			t.Errorf("result %+v", r)
		}
		phases[r.Phase]++
	}
	if phases[0] == 0 || phases[1] == 0 {
		t.Errorf("requests per phase %v, want some in both", phases)
	}
	s := g.Stats()
	if s.Requests != len(res) || s.Failed != 0 || s.TTFTp99 < s.TTFTp50 {
		t.Errorf("stats %+v", s)
	}
}
