package fakeserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// start runs a server 1000× faster than the modelled GPU on a loopback
// listener and stops it when the test ends.
func start(t *testing.T, mutate func(*Config)) (*Server, string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TimeScale = 1000
	cfg.Name = "fake-test"
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, "http://" + ln.Addr().String()
}

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestCompletionsNonStreaming(t *testing.T) {
	_, base := start(t, nil)
	resp := post(t, base+"/v1/completions", `{"model":"llama-3.1-8b-instruct","prompt":"hello world, this is a prompt","max_tokens":5}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if resp.Header.Get("X-Fakeserver-Name") != "fake-test" {
		t.Errorf("X-Fakeserver-Name = %q", resp.Header.Get("X-Fakeserver-Name"))
	}
	var out struct {
		Object  string `json:"object"`
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	// 29 prompt bytes / 4 bytes per token, rounded up = 8 tokens.
	if out.Object != "text_completion" || len(out.Choices) != 1 || out.Usage.CompletionTokens != 5 || out.Usage.PromptTokens != 8 {
		t.Errorf("response %+v", out)
	}
	if got := strings.Count(out.Choices[0].Text, " "); got != 5 {
		t.Errorf("text %q has %d words, want 5", out.Choices[0].Text, got)
	}
}

func TestChatStreaming(t *testing.T) {
	_, base := start(t, nil)
	resp := post(t, base+"/v1/chat/completions", `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":4,"stream":true}`)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var chunks []string
	done := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			done = true
			break
		}
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if c.Object != "chat.completion.chunk" {
			t.Errorf("object %q", c.Object)
		}
		if len(chunks) == 0 && c.Choices[0].Delta.Role != "assistant" {
			t.Errorf("first chunk has no assistant role: %s", data)
		}
		chunks = append(chunks, c.Choices[0].Delta.Content)
	}
	if !done {
		t.Fatal("stream ended without [DONE]")
	}
	// One chunk per token: 4 tokens → 4 chunks, the last with the finish
	// reason.
	if len(chunks) != 4 || strings.Count(strings.Join(chunks, ""), " ") != 4 {
		t.Errorf("chunks %q, want 4 one-word chunks", chunks)
	}
}

func TestCompletionsStreamingOneToken(t *testing.T) {
	_, base := start(t, nil)
	resp := post(t, base+"/v1/completions", `{"prompt":["a","b"],"max_tokens":1,"stream":true}`)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	// The first token is also the last: one data chunk, then [DONE].
	if n := strings.Count(string(b), "data: {"); n != 1 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Errorf("stream %q: want one chunk then [DONE]", b)
	}
}

