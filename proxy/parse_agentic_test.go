package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseResponses(t *testing.T) {
	ps := NewParser(nil)
	const tools = `[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]`
	tests := []struct {
		name, body, header string
		wantErr            *Error
		session, prompt    string
		stream             bool
	}{
		{name: "string input is one user message", body: `{"model":"m","input":"hi","stream":true}`,
			prompt: "<|user|>\nhi\n", stream: true},
		{name: "instructions, tools, input in order", body: `{"model":"m","instructions":"be brief","tools":` + tools + `,"input":"hi"}`,
			prompt: "<|system|>\nbe brief\n<|tools|>\n" + tools + "\n<|user|>\nhi\n"},
		// the same sections, keys in the opposite order: same bytes
		{name: "sections ordered whatever the key order", body: `{"input":"hi","tools":` + tools + `,"model":"m","instructions":"be brief"}`,
			prompt: "<|system|>\nbe brief\n<|tools|>\n" + tools + "\n<|user|>\nhi\n"},
		{name: "repeated section: last wins", body: `{"model":"m","input":"one","instructions":"s","input":"two"}`,
			prompt: "<|system|>\ns\n<|user|>\ntwo\n"},
		{name: "message items and parts", body: `{"model":"m","input":[{"type":"message","role":"developer","content":"rules"},` +
			`{"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"u"}]}]}`,
			prompt: "<|developer|>\nrules\n<|user|>\nlook\n<|input_image|>{\"type\":\"input_image\",\"image_url\":\"u\"}\n"},
		{name: "function call items render raw", body: `{"model":"m","input":[{"role":"user","content":"weather?"},` +
			`{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"sunny"}]}`,
			prompt: "<|user|>\nweather?\n" +
				`<|function_call|>{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{}"}` + "\n" +
				`<|function_call_output|>{"type":"function_call_output","call_id":"c1","output":"sunny"}` + "\n"},
		{name: "assistant output_text renders as text", body: `{"model":"m","input":[{"role":"assistant","content":[{"type":"output_text","text":"done","annotations":[]}]}]}`,
			prompt: "<|assistant|>\ndone\n"},
		{name: "instructions as items", body: `{"model":"m","instructions":[{"role":"system","content":"x"}]}`,
			prompt: "<|system|>\nx\n"},
		{name: "null sections render nothing", body: `{"model":"m","instructions":null,"tools":null,"input":null}`},
		{name: "prompt template is not a completions prompt", body: `{"model":"m","prompt":{"id":"pmpt_1"},"input":"x"}`,
			prompt: "<|user|>\nx\n"},
		{name: "session from conversation string", body: `{"model":"m","conversation":"conv_1","previous_response_id":"resp_1","user":"u"}`,
			session: "conv_1"},
		{name: "session from conversation object", body: `{"model":"m","conversation":{"id":"conv_\u0032"}}`,
			session: "conv_2"},
		// previous_response_id is a lineage, not a session id
		// (TestParseContinuationKey): user is the id here.
		{name: "previous_response_id is no session id", body: `{"model":"m","previous_response_id":"resp_1","user":"u"}`,
			session: "u"},
		{name: "session falls back to user", body: `{"model":"m","user":"u","conversation":7}`, session: "u"},
		{name: "header wins", body: `{"model":"m","conversation":"conv_1"}`, header: "h", session: "h"},
		{name: "session_id is not a Responses field", body: `{"model":"m","session_id":"s"}`},
		{name: "missing model", body: `{"input":"x"}`, wantErr: ErrMissingModel},
		{name: "input a number", body: `{"model":"m","input":3}`, wantErr: ErrBadField},
		{name: "item not an object", body: `{"model":"m","input":["x"]}`, wantErr: ErrBadField},
		{name: "message content a number", body: `{"model":"m","input":[{"role":"user","content":1}]}`, wantErr: ErrBadField},
		{name: "tools an object", body: `{"model":"m","tools":{}}`, wantErr: ErrBadField},
		{name: "instructions a number", body: `{"model":"m","instructions":1}`, wantErr: ErrBadField},
		{name: "truncated", body: `{"model":"m","input":[{"role":"user"`, wantErr: ErrInvalidJSON},
	}
	var p Parsed
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ps.ParseAPI(APIResponses, []byte(tt.body), tt.header, &p)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			r := p.Request
			if r.Model != "m" || r.SessionID != tt.session || string(r.Prompt) != tt.prompt || p.Stream != tt.stream {
				t.Errorf("got model=%q session=%q prompt=%q stream=%v", r.Model, r.SessionID, r.Prompt, p.Stream)
			}
		})
	}
}

