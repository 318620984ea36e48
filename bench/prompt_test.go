package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim/scenario"
)

// wordServer is an OpenAI-compatible upstream whose tokenizer splits on
// white space, like llm-d-inference-sim's: it reports prompt_tokens as the
// prompt's word count, or fixed when fixed > 0. It records every prompt.
type wordServer struct {
	fixed int

	mu      sync.Mutex
	prompts []string
}

func (s *wordServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Prompt string `json:"prompt"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<24)).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.prompts = append(s.prompts, body.Prompt)
	s.mu.Unlock()
	n := len(strings.Fields(body.Prompt))
	if s.fixed > 0 {
		n = s.fixed
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"a \"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n", n)
}

func (s *wordServer) start(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestPromptsAreWords: a server whose tokenizer splits on white space
// counts about the intended number of tokens in every prompt bench sends
// (within 20 %; the intended size is the prompt's bytes ÷ 4, the
// simulator's bytes per token, which the word rendering keeps), and bench
// raises no prompt-size warning.
func TestPromptsAreWords(t *testing.T) {
	ws := &wordServer{}
	url := ws.start(t)
	sc := testScenario(t, 1, time.Second)
	var logs bytes.Buffer
	cfg := Config{Scenario: sc, TimeScale: 1, Repeat: 1, Seed: 1, RouterURL: url, Policies: []Policy{{Name: "direct"}}}
	rep, err := Run(context.Background(), cfg, Deps{Salt: counter(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ws.mu.Lock()
	prompts := ws.prompts
	ws.mu.Unlock()
	if len(prompts) < 5 {
		t.Fatalf("%d requests, want ≥ 5", len(prompts))
	}
	for i, p := range prompts {
		// The test scenario's prompts are 600 or 1,200 system tokens and
		// a 40-token question: 640 or 1,240 tokens, 2,560 or 4,960 bytes.
		want := len(p) / scenario.BytesPerToken
		if got := len(strings.Fields(p)); got < want*8/10 || got > want*12/10 || want < 600 {
			t.Fatalf("prompt %d: %d words in %d bytes, want %d ± 20 %%", i, got, len(p), want)
		}
	}
	pc := rep.Runs[0].PromptCheck
	if pc.Reported == 0 || pc.Off != 0 || pc.Ratio < 0.8 || pc.Ratio > 1.2 {
		t.Errorf("prompt check %+v: want every request reported, none off, ratio ≈ 1", pc)
	}
	if strings.Contains(logs.String(), "prompt_tokens") {
		t.Errorf("unexpected warning:\n%s", logs.String())
	}
}

// TestPromptTokenWarning: a server that reports prompt_tokens: 1 for
// prompts of 640 and more tokens is off by far more than 2×: bench logs a
// warning, counts every request off in the run's PromptCheck and says so
// in the report.
func TestPromptTokenWarning(t *testing.T) {
	ws := &wordServer{fixed: 1}
	url := ws.start(t)
	sc := testScenario(t, 1, time.Second)
	var logs bytes.Buffer
	cfg := Config{Scenario: sc, TimeScale: 1, Repeat: 1, Seed: 1, RouterURL: url, Policies: []Policy{{Name: "direct"}}}
	rep, err := Run(context.Background(), cfg, Deps{Salt: counter(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	pc := rep.Runs[0].PromptCheck
	// Every successful request reported 1 token for ≥ 640 intended: off,
	// and the median ratio is at most 1/640.
	ok := len(rep.Runs[0].Requests) - Summarise(rep.Runs[0].Requests, 0, 0, scenario.SLO{}).Failed
	if pc.Reported != ok || pc.Off != ok || pc.Ratio > 1.0/640 {
		t.Errorf("prompt check %+v, want %d reported and off, ratio ≤ 1/640", pc, ok)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "prompt_tokens") {
		t.Errorf("no warning logged:\n%s", logs.String())
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md, "-", "cmd", "setup"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "prompt_tokens") || !strings.Contains(md.String(), "⚠") {
		t.Errorf("report has no prompt-size warning:\n%s", md.String())
	}
}

// TestPromptWordsKeepSharing: the word rendering is a function of each
// token's bytes alone, so it keeps the renderer's prefix sharing: the
// same request renders the same text twice, every prompt keeps its length
// (4 bytes a token), and any two prompts share exactly as many leading
// tokens as their letters did (a different token turns into the same
// word with chance 1/1024, so the fixed seeds here see none).
func TestPromptWordsKeepSharing(t *testing.T) {
	sc := testScenario(t, 1, time.Second)
	r, err := scenario.NewRenderer(sc, 3, 0x5eed, "")
	if err != nil {
		t.Fatal(err)
	}
	var raw, words [][]byte
	for i := range 40 {
		p := r.Next(1, i%6).Prompt // the burst: 80 % share a hot prefix
		raw = append(raw, p)
		w := promptWords(nil, p)
		if !bytes.Equal(w, promptWords(nil, p)) {
			t.Fatalf("request %d rendered two ways", i)
		}
		if len(w) != len(p) {
			t.Fatalf("request %d: %d bytes, want %d", i, len(w), len(p))
		}
		words = append(words, w)
	}
	tokens := func(a, b []byte) int {
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		return n / scenario.BytesPerToken
	}
	long := 0
	for i := range raw {
		for j := range i {
			x, y := tokens(raw[i], raw[j]), tokens(words[i], words[j])
			if x != y {
				t.Errorf("requests %d and %d: %d leading tokens shared as letters, %d as words", j, i, x, y)
			}
			if x >= 1200 {
				long++
			}
		}
	}
	if long == 0 {
		t.Error("no pair shares the hot prefix: the test checks nothing")
	}
	if got := string(words[0][:16]); strings.Count(got, " ") != 4 {
		t.Errorf("%q: want four three-letter words", got)
	}
}