func TestErrors(t *testing.T) {
	_, base := start(t, nil)
	tests := []struct {
		path, body string
		status     int
		msg        string
	}{
		{"/v1/completions", `{`, 400, "invalid JSON body"},
		{"/v1/completions", `{"prompt":""}`, 400, "prompt: must not be empty"},
		{"/v1/completions", `{"model":"other","prompt":"x"}`, 404, "does not exist"},
		{"/v1/completions", `{"prompt":"x","max_tokens":0}`, 400, "max_tokens must be in"},
		{"/v1/chat/completions", `{"messages":[]}`, 400, "messages: at least one"},
		{"/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400, "messages[0].role: required"},
	}
	for _, tt := range tests {
		resp := post(t, base+tt.path, tt.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.msg) {
			t.Errorf("POST %s %s: %d %s, want %d with %q", tt.path, tt.body, resp.StatusCode, b, tt.status, tt.msg)
		}
	}
}

func TestModelsAndMetrics(t *testing.T) {
	_, base := start(t, func(c *Config) { c.Model = "m1" })
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != "m1" {
		t.Errorf("models %+v", models)
	}

	// The same 2,000-byte prompt twice: the second finds its full blocks
	// (except the block holding the last token) in the prefix cache.
	prompt := strings.Repeat("abcd", 500) // 500 tokens = 31 full blocks + 4 tokens
	for range 2 {
		r := post(t, base+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":2}`)
		_, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	fams := scrape(t, base)
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cache_config_info"} {
		if fams[name] == nil {
			t.Errorf("metric %s missing", name)
		}
	}
	cfg := fams["vllm:cache_config_info"].GetMetric()[0]
	labels := map[string]string{}
	for _, l := range cfg.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["block_size"] != "16" || labels["num_gpu_blocks"] != "9000" {
		t.Errorf("cache_config_info labels %v", labels)
	}
	// Queried 2 × 500 tokens; the second hit 31 blocks × 16 = 496 tokens.
	if q := value(fams, "vllm:prefix_cache_queries_total"); q != 1000 {
		t.Errorf("prefix queries %v, want 1000", q)
	}
	if h := value(fams, "vllm:prefix_cache_hits_total"); h != 496 {
		t.Errorf("prefix hits %v, want 496", h)
	}
	if g := value(fams, "vllm:generation_tokens_total"); g != 4 {
		t.Errorf("generation tokens %v, want 4", g)
	}
}

func TestConcurrentRequestsAndCancel(t *testing.T) {
	s, base := start(t, func(c *Config) { c.TimeScale = 200 })
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := `{"prompt":"request ` + strings.Repeat("x", i*100) + `","max_tokens":20,"stream":` + map[bool]string{true: "true", false: "false"}[i%2 == 0] + `}`
			resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}()
	}
	// One client that gives up early: its sequence must leave the engine.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/completions", strings.NewReader(`{"prompt":"slow","max_tokens":4000}`))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		idle := s.eng.Idle()
		s.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("engine still busy 5 s after every client finished or left")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHandlerWithHTTPTest(t *testing.T) {
	// The Handler can be mounted without Serve, as long as Run runs.
	s, err := New(DefaultConfig(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.TimeScale = 1000
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	resp := post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":3}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
	if r, _ := http.Get(ts.URL + "/health"); r == nil || r.StatusCode != 200 {
		t.Errorf("health: %v", r)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.Model = "" }, "fakeserver.model: must be set"},
		{func(c *Config) { c.TimeScale = 0 }, "fakeserver.time_scale: must be a finite number > 0"},
		{func(c *Config) { c.DefaultMaxTokens = 0 }, "fakeserver.default_max_tokens: must be ≥ 1"},
		{func(c *Config) { c.Engine.NumBlocks = 0 }, "engine.num_blocks: must be > 0"},
		{func(c *Config) { c.Adapters = []string{"a", "a"} }, "fakeserver.adapters[1]"},
		{func(c *Config) { c.Adapters = []string{strings.Repeat("n", 257)} }, "fakeserver.adapters[0]"},
		{func(c *Config) { c.Adapters = make([]string, MaxAdapters+1) }, "fakeserver.adapters: 1025 adapters, at most 1024"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate() = %v, want %q", err, tt.want)
		}
	}
}

func FuzzRenderMessages(f *testing.F) {
	f.Add(`[{"role":"user","content":"hi"}]`)
	f.Add(`[{"role":"system","content":[{"type":"text","text":"a"}]},{"role":"user","content":null}]`)
	f.Fuzz(func(t *testing.T, in string) {
		var msgs []Message
		if json.Unmarshal([]byte(in), &msgs) != nil {
			return
		}
		b, err := RenderMessages(msgs)
		if err == nil && len(b) == 0 {
			t.Fatal("rendered nothing without an error")
		}
	})
}

func scrape(t *testing.T, base string) map[string]*dtoFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func value(fams map[string]*dtoFamily, name string) float64 {
	f := fams[name]
	if f == nil || len(f.GetMetric()) == 0 {
		return -1
	}
	m := f.GetMetric()[0]
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

type dtoFamily = dto.MetricFamily

func TestMetricsGolden(t *testing.T) {
	// A fresh server's exposition, in vLLM's names (testdata golden file).
	s, err := New(DefaultConfig(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join("testdata", "metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(s.reg, f); err != nil {
		t.Error(err)
	}
}

// TestStreamReportsServerTTFT: a stream's usage chunk carries the
// server's own time to first token, from the handler's start to the
// first token's write: above 0 and at most the TTFT the client measured
// around it (the first token is written before the client reads it and
// long before the last of 48 tokens).
func TestStreamReportsServerTTFT(t *testing.T) {
	_, base := start(t, func(c *Config) { c.TimeScale = 10 })
	sent := time.Now()
	resp := post(t, base+"/v1/completions", `{"prompt":"`+strings.Repeat("word ", 2000)+`","max_tokens":48,"stream":true,"stream_options":{"include_usage":true}}`)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var clientTTFT time.Duration
	var server *float64
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Fakeserver *struct {
				TTFTMs float64 `json:"ttft_ms"`
			} `json:"fakeserver"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if clientTTFT == 0 && len(c.Choices) > 0 && c.Choices[0].Text != "" {
			clientTTFT = time.Since(sent)
		}
		if c.Fakeserver != nil {
			server = &c.Fakeserver.TTFTMs
		}
	}
	if server == nil {
		t.Fatal("no fakeserver.ttft_ms in the stream")
	}
	if got := time.Duration(*server * float64(time.Millisecond)); got <= 0 || got > clientTTFT {
		t.Errorf("server TTFT %v, want in (0, %v] (the client's TTFT)", got, clientTTFT)
	}
}
