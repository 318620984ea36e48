package proxy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/trimtab/trimtab/internal/jsonscan"
)

func tokens(ids ...uint32) string {
	var b []byte
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	return string(b)
}

func TestParse(t *testing.T) {
	ps := NewParser(map[string]string{"sql-lora": "llama-8b"})
	tests := []struct {
		name                         string
		body, header                 string
		wantErr                      *Error
		model, lora, session, prompt string
		stream, chat                 bool
	}{
		{name: "completion string", body: `{"model":"m","prompt":"hello","stream":true}`,
			model: "m", prompt: "hello", stream: true},
		{name: "escapes decoded", body: `{"model":"m\u00e9","prompt":"a\nb\"c\u00e9\ud83d\ude00\ud800x"}`,
			model: "mé", prompt: "a\nb\"cé😀\uFFFDx"},
		{name: "batch of strings joined by newline", body: `{"model":"m","prompt":["a","b","c"]}`,
			model: "m", prompt: "a\nb\nc"},
		// tokens 1, 256, 4294967295 → 4 bytes LE each = 12 bytes
		{name: "token ids", body: `{"model":"m","prompt":[1,256,4294967295]}`,
			model: "m", prompt: tokens(1, 256, 1<<32-1)},
		{name: "token id arrays concatenated", body: `{"model":"m","prompt":[[1,2],[3]]}`,
			model: "m", prompt: tokens(1, 2, 3)},
		{name: "chat canonical rendering", body: `{"model":"m","messages":[{"role":"system","content":"be brief"},{"content":"hi","role":"user"}]}`,
			model: "m", chat: true, prompt: "<|system|>\nbe brief\n<|user|>\nhi\n"},
		{name: "chat parts", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"u"}}]}]}`,
			model: "m", chat: true, prompt: "<|user|>\nlook\n<|image_url|>{\"type\":\"image_url\",\"image_url\":{\"url\":\"u\"}}\n"},
		{name: "chat null content", body: `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[]}]}`,
			model: "m", chat: true, prompt: "<|assistant|>\n\n"},
		{name: "messages win over prompt", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"prompt":"p"}`,
			model: "m", chat: true, prompt: "<|user|>\nx\n"},
		{name: "last duplicate wins", body: `{"model":"a","model":"b","prompt":"1","prompt":"2"}`,
			model: "b", prompt: "2"},
		{name: "lora adapter maps to base", body: `{"model":"sql-lora","prompt":""}`,
			model: "llama-8b", lora: "sql-lora"},
		{name: "session header wins", body: `{"model":"m","session_id":"b","user":"u"}`, header: "h",
			model: "m", session: "h"},
		{name: "session from body", body: `{"model":"m","session_id":"b","user":"u"}`,
			model: "m", session: "b"},
		{name: "session falls back to user", body: `{"model":"m","user":"u","session_id":7}`,
			model: "m", session: "u"},
		{name: "unknown fields skipped", body: ` {"x":{"y":[1,2.5e-3,true,false,null,"s"]},"model":"m","stream":null} `,
			model: "m"},
		{name: "empty body", body: ``, wantErr: ErrInvalidJSON},
		{name: "not an object", body: `[1]`, wantErr: ErrNotObject},
		{name: "truncated", body: `{"model":"m"`, wantErr: ErrInvalidJSON},
		{name: "trailing garbage", body: `{"model":"m"} x`, wantErr: ErrInvalidJSON},
		{name: "bad escape", body: `{"model":"m\q"}`, wantErr: ErrInvalidJSON},
		{name: "control char", body: "{\"model\":\"m\x01\"}", wantErr: ErrInvalidJSON},
		{name: "leading zero number", body: `{"model":"m","n":01}`, wantErr: ErrInvalidJSON},
		{name: "missing model", body: `{"prompt":"x"}`, wantErr: ErrMissingModel},
		{name: "empty model", body: `{"model":""}`, wantErr: ErrMissingModel},
		{name: "model not a string", body: `{"model":3}`, wantErr: ErrBadField},
		{name: "stream not a bool", body: `{"model":"m","stream":"yes"}`, wantErr: ErrBadField},
		{name: "prompt object", body: `{"model":"m","prompt":{}}`, wantErr: ErrBadField},
		{name: "mixed prompt array", body: `{"model":"m","prompt":["a",1]}`, wantErr: ErrBadField},
		{name: "negative token", body: `{"model":"m","prompt":[-1]}`, wantErr: ErrBadField},
		{name: "float token", body: `{"model":"m","prompt":[1.5]}`, wantErr: ErrBadField},
		{name: "token over 32 bits", body: `{"model":"m","prompt":[4294967296]}`, wantErr: ErrBadField},
		{name: "message not an object", body: `{"model":"m","messages":["hi"]}`, wantErr: ErrBadField},
		{name: "content a number", body: `{"model":"m","messages":[{"role":"user","content":1}]}`, wantErr: ErrBadField},
		{name: "too deep", body: `{"model":"m","x":` + strings.Repeat("[", jsonscan.MaxDepth+1) + strings.Repeat("]", jsonscan.MaxDepth+1) + `}`, wantErr: ErrTooDeep},
	}
	var p Parsed
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ps.Parse([]byte(tt.body), tt.header, &p)
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
			if r.Model != tt.model || r.LoRA != tt.lora || r.SessionID != tt.session || string(r.Prompt) != tt.prompt || p.Stream != tt.stream || p.Chat != tt.chat {
				t.Errorf("got model=%q lora=%q session=%q prompt=%q stream=%v chat=%v", r.Model, r.LoRA, r.SessionID, r.Prompt, p.Stream, p.Chat)
			}
		})
	}
}