func TestParseMessages(t *testing.T) {
	ps := NewParser(nil)
	const tools = `[{"name":"get_weather","description":"d","input_schema":{"type":"object"}}]`
	tests := []struct {
		name, body, header string
		wantErr            *Error
		session, prompt    string
	}{
		{name: "system, tools, messages", body: `{"model":"m","max_tokens":8,"system":"be brief","tools":` + tools + `,"messages":[{"role":"user","content":"hi"}]}`,
			prompt: "<|system|>\nbe brief\n<|tools|>\n" + tools + "\n<|user|>\nhi\n"},
		{name: "messages first, same bytes", body: `{"messages":[{"role":"user","content":"hi"}],"tools":` + tools + `,"system":"be brief","model":"m"}`,
			prompt: "<|system|>\nbe brief\n<|tools|>\n" + tools + "\n<|user|>\nhi\n"},
		// text blocks joined by "\n"; cache_control does not change the text
		{name: "system text blocks", body: `{"model":"m","system":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}]}`,
			prompt: "<|system|>\na\nb\n"},
		{name: "tool use and result blocks render raw", body: `{"model":"m","messages":[{"role":"assistant","content":[{"type":"text","text":"let me check"},` +
			`{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"sunny"}]}]}`,
			prompt: "<|assistant|>\nlet me check\n" + `<|tool_use|>{"type":"tool_use","id":"t1","name":"get_weather","input":{}}` + "\n" +
				"<|user|>\n" + `<|tool_result|>{"type":"tool_result","tool_use_id":"t1","content":"sunny"}` + "\n"},
		{name: "session from metadata.user_id", body: `{"model":"m","metadata":{"other":[1],"user_id":"u-1"}}`, session: "u-1"},
		{name: "metadata user_id not a string", body: `{"model":"m","metadata":{"user_id":5}}`},
		{name: "header wins", body: `{"model":"m","metadata":{"user_id":"u"}}`, header: "h", session: "h"},
		{name: "user is not a Messages field", body: `{"model":"m","user":"u"}`},
		{name: "system a number", body: `{"model":"m","system":1}`, wantErr: ErrBadField},
		{name: "system blocks not objects", body: `{"model":"m","system":["a"]}`, wantErr: ErrBadField},
		{name: "roleless message content a number", body: `{"model":"m","messages":[{"content":1}]}`, wantErr: ErrBadField},
		{name: "missing model", body: `{"messages":[]}`, wantErr: ErrMissingModel},
	}
	var p Parsed
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ps.ParseAPI(APIMessages, []byte(tt.body), tt.header, &p)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if r := p.Request; r.Model != "m" || r.SessionID != tt.session || string(r.Prompt) != tt.prompt {
				t.Errorf("got model=%q session=%q prompt=%q", r.Model, r.SessionID, r.Prompt)
			}
		})
	}
}

func TestAPIOfPath(t *testing.T) {
	for path, want := range map[string]API{
		"/v1/responses": APIResponses, "/v1/responses?x=1": APIResponses, "/v1/messages": APIMessages,
		"/v1/messages/count_tokens": APIOpenAI, "/v1/chat/completions": APIOpenAI, "/v1/responses/resp_1": APIOpenAI, "": APIOpenAI,
	} {
		if got := apiOfPath([]byte(path)); got != want {
			t.Errorf("apiOfPath(%q) = %d, want %d", path, got, want)
		}
	}
}

// TestParseAgentSharedPrefix: two agent turns with the same instructions
// and tools but different input share every byte up to the input, so the
// prefix scorer sees the system prompt and tool list as one prefix.
func TestParseAgentSharedPrefix(t *testing.T) {
	ps := NewParser(nil)
	system := strings.Repeat("You are a coding agent. ", 40)
	tools := `[{"type":"function","name":"run","parameters":{}}]`
	for _, api := range []API{APIResponses, APIMessages} {
		var a, b Parsed
		one, two := agentBody(api, system, tools, "turn one", false), agentBody(api, system, tools, "turn two", true)
		if err := ps.ParseAPI(api, one, "", &a); err != nil {
			t.Fatal(err)
		}
		if err := ps.ParseAPI(api, two, "", &b); err != nil {
			t.Fatal(err)
		}
		n := 0
		for n < len(a.Request.Prompt) && n < len(b.Request.Prompt) && a.Request.Prompt[n] == b.Request.Prompt[n] {
			n++
		}
		// "<|system|>\n" (11) + 960 system bytes + "\n" (1) + "<|tools|>\n" (10) + 50 tool bytes + "\n" (1)
		// + "<|user|>\nturn " (14) = 1047
		if n != 1047 {
			t.Errorf("api %d: shared leading bytes = %d, want 1047", api, n)
		}
	}
}

// agentBody returns a Responses or Messages body; inputFirst puts the
// input before the system prompt and tools.
func agentBody(api API, system, tools, input string, inputFirst bool) []byte {
	sys, conv := `"instructions":`, `"input":`
	if api == APIMessages {
		sys, conv = `"system":`, `"messages":`
	}
	q, _ := json.Marshal(system)
	in, _ := json.Marshal(input)
	head := sys + string(q) + `,"tools":` + tools
	msgs := conv + `[{"role":"user","content":` + string(in) + `}]`
	if inputFirst {
		return []byte(`{"model":"llama-8b","stream":true,"max_tokens":128,` + msgs + `,` + head + `}`)
	}
	return []byte(`{"model":"llama-8b","stream":true,"max_tokens":128,` + head + `,` + msgs + `}`)
}

