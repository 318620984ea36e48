package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestServeAgentAPIsFollowTheSystemPrompt runs serve (static 3:2:2:1
// profile) in front of three simulated vLLM servers. One warm-up request
// puts an 8k-token system prompt on a pod; then streamed /v1/responses
// and /v1/messages requests that share it, with their own turns, must all
// be routed to that pod (x-trimtab-endpoint), the pod must report the
// system prompt's tokens as read from its prefix cache, and each stream
// must arrive intact, every event of its API in order.
func TestServeAgentAPIsFollowTheSystemPrompt(t *testing.T) {
	addrs := startFakeFleet(t, 3)
	ts := startService(t, addrs, false)

	var sb strings.Builder
	for i := 0; sb.Len() < 8192*4; i++ { // 8k tokens of ~4 bytes
		fmt.Fprintf(&sb, "Rule %d: keep every answer short and cite the file you read. ", i)
	}
	system, _ := json.Marshal(sb.String())
	responses := func(input string) string {
		return fmt.Sprintf(`{"model":"llama-3.1-8b-instruct","stream":true,"max_output_tokens":4,"instructions":%s,`+
			`"tools":[{"type":"function","name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}],`+
			`"input":[{"role":"user","content":[{"type":"input_text","text":%q}]}]}`, system, input)
	}
	messages := func(input string) string {
		return fmt.Sprintf(`{"model":"llama-3.1-8b-instruct","stream":true,"max_tokens":4,"system":%s,`+
			`"tools":[{"name":"read_file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}],`+
			`"messages":[{"role":"user","content":%q}]}`, system, input)
	}
	responsesEvents := "response.created response.in_progress response.output_item.added response.content_part.added " +
		"response.output_text.delta… response.output_text.done response.content_part.done response.output_item.done response.completed"
	messagesEvents := "message_start content_block_start ping content_block_delta… content_block_stop message_delta message_stop"

	warm := streamAgent(t, ts.proxyURL+"/v1/responses", responses("warm up: list the files"), responsesEvents)
	tests := []struct {
		path, body, events string
	}{
		{"/v1/responses", responses("which file defines the parser?"), responsesEvents},
		{"/v1/messages", messages("and which one defines the scorer?"), messagesEvents},
		{"/v1/messages", messages("summarise both"), messagesEvents},
		{"/v1/responses", responses("thanks"), responsesEvents},
	}
	for _, tt := range tests {
		got := streamAgent(t, ts.proxyURL+tt.path, tt.body, tt.events)
		if got.endpoint != warm.endpoint {
			t.Errorf("%s went to %s, want %s, the pod holding the system prompt", tt.path, got.endpoint, warm.endpoint)
		}
		// The system prompt is ≥ 8,192 tokens; the pod read them from its cache.
		if got.cached < 8192 {
			t.Errorf("%s: %d prompt tokens read from the cache, want ≥ 8192", tt.path, got.cached)
		}
	}
}

type agentResult struct {
	endpoint string
	cached   int // prompt tokens the server read from its prefix cache
}

// streamAgent posts a streamed request, checks it succeeds and that its
// events come in the order want gives ("x…" for a run of x), and
// returns where it went and the cached token count its usage reports.
func streamAgent(t *testing.T, url, body, want string) agentResult {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%s: status %d, content-type %q", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	res := agentResult{endpoint: resp.Header.Get("X-Trimtab-Endpoint")}
	var seq []string
	var text, deltas strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d struct {
				Type     string `json:"type"`
				Delta    json.RawMessage
				Text     string
				Response struct {
					Usage struct {
						Details struct {
							Cached int `json:"cached_tokens"`
						} `json:"input_tokens_details"`
					}
				}
				Usage struct {
					CacheRead int `json:"cache_read_input_tokens"`
				}
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil || d.Type != event {
				t.Fatalf("%s: event %q with data %s (%v)", url, event, line, err)
			}
			if n := len(seq); n > 0 && (seq[n-1] == event || seq[n-1] == event+"…") {
				seq[n-1] = event + "…"
			} else {
				seq = append(seq, event)
			}
			switch event {
			case "response.output_text.delta":
				var s string
				_ = json.Unmarshal(d.Delta, &s)
				deltas.WriteString(s)
			case "response.output_text.done":
				text.WriteString(d.Text)
			case "content_block_delta":
				var td struct{ Text string }
				_ = json.Unmarshal(d.Delta, &td)
				deltas.WriteString(td.Text)
				text.WriteString(td.Text)
			case "response.completed":
				res.cached = d.Response.Usage.Details.Cached
			case "message_delta":
				res.cached = d.Usage.CacheRead
			}
		case line == "":
		default:
			t.Fatalf("%s: unexpected line %q", url, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: stream broke: %v", url, err)
	}
	if got := strings.Join(seq, " "); got != want {
		t.Fatalf("%s: events\n  %s\nwant\n  %s", url, got, want)
	}
	// four tokens of the fake server's text, in order
	if deltas.String() != "lorem ipsum dolor sit " || text.String() != deltas.String() {
		t.Errorf("%s: deltas %q, text %q", url, deltas.String(), text.String())
	}
	return res
}
