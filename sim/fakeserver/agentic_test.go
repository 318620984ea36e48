package fakeserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

type sseEvent struct {
	name string
	data map[string]any
}

// readEvents reads a whole event stream of "event:"/"data:" pairs and
// checks each event's data names its own type.
func readEvents(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var evs []sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("event %q: data %q: %v", name, line, err)
			}
			if d["type"] != name {
				t.Errorf("event %q carries type %v", name, d["type"])
			}
			evs = append(evs, sseEvent{name, d})
			name = ""
		case line == "":
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

func names(evs []sseEvent) string {
	var b []string
	for _, e := range evs {
		if len(b) > 0 && b[len(b)-1] == e.name+"…" {
			continue
		}
		if len(b) > 0 && b[len(b)-1] == e.name {
			b[len(b)-1] = e.name + "…"
			continue
		}
		b = append(b, e.name)
	}
	return strings.Join(b, " ")
}

// num reads a number at a dotted path of decoded JSON.
func num(v any, path string) float64 {
	for _, k := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	f, _ := v.(float64)
	return f
}

func TestResponsesStreamed(t *testing.T) {
	_, base := start(t, nil)
	resp := post(t, base+"/v1/responses", `{"model":"llama-3.1-8b-instruct","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},`+
		`{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}],"max_output_tokens":6,"stream":true}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d content-type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	evs := readEvents(t, resp.Body)
	want := "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta… " +
		"response.output_text.done response.content_part.done response.output_item.done response.completed"
	if got := names(evs); got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
	var deltas strings.Builder
	for i, e := range evs {
		if int(num(e.data, "sequence_number")) != i {
			t.Errorf("event %d (%s): sequence_number %v", i, e.name, e.data["sequence_number"])
		}
		if e.name == "response.output_text.delta" {
			deltas.WriteString(e.data["delta"].(string))
		}
	}
	// six tokens: "lorem ipsum dolor sit amet consectetur "
	if full := evs[len(evs)-4].data["text"]; deltas.String() != "lorem ipsum dolor sit amet consectetur " || full != deltas.String() {
		t.Errorf("deltas %q, done text %q", deltas.String(), full)
	}
	done := evs[len(evs)-1].data["response"]
	if st := done.(map[string]any)["status"]; st != "completed" || num(done, "usage.output_tokens") != 6 || num(done, "usage.input_tokens") < 1 {
		t.Errorf("completed response %v", done)
	}
}

// TestResponsesSharedInstructionsHitTheCache: the instructions and tools
// render ahead of the input, so a second request with the same ones
// reads them from the prefix cache, whatever the key order of its body.
func TestResponsesSharedInstructionsHitTheCache(t *testing.T) {
	_, base := start(t, nil)
	instr := strings.Repeat("You are a careful coding agent. ", 64) // 2,048 bytes ≈ 512 tokens
	tools := `[{"type":"function","name":"run","parameters":{"type":"object"}}]`
	var cached []float64
	for i, body := range []string{
		fmt.Sprintf(`{"model":"llama-3.1-8b-instruct","instructions":%q,"tools":%s,"input":"first","max_output_tokens":2}`, instr, tools),
		fmt.Sprintf(`{"input":"second","tools":%s,"model":"llama-3.1-8b-instruct","max_output_tokens":2,"instructions":%q}`, tools, instr),
	} {
		resp := post(t, base+"/v1/responses", body)
		var out map[string]any
		err := json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil || out["status"] != "completed" || out["object"] != "response" {
			t.Fatalf("request %d: status %d, %v, %v", i, resp.StatusCode, err, out)
		}
		cached = append(cached, num(out, "usage.input_tokens_details.cached_tokens"))
	}
	// The second prompt's first ~530 tokens are the first's: whole blocks of them hit.
	if cached[0] != 0 || cached[1] < 512 {
		t.Errorf("cached tokens %v, want 0 then ≥ 512", cached)
	}
}

func TestMessagesStreamed(t *testing.T) {
	_, base := start(t, nil)
	resp := post(t, base+"/v1/messages", `{"model":"llama-3.1-8b-instruct","max_tokens":5,"stream":true,"system":[{"type":"text","text":"be brief"}],`+
		`"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"},`+
		`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	evs := readEvents(t, resp.Body)
	want := "message_start content_block_start ping content_block_delta… content_block_stop message_delta message_stop"
	if got := names(evs); got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
	var text strings.Builder
	for _, e := range evs {
		if e.name == "content_block_delta" {
			text.WriteString(e.data["delta"].(map[string]any)["text"].(string))
		}
	}
	md := evs[len(evs)-2].data
	if text.String() != "lorem ipsum dolor sit amet " || num(md, "usage.output_tokens") != 5 || md["delta"].(map[string]any)["stop_reason"] != "max_tokens" {
		t.Errorf("text %q, message_delta %v", text.String(), md)
	}
	if msg := evs[0].data["message"]; num(msg, "usage.input_tokens") < 1 {
		t.Errorf("message_start %v", msg)
	}
}

func TestMessagesNonStreamedAndErrors(t *testing.T) {
	_, base := start(t, nil)
	resp := post(t, base+"/v1/messages", `{"model":"llama-3.1-8b-instruct","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	var out map[string]any
	err := json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	content, _ := out["content"].([]any)
	if resp.StatusCode != 200 || err != nil || out["type"] != "message" || len(content) != 1 || num(out, "usage.output_tokens") != 3 {
		t.Fatalf("status %d, %v, %v", resp.StatusCode, err, out)
	}
	for _, tt := range []struct {
		body, errType string
		status        int
	}{
		{`{"model":"llama-3.1-8b-instruct","messages":[{"role":"user","content":"hi"}]}`, "invalid_request_error", 400},
		{`{"model":"gpt-9","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, "not_found_error", 404},
		{`{"model":"llama-3.1-8b-instruct","max_tokens":3,"messages":[{"role":"system","content":"hi"}]}`, "invalid_request_error", 400},
	} {
		resp := post(t, base+"/v1/messages", tt.body)
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		err := json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tt.status || err != nil || e.Type != "error" || e.Error.Type != tt.errType || e.Error.Message == "" {
			t.Errorf("%s: status %d, %+v (%v)", tt.body, resp.StatusCode, e, err)
		}
	}
}

// FuzzRenderAgentic: the Responses and Messages renderers never panic, and
// render something whenever they accept a non-empty conversation.
func FuzzRenderAgentic(f *testing.F) {
	f.Add(`"hi"`, `"sys"`, `[{"name":"f"}]`)
	f.Add(`[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"function_call","call_id":"c"}]`, `[{"type":"text","text":"s"}]`, `null`)
	f.Add(`[{"content":1}]`, `{}`, `{}`)
	f.Fuzz(func(t *testing.T, input, system, tools string) {
		if !json.Valid([]byte(input)) || !json.Valid([]byte(system)) || !json.Valid([]byte(tools)) {
			return
		}
		_, _ = renderHead(json.RawMessage(system), json.RawMessage(tools))
		if b, err := renderInput(json.RawMessage(input)); err == nil && len(b) == 0 {
			t.Fatalf("input %s rendered nothing without an error", input)
		}
		var msgs []Message
		if json.Unmarshal([]byte(input), &msgs) == nil {
			if b, err := renderConversation(msgs); err == nil && len(b) == 0 {
				t.Fatalf("messages %s rendered nothing without an error", input)
			}
		}
	})
}
