package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/sim/scenario"
)

// agentScenario is a small agentic scenario: one scaffold of 600 tokens,
// tasks of 40, tool calls of 8 and results of 60 tokens, 4 turns.
func agentScenario(t *testing.T, api, keys string) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Parse([]byte(fmt.Sprintf(`
name: agents
duration: 4s
warmup: 400ms
servers: 2
timeout: 10s
workload: {kind: agentic, api: %s, session_keys: %s, groups: 1, system_tokens: 600, question_tokens: 40, output_tokens: 8,
  tool_output_tokens: 60, tool_latency: 50ms, turns: 4, fan_out: 1, sub_agent_turns: 2}
load: {mode: closed, levels: [4]}
`, api, keys)), "")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestAgentRequestShapes: each API's body carries the scaffold as system
// prompt and tool, the task first, and every earlier turn as a tool call
// and its result; a Responses continuation with a known previous response
// sends only the new tool result.
func TestAgentRequestShapes(t *testing.T) {
	tests := []struct {
		api, prev string
		turn      int
		path      string
		items     int // input items (Responses) or messages (Messages)
	}{
		{scenario.AgentAPIResponses, "", 0, pathResponses, 1},         // the task
		{scenario.AgentAPIResponses, "resp_a-7", 2, pathResponses, 1}, // turn 1's result
		{scenario.AgentAPIResponses, "", 2, pathResponses, 5},         // task + 2 × (call, result)
		{scenario.AgentAPIMessages, "", 0, pathMessages, 1},           // the task
		{scenario.AgentAPIMessages, "resp_a-7", 2, pathMessages, 5},   // task + 2 × (tool_use, tool_result)
	}
	for _, tt := range tests {
		sc := agentScenario(t, tt.api, "lineage")
		rd, err := scenario.NewRenderer(sc, 1, 3, "")
		if err != nil {
			t.Fatal(err)
		}
		var r scenario.Rendered
		for range tt.turn + 1 {
			r = rd.Next(0, 0)
		}
		path, body := agentRequest("m", &r, tt.prev)
		var b struct {
			Instructions, System string
			PreviousResponseID   string `json:"previous_response_id"`
			Tools                []struct{ Description string }
			Input, Messages      []map[string]any
			Stream               bool
			MaxOutputTokens      int `json:"max_output_tokens"`
			MaxTokens            int `json:"max_tokens"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatal(err)
		}
		items := len(b.Input) + len(b.Messages)
		sys := b.Instructions + b.System
		if path != tt.path || items != tt.items || !b.Stream || b.MaxOutputTokens+b.MaxTokens != 8 || len(b.Tools) != 1 ||
			len(sys)+len(b.Tools[0].Description) != 600*4 {
			t.Errorf("%s turn %d prev %q: %s, %d items, stream %v, system %d + tool %d bytes; want %s, %d items, 2,400 bytes of scaffold",
				tt.api, tt.turn, tt.prev, path, items, b.Stream, len(sys), len(b.Tools[0].Description), tt.path, tt.items)
		}
		if want := tt.prev; tt.api == scenario.AgentAPIMessages || tt.turn == 0 {
			if b.PreviousResponseID != "" {
				t.Errorf("%s turn %d: previous_response_id %q", tt.api, tt.turn, b.PreviousResponseID)
			}
		} else if b.PreviousResponseID != want {
			t.Errorf("%s turn %d: previous_response_id %q, want %q", tt.api, tt.turn, b.PreviousResponseID, want)
		}
		if tt.api == scenario.AgentAPIMessages && tt.items == 5 {
			if b.Messages[1]["role"] != "assistant" || !strings.Contains(string(body), `"type":"tool_result"`) {
				t.Errorf("messages %v", b.Messages)
			}
		}
	}
}

// TestAgentSessionOnAFakeServer: one agent session per API, sent turn by
// turn to a real fake server. Every turn streams to the end with its
// usage; each continuation finds the turn before it in the server's
// prefix cache (the earlier prompt's whole 16-token blocks: cached ≥ its
// prompt − 15); the Responses chain names each response. A Responses
// continuation that does not name one (as after a failure) resends the
// conversation with bench's tool calls where the server stored its own
// output, so it hits the cache up to the first turn's output: ≥ the first
// prompt − 15.
func TestAgentSessionOnAFakeServer(t *testing.T) {
	for _, api := range []string{scenario.AgentAPIResponses, scenario.AgentAPIMessages} {
		sc := agentScenario(t, api, "header")
		tg := serveFleet(t, sc, 1)
		rd, err := scenario.NewRenderer(sc, 1, 9, "")
		if err != nil {
			t.Fatal(err)
		}
		var prev, first Request
		for turn := range 4 {
			r := rd.Next(0, 0)
			id := prev.ResponseID
			if turn == 2 {
				id = "" // as after a failure
			}
			res := send(context.Background(), http.DefaultClient, clock.RealClock{}, "http://"+tg[0].Address, sc.Model, &r, id, 30*time.Second)
			if res.Err != "" || !res.PromptKnown || !res.CachedKnown || res.Tokens != 8 || res.TTFT <= 0 || res.Continuation != (turn > 0) {
				t.Fatalf("%s turn %d: %+v", api, turn, res)
			}
			if (api == scenario.AgentAPIResponses) != strings.HasPrefix(res.ResponseID, "resp_pod-0-") {
				t.Errorf("%s turn %d: response id %q", api, turn, res.ResponseID)
			}
			hit := prev.PromptTokens - 15
			if turn == 2 && api == scenario.AgentAPIResponses {
				hit = first.PromptTokens - 15
			}
			if turn == 0 {
				first = res
			} else if res.CachedTokens < hit || res.PromptTokens <= prev.PromptTokens+60 {
				t.Errorf("%s turn %d: %d prompt tokens, %d cached; the turn before had %d", api, turn, res.PromptTokens, res.CachedTokens, prev.PromptTokens)
			}
			prev = res
		}
	}
}

// TestAgentBenchSummary: a short bench of agent sessions straight to a
// fake server (no router) records continuations and the continuation hit
// ratio in its summary and its tables, for both APIs.
func TestAgentBenchSummary(t *testing.T) {
	if testing.Short() {
		t.Skip("two real-time bench runs: skipped under -short")
	}
	for _, api := range []string{scenario.AgentAPIResponses, scenario.AgentAPIMessages} {
		sc := agentScenario(t, api, "header")
		tg := serveFleet(t, sc, 1)
		cfg := Config{Scenario: sc, TimeScale: 0.5, Repeat: 1, Seed: 1, Targets: tg,
			RouterURL: "http://" + tg[0].Address, Policies: []Policy{{Name: "direct"}}}
		rep, err := Run(context.Background(), cfg, Deps{Salt: counter()})
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Runs[0].Summary(sc.Name)
		var tables strings.Builder
		if err := rep.WriteTables(&tables); err != nil || !strings.Contains(tables.String(), "| direct | 0.") ||
			!strings.Contains(tables.String(), "| continuation hit ratio | herd picks |") {
			t.Errorf("%s: tables without the agent table (%v):\n%s", api, err, tables.String())
		}
		conts := 0
		for _, q := range rep.Runs[0].Requests {
			if q.Continuation {
				conts++
			}
		}
		// One server holds every conversation: most of a continuation's
		// prompt is the turn before it.
		if s.Misses != 0 || conts < 4 || s.ContinuationHitRatio == nil || *s.ContinuationHitRatio < 0.7 || s.CachedTokenRatio == nil {
			t.Errorf("%s: %d misses, %d continuations, continuation hit ratio %v, cached ratio %v", api, s.Misses, conts,
				s.ContinuationHitRatio, s.CachedTokenRatio)
		}
	}
}

// TestChainsBound: the player remembers at most maxChains sessions'
// response ids, forgetting the oldest first.
func TestChainsBound(t *testing.T) {
	var c chains
	for s := uint64(1); s <= maxChains+10; s++ {
		c.set(s, fmt.Sprint("resp_", s))
	}
	c.set(maxChains+10, "resp_again") // an update takes no new place
	if n := len(c.last); n != maxChains {
		t.Errorf("%d sessions held, want %d", n, maxChains)
	}
	// Sessions 1…10 went first; 11 and the last stay.
	if c.get(10) != "" || c.get(11) != "resp_11" || c.get(maxChains+10) != "resp_again" {
		t.Errorf("got %q, %q, %q", c.get(10), c.get(11), c.get(maxChains+10))
	}
}

// TestReadAgentStreamEnds: a stream counts as complete only with its
// API's last event; an error event or a stream that stops early is cut.
func TestReadAgentStreamEnds(t *testing.T) {
	tests := []struct {
		name, stream  string
		done          bool
		prompt, cache int
	}{
		{"responses", `data: {"type":"response.created","response":{"id":"resp_1"}}` + "\n" +
			`data: {"type":"response.output_text.delta","delta":"hi"}` + "\n" +
			`data: {"type":"response.completed","response":{"id":"resp_1","usage":{"input_tokens":90,"input_tokens_details":{"cached_tokens":64},"output_tokens":1}}}` + "\n",
			true, 90, 64},
		{"responses cut", `data: {"type":"response.created","response":{"id":"resp_1"}}` + "\n", false, 0, 0},
		{"responses failed", `data: {"type":"response.failed","response":{"id":"resp_1"}}` + "\n", false, 0, 0},
		// Messages: 10 uncached + 64 read + 16 written = 90.
		{"messages", `data: {"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":64,"cache_creation_input_tokens":16,"output_tokens":1}}}` + "\n" +
			`data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}` + "\n" +
			`data: {"type":"message_delta","usage":{"output_tokens":1}}` + "\n" + `data: {"type":"message_stop"}` + "\n",
			true, 90, 64},
		{"messages error", `data: {"type":"message_start","message":{"usage":{"input_tokens":10}}}` + "\n" +
			`data: {"type":"error","error":{"type":"overloaded_error"}}` + "\n", false, 0, 0},
	}
	for _, tt := range tests {
		var res Request
		done := readAgentStream(strings.NewReader(tt.stream), clock.RealClock{}, time.Now(), &res)
		if done != tt.done || res.PromptTokens != tt.prompt || res.CachedTokens != tt.cache {
			t.Errorf("%s: done %v, prompt %d, cached %d; want %v, %d, %d", tt.name, done, res.PromptTokens, res.CachedTokens, tt.done, tt.prompt, tt.cache)
		}
		if tt.done && res.Tokens != 1 {
			t.Errorf("%s: %d tokens", tt.name, res.Tokens)
		}
	}
}

// FuzzReadAgentStream: any server reply reads without a panic, with
// counts ≥ 0 and an id of at most 256 bytes.
func FuzzReadAgentStream(f *testing.F) {
	f.Add(`data: {"type":"response.completed","response":{"id":"resp_1","usage":{"input_tokens":-3,"output_tokens":-1}}}`)
	f.Add(`data: {"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":-4}}}` + "\ndata: {\"type\":\"message_stop\"}")
	f.Add(`data: {"type":"content_block_delta","delta":"x"}`)
	f.Fuzz(func(t *testing.T, s string) {
		var res Request
		readAgentStream(strings.NewReader(s), clock.RealClock{}, time.Now(), &res)
		if res.Tokens < 0 || res.PromptTokens < 0 || res.CachedTokens < 0 || len(res.ResponseID) > 256 {
			t.Errorf("%+v", res)
		}
	})
}
