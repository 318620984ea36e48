package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/sim/scenario"
)

// testScenario is a short closed-loop scenario on servers servers: a calm
// phase of 2 clients, then 6 clients with a hot system prompt.
func testScenario(t *testing.T, servers int, d time.Duration) *scenario.Scenario {
	return testScenarioW(t, servers, d, "{kind: shared-prefix, groups: 4, prompts_per_group: 8, system_tokens: 600, question_tokens: 40, output_tokens: 12}")
}

func testScenarioW(t *testing.T, servers int, d time.Duration, workload string) *scenario.Scenario {
	t.Helper()
	h := d / 3
	sc, err := scenario.Parse([]byte(fmt.Sprintf(`
name: test
duration: %v
warmup: %v
servers: %d
timeout: 10s
workload: %s
load: {mode: closed, levels: [6]}
phases:
  - {name: calm, duration: %v, level: 2}
  - {name: burst, duration: %v, workload: {hot_fraction: 0.8, hot_system_tokens: 1200}}
`, d, d/10, servers, workload, h, d-h)), "")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// serveFleet starts n fakeservers (sped up 20 times) that stop with the test.
func serveFleet(t *testing.T, sc *scenario.Scenario, n int) []Target {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	targets, err := StartFleet(gctx, g, sc, n, 20)
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	if err != nil {
		t.Fatal(err)
	}
	return targets
}

func counter() func() uint64 {
	var n atomic.Uint64
	return func() uint64 { return 0x5eed0000 + n.Add(1) }
}

// TestSaltingPreventsCarryOver: the same bench twice against one server
// that keeps its cache, compared request by request on the cached tokens
// the server reports. One client sends the seed's requests one at a time,
// so the server's cache when request i arrives depends only on the
// requests before it, and the KV cache (40,000 blocks of 16 tokens)
// holds both runs (at most ~220 requests of 400 tokens, 25 blocks, each
// in 2 s at speed 20, fewer than 11,000 blocks): nothing is evicted. With
// a fresh salt per run, the second run's prompts share no block with the
// first's, so its request i finds exactly what the first run's request i
// found; with the same salt, request i finds at least that, and the
// first request (nothing cached in the first run) finds the first run's
// prompt cached. The wall clock only decides how many requests each run
// sends; the comparison covers the ones both sent.
func TestSaltingPreventsCarryOver(t *testing.T) {
	if testing.Short() {
		t.Skip("two real-time bench runs: skipped under -short")
	}
	cached := func(salt func() uint64) [2][]int {
		sc, err := scenario.Parse([]byte(`
name: salt
duration: 2s
warmup: 200ms
servers: 1
timeout: 10s
engine: {num_blocks: 40000}
workload: {kind: shared-prefix, groups: 512, prompts_per_group: 1, system_tokens: 300, question_tokens: 100, output_tokens: 12}
load: {mode: closed, levels: [1]}
`), "")
		if err != nil {
			t.Fatal(err)
		}
		tg := serveFleet(t, sc, 1)
		var out [2][]int
		for i := range out {
			cfg := Config{Scenario: sc, TimeScale: 1, Repeat: 1, Seed: 1, Targets: tg,
				RouterURL: "http://" + tg[0].Address, Policies: []Policy{{Name: "direct"}}}
			rep, err := Run(context.Background(), cfg, Deps{Salt: salt})
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range rep.Runs[0].Requests {
				if q.Err != "" || !q.CachedKnown {
					t.Fatalf("run %d: request failed (%q) or reported no cached_tokens", i+1, q.Err)
				}
				out[i] = append(out[i], q.CachedTokens)
			}
		}
		n := min(len(out[0]), len(out[1]))
		if n < 10 {
			t.Fatalf("runs sent %d and %d requests, want ≥ 10 each", len(out[0]), len(out[1]))
		}
		out[0], out[1] = out[0][:n], out[1][:n]
		return out
	}
	salted := cached(counter())
	differ := 0
	for i := range salted[0] {
		if salted[1][i] != salted[0][i] {
			if differ == 0 {
				t.Errorf("salted runs: request %d found %d tokens cached in the second run, %d in the first; want equal (no carry-over)", i, salted[1][i], salted[0][i])
			}
			differ++
		}
	}
	if differ > 0 {
		t.Errorf("salted runs: %d of %d requests found another number of tokens cached in the second run", differ, len(salted[0]))
	}
	same := cached(func() uint64 { return 42 })
	more, sum0, sum1 := 0, 0, 0
	for i := range same[0] {
		if same[1][i] < same[0][i] {
			t.Fatalf("same salt: request %d found %d cached in the second run, fewer than the first's %d", i, same[1][i], same[0][i])
		}
		if same[1][i] > same[0][i] {
			more++
		}
		sum0, sum1 = sum0+same[0][i], sum1+same[1][i]
	}
	if same[0][0] != 0 || same[1][0] == 0 || more == 0 {
		t.Errorf("same salt twice: first request cached %d then %d, %d of %d requests found more; want carry-over", same[0][0], same[1][0], more, len(same[0]))
	}
	t.Logf("%d and %d requests compared; same salt: %d requests found more, cached tokens %d then %d", len(salted[0]), len(same[0]), more, sum0, sum1)
}

// faulty is an upstream that answers every third request with a 500 and
// cuts every third stream before [DONE]; the rest complete.
type faulty struct{ n atomic.Int64 }

func (f *faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k := f.n.Add(1)
	if k%3 == 0 {
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a \"}]}\n\n")
	w.(http.Flusher).Flush()
	if k%3 == 1 {
		return // cut: no [DONE]
	}
	fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"b \"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\ndata: [DONE]\n\n")
}

