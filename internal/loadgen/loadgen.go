// Package loadgen drives an OpenAI-compatible endpoint with a closed-loop,
// phased chat workload in which one long system prompt can dominate — the
// hot-prefix pattern that herds traffic under static prefix affinity — and
// measures what clients see: time to first token, end-to-end latency,
// output tokens, and which endpoint served each request.
//
// Concurrency: Run starts Phase.Concurrency worker goroutines per phase and
// waits for all of them before it returns; Stats may be read at any time.
// The workload is deterministic for a seed: two runs against two targets
// send the same requests in the same per-worker order, so they compare.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Phase is a stretch of constant closed-loop concurrency.
type Phase struct {
	Name        string        `mapstructure:"name"`
	Duration    time.Duration `mapstructure:"duration"`
	Concurrency int           `mapstructure:"concurrency"`
}

// Config describes the workload.
type Config struct {
	// URL is the base URL of the OpenAI-compatible server ("http://127.0.0.1:8080").
	URL string
	// Model is sent as "model".
	Model string
	// Phases run in order.
	Phases []Phase
	// Seed makes the request sequence reproducible.
	Seed uint64
	// HotFraction of requests share the hot system prompt, in [0,1].
	HotFraction float64
	// HotSystemTokens is the hot system prompt's length in tokens.
	HotSystemTokens int
	// Groups other system prompts of SystemTokens tokens share the rest.
	Groups, SystemTokens int
	// QuestionTokens is each request's own part.
	QuestionTokens int
	// OutputTokens is max_tokens.
	OutputTokens int
	// Timeout bounds one request (0: none beyond the context).
	Timeout time.Duration
}

// DefaultConfig is the demo's hot-prefix burst, the simulator's
// hot-prefix-burst scenario scaled to a few servers: calm, a burst in which
// 90 % of requests share one 6,000-token system prompt (the rest spread
// over 16 groups of 1,000-token prompts), calm again.
func DefaultConfig() Config {
	return Config{
		Model: "llama-3.1-8b-instruct",
		Phases: []Phase{
			{Name: "calm", Duration: 15 * time.Second, Concurrency: 4},
			{Name: "burst", Duration: 30 * time.Second, Concurrency: 64},
			{Name: "calm again", Duration: 15 * time.Second, Concurrency: 4},
		},
		Seed:            1,
		HotFraction:     0.9,
		HotSystemTokens: 6000,
		Groups:          16,
		SystemTokens:    1000,
		QuestionTokens:  150,
		OutputTokens:    150,
		Timeout:         60 * time.Second,
	}
}

// Validate checks the config.
func (c Config) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("loadgen: URL is required")
	case len(c.Phases) == 0:
		return errors.New("loadgen: at least one phase is required")
	case c.HotFraction < 0 || c.HotFraction > 1:
		return fmt.Errorf("loadgen: hot fraction %v, want [0,1]", c.HotFraction)
	case c.HotSystemTokens < 0 || c.SystemTokens < 0 || c.QuestionTokens < 1 || c.OutputTokens < 1 || c.Groups < 1:
		return errors.New("loadgen: token counts must be ≥ 0 (question and output ≥ 1) and groups ≥ 1")
	}
	for i, p := range c.Phases {
		if p.Duration <= 0 || p.Concurrency < 1 {
			return fmt.Errorf("loadgen: phase %d (%s): duration must be > 0 and concurrency ≥ 1", i, p.Name)
		}
	}
	return nil
}

// TotalDuration is the sum of the phases.
func (c Config) TotalDuration() time.Duration {
	var d time.Duration
	for _, p := range c.Phases {
		d += p.Duration
	}
	return d
}

// Result is one finished request.
type Result struct {
	Phase    int
	Endpoint string
	TTFT     time.Duration // 0 when no token arrived
	E2E      time.Duration
	Tokens   int
	Hot      bool
	Err      error
}

// Generator runs the workload. Create with New.
type Generator struct {
	cfg    Config
	client *http.Client
	clk    clock.PassiveClock

	hot    string
	groups []string

	mu      sync.Mutex
	results []Result
	phase   int
	started time.Time
}

// Deps are the generator's collaborators; nil means a default HTTP client
// and the real clock.
type Deps struct {
	Client *http.Client
	Clock  clock.PassiveClock
}

// New builds a generator; prompts are synthesised once here.
func New(cfg Config, deps Deps) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Generator{cfg: cfg, client: deps.Client, clk: deps.Clock}
	if g.client == nil {
		g.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	}
	if g.clk == nil {
		g.clk = clock.RealClock{}
	}
	g.hot = text(cfg.Seed, 0, cfg.HotSystemTokens)
	for i := 0; i < cfg.Groups; i++ {
		g.groups = append(g.groups, text(cfg.Seed, uint64(i+1), cfg.SystemTokens))
	}
	return g, nil
}

