package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/sim/scenario"
)

// Agent turns (workload kind agentic) go out in their API's own shape,
// streamed, as the simulator models them (scenario.AgentTurn):
//   - Messages (POST /v1/messages): system and tools from the scaffold, then
//     the task as the first user message and every earlier turn as an
//     assistant tool_use and a user tool_result, resent each turn.
//   - Responses (POST /v1/responses): instructions and tools from the
//     scaffold; the first turn's input is the task; a continuation names
//     the previous turn's response (previous_response_id) and sends only
//     the new function_call_output, so the server rebuilds the rest. When
//     the previous response is unknown (its turn failed) the continuation
//     resends the whole conversation as input items instead.
//
// The scaffold's words are split in two: the first half is the system
// prompt, the second the description of the one tool, "run".

// Paths of the agent APIs.
const (
	pathMessages  = "/v1/messages"
	pathResponses = "/v1/responses"
)

// agentParts splits an agent turn's prompt rendered as words into the
// system prompt, the tool description, the task, and the earlier turns'
// tool calls and results (calls[k], results[k]). Parts missing from a cut
// prompt are empty.
func agentParts(words []byte, a *scenario.AgentTurn) (system, tool, task string, calls, results []string) {
	part := func(i int) string {
		off := 0
		for j := 0; j < i && j < len(a.Parts); j++ {
			off += a.Parts[j]
		}
		if i >= len(a.Parts) || off >= len(words) {
			return ""
		}
		return string(words[off:min(off+a.Parts[i], len(words))])
	}
	scaffold := part(0)
	half := len(scaffold) / 2 &^ 3 // whole words of four bytes
	system, tool, task = scaffold[:half], scaffold[half:], part(1)
	for k := 0; k < a.Turn; k++ {
		calls = append(calls, part(2+2*k))
		results = append(results, part(3+2*k))
	}
	return system, tool, task, calls, results
}

func callID(k int) string { return "call_" + strconv.Itoa(k) }

// cmdArgs is a tool call's arguments: {"cmd": words}.
type cmdArgs struct {
	Cmd string `json:"cmd"`
}