// benchAgentBody is an agent request with an 8k-token system prompt and
// a short user turn.
func benchAgentBody(api API, tokens int, inputFirst bool) []byte {
	words := []string{"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog"}
	var sb strings.Builder
	for i := 0; sb.Len() < tokens*4; i++ {
		sb.WriteString(words[i%len(words)])
		sb.WriteByte(' ')
	}
	tools := `[{"type":"function","name":"run","description":"run a shell command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}]`
	return agentBody(api, sb.String(), tools, "what next?", inputFirst)
}

func BenchmarkParseAgent(b *testing.B) {
	ps := NewParser(nil)
	for _, tc := range []struct {
		name       string
		api        API
		inputFirst bool
	}{{"responses", APIResponses, false}, {"responses-input-first", APIResponses, true}, {"messages", APIMessages, false}} {
		body := benchAgentBody(tc.api, 8192, tc.inputFirst)
		b.Run(tc.name+"/prompt=8k", func(b *testing.B) {
			var p Parsed
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := ps.ParseAPI(tc.api, body, "", &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzParseAgent checks the Responses and Messages parsers against
// encoding/json: they never panic, accept only valid JSON, agree on the
// model and stream flag, and, for bodies whose sections are simple
// (string system prompt, array tools, string input or messages with string
// roles and contents), render exactly what a reference renderer built on
// encoding/json renders.
func FuzzParseAgent(f *testing.F) {
	seeds := []string{
		`{"model":"m","instructions":"s","tools":[{"type":"function","name":"f"}],"input":"hi","stream":true}`,
		`{"input":[{"role":"user","content":"a"},{"type":"function_call","call_id":"c","arguments":"{}"}],"model":"m","instructions":"s"}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"t"},{"type":"input_image","image_url":"u"}]}]}`,
		`{"model":"m","conversation":{"id":"c"},"previous_response_id":"r","user":"u"}`,
		`{"model":"m","system":[{"type":"text","text":"a"}],"messages":[{"role":"user","content":"x"}],"metadata":{"user_id":"u"}}`,
		`{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","input":{}}]}],"system":"s","model":"m","tools":[]}`,
		`{"model":"m","input":"a","input":"b","instructions":"x","tools":[1],"tools":null}`,
		`{"model":"m","input":[{"content":3}]}`, `{"model":"m","input":3}`, `{"model":"m","system":{}}`, `[]`, `{`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	ps := NewParser(nil)
	f.Fuzz(func(t *testing.T, body []byte, messages bool) {
		api := APIResponses
		if messages {
			api = APIMessages
		}
		var p Parsed
		err := ps.ParseAPI(api, body, "", &p)
		valid := json.Valid(body)
		if err == nil && !valid {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if errors.Is(err, ErrInvalidJSON) && valid {
			t.Fatalf("rejected valid JSON %q as invalid", body)
		}
		if err != nil || !utf8.Valid(body) {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			t.Fatalf("encoding/json rejects %q", body)
		}
		var model string
		_ = json.Unmarshal(m["model"], &model)
		if p.Request.Model != model {
			t.Fatalf("model %q, encoding/json says %q", p.Request.Model, model)
		}
		var stream bool
		_ = json.Unmarshal(m["stream"], &stream)
		if stream != p.Stream {
			t.Fatalf("stream %v, encoding/json says %v", p.Stream, stream)
		}
		if bytes.Contains(body, []byte(`\u`)) { // escaped keys are not looked up below the top level
			return
		}
		if want, ok := renderSimpleAgent(api, m); ok && want != string(p.Request.Prompt) {
			t.Fatalf("prompt %q, reference renders %q", p.Request.Prompt, want)
		}
	})
}

// renderSimpleAgent renders a decoded Responses or Messages body whose
// sections are simple (ok false otherwise).
func renderSimpleAgent(api API, m map[string]json.RawMessage) (string, bool) {
	sysKey, convKey := "instructions", "input"
	if api == APIMessages {
		sysKey, convKey = "system", "messages"
	}
	var b strings.Builder
	if raw, ok := m[sysKey]; ok && string(raw) != "null" {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		b.WriteString("<|system|>\n" + s + "\n")
	}
	if raw, ok := m["tools"]; ok && string(raw) != "null" {
		if raw[0] != '[' {
			return "", false
		}
		b.WriteString("<|tools|>\n" + string(raw) + "\n")
	}
	raw, ok := m[convKey]
	if !ok || string(raw) == "null" {
		return b.String(), true
	}
	var s string
	if api == APIResponses && json.Unmarshal(raw, &s) == nil {
		b.WriteString("<|user|>\n" + s + "\n")
		return b.String(), true
	}
	msgs, ok := renderSimpleChat(decodeAny(raw))
	if !ok {
		return "", false
	}
	b.WriteString(msgs)
	return b.String(), true
}

func decodeAny(raw json.RawMessage) any {
	var v any
	_ = json.Unmarshal(raw, &v)
	return v
}