var words = strings.Fields("the model serves tokens from a cache of prefix blocks while the router " +
	"weighs affinity against load so that no pod drowns and none idles during a burst of traffic")

// text returns about n tokens (4 bytes each) of deterministic prose.
func text(seed, stream uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, stream))
	var b strings.Builder
	for b.Len() < 4*n {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:4*n]
}

// Run plays the phases in order and returns every result. It stops early,
// returning what finished, when ctx is done.
func (g *Generator) Run(ctx context.Context) []Result {
	g.mu.Lock()
	g.started = g.clk.Now()
	g.mu.Unlock()
	for i, p := range g.cfg.Phases {
		g.mu.Lock()
		g.phase = i
		g.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, p.Duration)
		var wg sync.WaitGroup
		for w := 0; w < p.Concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.worker(pctx, ctx, i, w)
			}()
		}
		wg.Wait()
		cancel()
		if ctx.Err() != nil {
			break
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.results)
}

// worker sends requests back to back until the phase ends. A request in
// flight when the phase ends finishes (bounded by the timeout and ctx).
func (g *Generator) worker(phaseCtx, ctx context.Context, phase, w int) {
	r := rand.New(rand.NewPCG(g.cfg.Seed+uint64(phase)*7919, uint64(w)))
	for n := 0; phaseCtx.Err() == nil; n++ {
		hot := r.Float64() < g.cfg.HotFraction
		system := g.hot
		if !hot {
			system = g.groups[r.IntN(len(g.groups))]
		}
		question := fmt.Sprintf("[p%d w%d n%d] ", phase, w, n) + text(r.Uint64(), uint64(n), g.cfg.QuestionTokens)
		res := g.do(ctx, system, question)
		res.Phase, res.Hot = phase, hot
		g.mu.Lock()
		g.results = append(g.results, res)
		g.mu.Unlock()
	}
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (g *Generator) do(ctx context.Context, system, question string) Result {
	body, _ := json.Marshal(map[string]any{
		"model":      g.cfg.Model,
		"messages":   []message{{"system", system}, {"user", question}},
		"max_tokens": g.cfg.OutputTokens,
		"stream":     true,
	})
	if g.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.cfg.Timeout)
		defer cancel()
	}
	start := g.clk.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.cfg.URL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return Result{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		return Result{Err: err, E2E: g.clk.Since(start)}
	}
	defer resp.Body.Close()
	res := Result{Endpoint: resp.Header.Get("x-trimtab-endpoint")}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		res.Err = fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
		res.E2E = g.clk.Since(start)
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if bytes.Equal(data, []byte("[DONE]")) {
			done = true
			break
		}
		if res.Tokens == 0 {
			res.TTFT = g.clk.Since(start)
		}
		res.Tokens++
	}
	res.E2E = g.clk.Since(start)
	switch {
	case sc.Err() != nil:
		res.Err = sc.Err()
	case !done:
		res.Err = errors.New("stream ended without [DONE]")
	}
	return res
}

// Stats summarises results so far.
type Stats struct {
	Phase, Requests, Failed, Tokens int
	Elapsed                         time.Duration
	TTFTp50, TTFTp90, TTFTp99       time.Duration
	E2Ep50, E2Ep99                  time.Duration
	ByEndpoint                      map[string]int
}

// Stats summarises every result so far, live.
func (g *Generator) Stats() Stats {
	g.mu.Lock()
	res := slices.Clone(g.results)
	phase, started := g.phase, g.started
	g.mu.Unlock()
	s := Summarise(res)
	s.Phase = phase
	if !started.IsZero() {
		s.Elapsed = g.clk.Since(started)
	}
	return s
}

// Summarise computes Stats over results (Elapsed and Phase are left 0).
func Summarise(res []Result) Stats {
	s := Stats{ByEndpoint: map[string]int{}}
	var ttft, e2e []time.Duration
	for _, r := range res {
		s.Requests++
		if r.Err != nil {
			s.Failed++
			continue
		}
		s.Tokens += r.Tokens
		s.ByEndpoint[r.Endpoint]++
		ttft = append(ttft, r.TTFT)
		e2e = append(e2e, r.E2E)
	}
	s.TTFTp50, s.TTFTp90, s.TTFTp99 = Quantile(ttft, 0.5), Quantile(ttft, 0.9), Quantile(ttft, 0.99)
	s.E2Ep50, s.E2Ep99 = Quantile(e2e, 0.5), Quantile(e2e, 0.99)
	return s
}

// Quantile returns the q-quantile (nearest rank) of ds, 0 for none. It
// sorts ds in place.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
