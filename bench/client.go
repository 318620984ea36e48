package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/sim/scenario"
)

// Error kinds counted in RunSummary.Errors. An HTTP status error is
// "http_<code>".
const (
	ErrCutStream = "cut_stream" // the stream ended without [DONE]
	ErrTimeout   = "timeout"    // the scenario's request timeout expired
	ErrConnect   = "connect"    // no response (connection refused, reset, …)
	ErrCanceled  = "canceled"   // the bench was stopped
)

// Request is one request a run sent.
type Request struct {
	Phase int
	// Scheduled and Sent are offsets from the run's start: when the
	// workload meant the request to leave and when it left.
	Scheduled, Sent time.Duration
	// Measured: scheduled inside the measurement window (after the
	// warm-up, before the end).
	Measured bool
	// Endpoint is the pod that served it (x-trimtab-endpoint; "" unknown).
	Endpoint string
	// TTFT is 0 when no token arrived.
	TTFT, E2E time.Duration
	// ServerTTFT is the server's own time to first token, which a trimtab
	// fakeserver reports in a stream's usage chunk ({"fakeserver":
	// {"ttft_ms": …}}); 0 when the server reported none.
	ServerTTFT time.Duration
	// Gaps are the times between consecutive chunks with text (ITL).
	Gaps []time.Duration
	// Tokens is usage.completion_tokens, or the chunks with text.
	Tokens, PromptTokens, CachedTokens int
	// IntendedTokens is the prompt's size in the scenario's tokens.
	IntendedTokens int
	// PromptKnown: the server reported usage (prompt_tokens);
	// CachedKnown: it reported cached_tokens.
	PromptKnown, CachedKnown bool
	// Session is the agent session (scenario.AgentTurn.Session; 0 outside
	// agentic workloads); Continuation: a turn after its first.
	Session      uint64
	Continuation bool
	// ResponseID is a Responses response's id ("" otherwise).
	ResponseID string
	// Err is "" for success, else the error kind.
	Err string
	// Class indexes RunResult.Classes (−1: the scenario names no class);
	// Timeout is the client timeout it was sent with (its class's).
	Class   int
	Timeout time.Duration
	// DropReason is the router's X-Trimtab-Drop-Reason when flow control
	// refused it ("" otherwise).
	DropReason string
}

// maxServerTTFTMs bounds a server's reported time to first token (an
// hour); a value outside (0, maxServerTTFTMs] is ignored.
const maxServerTTFTMs = 3.6e6

// headerDropReason is the header a trimtab router's flow control sets on
// a request it refuses (flow.HeaderDropReason).
const headerDropReason = "X-Trimtab-Drop-Reason"

type chunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		Details          *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Fakeserver *struct {
		TTFTMs float64 `json:"ttft_ms"`
	} `json:"fakeserver"`
}

type completionBody struct {
	Model         string         `json:"model"`
	Prompt        string         `json:"prompt"`
	MaxTokens     int            `json:"max_tokens"`
	IgnoreEOS     bool           `json:"ignore_eos"`
	Stream        bool           `json:"stream"`
	StreamOptions map[string]any `json:"stream_options"`
}

// send posts one streaming /v1/completions request, r's prompt rendered
// as words (promptWords), or an agent turn in its API's shape
// (agentRequest, continuing response prev), and reads it to the end,
// timing it on clk from start. timeout bounds the whole request.
func send(ctx context.Context, hc *http.Client, clk clock.PassiveClock, url, model string, r *scenario.Rendered, prev string, timeout time.Duration) Request {
	return sendAs(ctx, hc, clk, url, model, r, prev, timeout, nil)
}

// sendAs is send for a request of class cls, which carries the class's
// headers (scenario.ClassHeaders: band, tenant's API key, TTL; nil: none).
func sendAs(ctx context.Context, hc *http.Client, clk clock.PassiveClock, url, model string, r *scenario.Rendered, prev string, timeout time.Duration, cls *scenario.RequestClass) Request {
	path, read := "/v1/completions", readStream
	var body []byte
	if r.Agent != nil {
		read = readAgentStream
		path, body = agentRequest(model, r, prev)
	} else {
		body, _ = json.Marshal(completionBody{Model: model, Prompt: string(promptWords(make([]byte, 0, len(r.Prompt)), r.Prompt)), MaxTokens: r.OutputTokens,
			IgnoreEOS: true, Stream: true, StreamOptions: map[string]any{"include_usage": true}})
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := clk.Now()
	res := Request{IntendedTokens: len(r.Prompt) / scenario.BytesPerToken, Continuation: r.Agent != nil && r.Agent.Turn > 0, Class: -1, Timeout: timeout}
	if r.Agent != nil {
		res.Session = r.Agent.Session
	}
	fail := func(kind string) Request {
		res.E2E = clk.Since(start)
		switch {
		case ctx.Err() != nil:
			res.Err = ErrCanceled
		case rctx.Err() != nil:
			res.Err = ErrTimeout
		default:
			res.Err = kind
		}
		return res
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url+path, bytes.NewReader(body))
	if err != nil {
		return fail(ErrConnect)
	}
	req.Header.Set("Content-Type", "application/json")
	if r.SessionID != "" {
		req.Header.Set("x-session-id", r.SessionID)
	}
	for _, h := range scenario.ClassHeaders {
		if v := cls.Header(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fail(ErrConnect)
	}
	defer resp.Body.Close()
	res.Endpoint = resp.Header.Get("x-trimtab-endpoint")
	res.DropReason = resp.Header.Get(headerDropReason)
	if resp.StatusCode != http.StatusOK {
		return fail("http_" + strconv.Itoa(resp.StatusCode))
	}
	done := read(resp.Body, clk, start, &res)
	if !done {
		if rctx.Err() != nil {
			return fail(ErrTimeout)
		}
		return fail(ErrCutStream)
	}
	res.E2E = clk.Since(start)
	return res
}

// readStream reads an OpenAI SSE stream into res: TTFT and gaps between
// chunks with text (timed on clk from start), tokens and the usage. It
// reports whether the stream ended with [DONE]. Lines that are not
// "data: " lines, and chunks that are not JSON, are skipped.
func readStream(body io.Reader, clk clock.PassiveClock, start time.Time, res *Request) bool {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var last time.Duration
	chunks := 0
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if bytes.Equal(data, []byte("[DONE]")) {
			if res.Tokens == 0 {
				res.Tokens = chunks
			}
			return true
		}
		var c chunk
		if json.Unmarshal(data, &c) != nil {
			continue
		}
		if u := c.Usage; u != nil {
			res.Tokens, res.PromptTokens, res.PromptKnown = max(u.CompletionTokens, 0), max(u.PromptTokens, 0), true
			if u.Details != nil && u.Details.CachedTokens != nil {
				res.CachedTokens, res.CachedKnown = max(*u.Details.CachedTokens, 0), true
			}
		}
		if f := c.Fakeserver; f != nil && f.TTFTMs > 0 && f.TTFTMs <= maxServerTTFTMs {
			res.ServerTTFT = time.Duration(f.TTFTMs * float64(time.Millisecond))
		}
		if len(c.Choices) == 0 || c.Choices[0].Text == "" && c.Choices[0].Delta.Content == "" {
			continue
		}
		now := clk.Since(start)
		if chunks == 0 {
			res.TTFT = now
		} else {
			res.Gaps = append(res.Gaps, now-last)
		}
		last = now
		chunks++
	}
	return false
}