var cmdSchema = json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}`)

type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type responsesBody struct {
	Model              string          `json:"model"`
	Instructions       string          `json:"instructions"`
	Tools              []responsesTool `json:"tools"`
	Input              []any           `json:"input"`
	PreviousResponseID string          `json:"previous_response_id,omitempty"`
	MaxOutputTokens    int             `json:"max_output_tokens"`
	Stream             bool            `json:"stream"`
}

type messagesTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type messagesMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

type messagesBody struct {
	Model     string            `json:"model"`
	MaxTokens int               `json:"max_tokens"`
	System    string            `json:"system"`
	Tools     []messagesTool    `json:"tools"`
	Messages  []messagesMessage `json:"messages"`
	Stream    bool              `json:"stream"`
}

// agentRequest returns the path and body of agent turn r (r.Agent set),
// continuing response prev ("" unknown) when the API is Responses.
func agentRequest(model string, r *scenario.Rendered, prev string) (string, []byte) {
	a := r.Agent
	system, tool, task, calls, results := agentParts(promptWords(make([]byte, 0, len(r.Prompt)), r.Prompt), a)
	if a.API == scenario.AgentAPIResponses {
		b := responsesBody{Model: model, Instructions: system, MaxOutputTokens: r.OutputTokens, Stream: true,
			Tools: []responsesTool{{Type: "function", Name: "run", Description: tool, Parameters: cmdSchema}}}
		output := func(k int) map[string]string {
			return map[string]string{"type": "function_call_output", "call_id": callID(k), "output": results[k]}
		}
		if a.Turn > 0 && prev != "" {
			b.PreviousResponseID = prev
			b.Input = []any{output(a.Turn - 1)}
		} else {
			b.Input = []any{map[string]any{"role": "user", "content": []map[string]string{{"type": "input_text", "text": task}}}}
			for k := range calls {
				args, _ := json.Marshal(cmdArgs{calls[k]})
				b.Input = append(b.Input, map[string]string{"type": "function_call", "call_id": callID(k), "name": "run", "arguments": string(args)},
					output(k))
			}
		}
		body, _ := json.Marshal(b)
		return pathResponses, body
	}
	b := messagesBody{Model: model, MaxTokens: r.OutputTokens, System: system, Stream: true,
		Tools:    []messagesTool{{Name: "run", Description: tool, InputSchema: cmdSchema}},
		Messages: []messagesMessage{{Role: "user", Content: task}}}
	for k := range calls {
		b.Messages = append(b.Messages,
			messagesMessage{Role: "assistant", Content: []any{map[string]any{"type": "tool_use", "id": callID(k), "name": "run", "input": cmdArgs{calls[k]}}}},
			messagesMessage{Role: "user", Content: []any{map[string]string{"type": "tool_result", "tool_use_id": callID(k), "content": results[k]}}})
	}
	body, _ := json.Marshal(b)
	return pathMessages, body
}

// agentEvent is the part of a Responses or Messages stream event bench
// reads.
type agentEvent struct {
	Type  string `json:"type"`
	Delta json.RawMessage
	// Responses: response.created and response.completed carry the
	// response.
	Response *struct {
		ID    string `json:"id"`
		Usage *struct {
			InputTokens  *int `json:"input_tokens"`
			OutputTokens int  `json:"output_tokens"`
			Details      *struct {
				CachedTokens *int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
	} `json:"response"`
	// Messages: message_start carries the message, message_delta the
	// usage.
	Message *struct {
		Usage *messagesUsage `json:"usage"`
	} `json:"message"`
	Usage *messagesUsage `json:"usage"`
}

// messagesUsage is the Messages API's usage: input_tokens counts the
// prompt tokens neither read from nor written to the cache.
type messagesUsage struct {
	InputTokens   *int `json:"input_tokens"`
	CacheRead     *int `json:"cache_read_input_tokens"`
	CacheCreation *int `json:"cache_creation_input_tokens"`
	OutputTokens  *int `json:"output_tokens"`
}

// deltaText is the text of a delta: a JSON string (Responses) or an
// object with text, partial_json or thinking (Messages).
func deltaText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var d struct {
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
	}
	_ = json.Unmarshal(raw, &d)
	return d.Text + d.PartialJSON + d.Thinking
}

// readAgentStream reads a Responses or Messages event stream into res:
// TTFT and the gaps between deltas with text (timed on clk from start),
// the response id (Responses), tokens and the usage — Responses'
// input_tokens and input_tokens_details.cached_tokens; Messages'
// input_tokens + cache_read_input_tokens + cache_creation_input_tokens
// as the prompt, cache_read_input_tokens as cached. It reports whether
// the stream completed (response.completed, message_stop); an error or
// failure event ends it as cut.
func readAgentStream(body io.Reader, clk clock.PassiveClock, start time.Time, res *Request) bool {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var last time.Duration
	chunks := 0
	finish := func() bool {
		if res.Tokens == 0 {
			res.Tokens = chunks
		}
		return true
	}
	var msg messagesUsage
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		var ev agentEvent
		if json.Unmarshal(data, &ev) != nil {
			continue
		}
		switch ev.Type {
		case "response.created", "response.completed":
			if ev.Response == nil {
				continue
			}
			if res.ResponseID == "" && len(ev.Response.ID) <= 256 {
				res.ResponseID = ev.Response.ID
			}
			if u := ev.Response.Usage; u != nil && u.InputTokens != nil {
				res.Tokens, res.PromptTokens, res.PromptKnown = max(u.OutputTokens, 0), max(*u.InputTokens, 0), true
				if u.Details != nil && u.Details.CachedTokens != nil {
					res.CachedTokens, res.CachedKnown = max(*u.Details.CachedTokens, 0), true
				}
			}
			if ev.Type == "response.completed" {
				return finish()
			}
		case "message_start", "message_delta":
			u := ev.Usage
			if ev.Message != nil {
				u = ev.Message.Usage
			}
			if u == nil {
				continue
			}
			for _, f := range []struct{ dst, src **int }{{&msg.InputTokens, &u.InputTokens}, {&msg.CacheRead, &u.CacheRead},
				{&msg.CacheCreation, &u.CacheCreation}, {&msg.OutputTokens, &u.OutputTokens}} {
				if *f.src != nil {
					*f.dst = *f.src
				}
			}
		case "message_stop":
			if msg.InputTokens != nil {
				in := max(*msg.InputTokens, 0)
				read, written := 0, 0
				if msg.CacheRead != nil {
					read, res.CachedKnown = max(*msg.CacheRead, 0), true
				}
				if msg.CacheCreation != nil {
					written = max(*msg.CacheCreation, 0)
				}
				res.PromptTokens, res.CachedTokens, res.PromptKnown = in+read+written, read, true
			}
			if msg.OutputTokens != nil {
				res.Tokens = max(*msg.OutputTokens, 0)
			}
			return finish()
		case "error", "response.failed", "response.incomplete":
			return false
		case "response.output_text.delta", "response.function_call_arguments.delta", "content_block_delta":
			if deltaText(ev.Delta) == "" {
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
	}
	return false
}

// maxChains bounds the Responses chains a player remembers.
const maxChains = 4096

// chains remembers the last response id of each agent session, for its
// next turn's previous_response_id. It holds at most maxChains sessions
// (the oldest is forgotten first: its next turn then resends the whole
// conversation) and is safe for concurrent use.
type chains struct {
	mu   sync.Mutex
	last map[uint64]string
	ring [maxChains]uint64
	next int
}

// get returns session's last response id ("" none).
func (c *chains) get(session uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last[session]
}

// set records id as session's last response.
func (c *chains) set(session uint64, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = make(map[uint64]string)
	}
	if _, ok := c.last[session]; !ok {
		if len(c.last) >= maxChains {
			delete(c.last, c.ring[c.next]) // the oldest
		}
		c.ring[c.next] = session
		c.next = (c.next + 1) % maxChains
	}
	c.last[session] = id
}