func TestParseSharedSystemPromptSharesLeadingBytes(t *testing.T) {
	ps := NewParser(nil)
	var a, b Parsed
	sys := `{"role":"system","content":"You are a helpful assistant with a long preamble."}`
	if err := ps.Parse([]byte(`{"model":"m","messages":[`+sys+`,{"role":"user","content":"one"}]}`), "", &a); err != nil {
		t.Fatal(err)
	}
	if err := ps.Parse([]byte(`{"messages":[`+sys+`,{"role":"user","content":"two"}],"model":"m"}`), "", &b); err != nil {
		t.Fatal(err)
	}
	// "<|system|>\n" (11) + 49 content bytes + "\n" (1) + "<|user|>\n" (9) = 70 shared bytes
	n := 0
	for n < len(a.Request.Prompt) && n < len(b.Request.Prompt) && a.Request.Prompt[n] == b.Request.Prompt[n] {
		n++
	}
	if n != 70 {
		t.Fatalf("shared leading bytes = %d, want 70 (%q vs %q)", n, a.Request.Prompt, b.Request.Prompt)
	}
}

func TestParseAllocs(t *testing.T) {
	ps := NewParser(nil)
	var p Parsed
	for _, tc := range []struct {
		name string
		api  API
		body []byte
	}{
		{"completions", APIOpenAI, benchBody(8192, false)},
		{"chat", APIOpenAI, benchBody(8192, true)},
		{"responses", APIResponses, benchAgentBody(APIResponses, 8192, false)},
		{"responses, input first", APIResponses, benchAgentBody(APIResponses, 8192, true)}, // sections reordered
		{"messages", APIMessages, benchAgentBody(APIMessages, 8192, false)},
		{"messages, messages first", APIMessages, benchAgentBody(APIMessages, 8192, true)},
	} {
		if err := ps.ParseAPI(tc.api, tc.body, "", &p); err != nil { // warm: interns the model, grows the buffers
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(20, func() { _ = ps.ParseAPI(tc.api, tc.body, "", &p) }); n != 0 {
			t.Errorf("%s: ParseAPI allocates %v times per op, want 0", tc.name, n)
		}
	}
}

// benchBody returns an OpenAI body with a prompt of about tokens·4 bytes
// (a token is ~4 bytes of English).
func benchBody(tokens int, chat bool) []byte {
	words := []string{"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog\\n", "\\\"q\\\""}
	var sb strings.Builder
	for i := 0; sb.Len() < tokens*4; i++ {
		sb.WriteString(words[i%len(words)])
		sb.WriteByte(' ')
	}
	if chat {
		return []byte(`{"model":"llama-8b","stream":true,"max_tokens":128,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"` + sb.String() + `"}]}`)
	}
	return []byte(`{"model":"llama-8b","stream":true,"max_tokens":128,"temperature":0.7,"prompt":"` + sb.String() + `"}`)
}

func BenchmarkParse(b *testing.B) {
	ps := NewParser(nil)
	for _, tc := range []struct {
		name string
		chat bool
	}{{"completions", false}, {"chat", true}} {
		for _, tok := range []int{512, 8192} {
			body := benchBody(tok, tc.chat)
			b.Run(tc.name+"/prompt="+itoa(tok), func(b *testing.B) {
				var p Parsed
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if err := ps.Parse(body, "", &p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func itoa(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return string(rune('0'+n/1024/10%10)) + string(rune('0'+n/1024%10)) + "k"
	}
	b, _ := json.Marshal(n)
	return string(b)
}

// FuzzParse checks the hand-written scanner against encoding/json: it never
// panics, accepts only valid JSON, and agrees on the model, stream flag and
// string prompt whenever it accepts.
func FuzzParse(f *testing.F) {
	seeds := []string{
		`{"model":"m","prompt":"hello","stream":true}`,
		`{"model":"m","prompt":["a","b"]}`,
		`{"model":"m","prompt":[1,2,3]}`,
		`{"model":"m","prompt":[[1],[2,3]]}`,
		`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"t"},{"type":"image_url","image_url":{"url":"x"}}]}]}`,
		`{"model":"m\u00e9\ud83d\ude00","session_id":"s","user":"u","cache_salt":"c"}`,
		`{"model":"sql-lora","prompt":null,"stream":null,"x":[true,false,null,-1.5e+3,{}]}`,
		`[]`, `"x"`, `{`, `{"model":}`, `{"model":"m",}`, `{"model":"m"}}`, `{"a":01}`, `{"a":"\x"}`,
		`{"model":"m","prompt":[4294967296]}`, `{"model":"m","messages":[{"content":"c","role":"r"}]}`,
		`{"model":"m","messages":[{"role":"a\u00e9","content":"x\ud83d\ude00\n","role":"b"},{"role":"u","content":"1","content":"2"}]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	ps := NewParser(map[string]string{"sql-lora": "base"})
	f.Fuzz(func(t *testing.T, body []byte) {
		var p Parsed
		err := ps.Parse(body, "", &p)
		valid := json.Valid(body)
		if err == nil && !valid {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if errors.Is(err, ErrInvalidJSON) && valid {
			t.Fatalf("rejected valid JSON %q as invalid", body)
		}
		if errors.Is(err, ErrTooDeep) && valid && !bytes.Contains(body, bytes.Repeat([]byte("["), 100)) && !bytes.Contains(body, bytes.Repeat([]byte("{"), 100)) {
			t.Fatalf("too deep on shallow JSON %q", body)
		}
		if err != nil || !utf8.Valid(body) {
			return
		}
		var m map[string]any
		if json.Unmarshal(body, &m) != nil {
			t.Fatalf("encoding/json rejects %q", body)
		}
		model, _ := m["model"].(string)
		want := model
		if model == "sql-lora" {
			want = "base"
		}
		if p.Request.Model != want {
			t.Fatalf("model %q, encoding/json says %q", p.Request.Model, model)
		}
		if s, _ := m["stream"].(bool); s != p.Stream {
			t.Fatalf("stream %v, encoding/json says %v", p.Stream, s)
		}
		if _, chat := m["messages"]; !chat {
			if s, ok := m["prompt"].(string); ok && s != string(p.Request.Prompt) {
				t.Fatalf("prompt %q, encoding/json says %q", p.Request.Prompt, s)
			}
		} else if want, ok := renderSimpleChat(m["messages"]); ok && want != string(p.Request.Prompt) {
			t.Fatalf("chat prompt %q, encoding/json renders %q", p.Request.Prompt, want)
		}
	})
}

// renderSimpleChat renders messages decoded by encoding/json when every
// message has a string role and string content (ok false otherwise).
func renderSimpleChat(v any) (string, bool) {
	msgs, ok := v.([]any)
	if !ok {
		return "", false
	}
	var b strings.Builder
	for _, m := range msgs {
		o, ok := m.(map[string]any)
		if !ok {
			return "", false
		}
		role, ok1 := o["role"].(string)
		content, ok2 := o["content"].(string)
		if !ok1 || !ok2 {
			return "", false
		}
		b.WriteString("<|" + role + "|>\n" + content + "\n")
	}
	return b.String(), true
}