// TestErrorsAreCounted: every request ends in the summary, as a success
// or as an error of its kind (http_500, cut_stream); none is dropped.
func TestErrorsAreCounted(t *testing.T) {
	f := &faulty{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	sc := testScenario(t, 1, 1500*time.Millisecond)
	sc.Warmup = 0
	cfg := Config{Scenario: sc, TimeScale: 1, Repeat: 1, Seed: 1, RouterURL: "http://" + ln.Addr().String(), Policies: []Policy{{Name: "faulty"}}}
	rep, err := Run(context.Background(), cfg, Deps{Salt: counter()})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Summaries()[0]
	sent := int(f.n.Load())
	cut, five := s.Errors[ErrCutStream], s.Errors["http_500"]
	// Every third request is a 500 and every third a cut stream (± 1 for
	// where the count stops); measured = sent (no warm-up).
	if s.Measured != sent || cut < sent/3 || five < sent/3 || cut > sent/3+1 || five > sent/3+1 {
		t.Errorf("sent %d: measured %d, errors %v", sent, s.Measured, s.Errors)
	}
	if s.Failed != cut+five || s.TimedOut != 0 {
		t.Errorf("failed %d, timed out %d; want %d, 0", s.Failed, s.TimedOut, cut+five)
	}
	// The successes reported 4 of 10 prompt tokens cached.
	if s.CachedTokenRatio == nil || *s.CachedTokenRatio != 0.4 {
		t.Errorf("cached_token_ratio %v, want 0.4", s.CachedTokenRatio)
	}
	if !strings.Contains(fmt.Sprint(s.Errors), "http_500") {
		t.Errorf("errors %v lack http_500", s.Errors)
	}
}

func TestValidate(t *testing.T) {
	sc := testScenario(t, 1, time.Second)
	good := Config{Scenario: sc, TimeScale: 1, Repeat: 1, RouterURL: "http://x", Policies: []Policy{{Name: "a"}}}
	d := Deps{Salt: counter()}
	prof, err := configs.LoadShipped("default")
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Validate(&d); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config, *Deps){
		"no scenario":       func(c *Config, _ *Deps) { c.Scenario = nil },
		"time scale 0":      func(c *Config, _ *Deps) { c.TimeScale = 0 },
		"repeat 0":          func(c *Config, _ *Deps) { c.Repeat = 0 },
		"no policy":         func(c *Config, _ *Deps) { c.Policies = nil },
		"no salt":           func(_ *Config, d *Deps) { d.Salt = nil },
		"no router":         func(c *Config, _ *Deps) { c.RouterURL = "" },
		"negative level":    func(c *Config, _ *Deps) { c.Levels = []float64{-1} },
		"profile, no start": func(c *Config, _ *Deps) { c.Policies[0].Profile = prof },
	} {
		c, dd := good, d
		c.Policies = append([]Policy(nil), good.Policies...)
		mut(&c, &dd)
		if err := c.Validate(&dd); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
