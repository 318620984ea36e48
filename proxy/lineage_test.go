package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
)

const (
	scaffoldMsgs = `"system":"You are a coding agent.","tools":[{"name":"bash","input_schema":{}}]`
	scaffoldResp = `"instructions":"You are a coding agent.","tools":[{"type":"function","name":"bash"}]`
)

// TestParseLineageKey: without a session id the parser derives the key
// from the conversation's root (scaffold + first turn): every turn of a
// conversation has one key whatever the order of its body's keys; another
// first turn on the same scaffold has another key; the scaffold alone,
// a completions prompt, and a request with a session id have none.
func TestParseLineageKey(t *testing.T) {
	ps := NewParser(nil)
	key := func(api API, body, header string) uint64 {
		t.Helper()
		var p Parsed
		if err := ps.ParseAPI(api, []byte(body), header, &p); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return p.Request.SessionKey
	}
	msgs := func(conv string) string { return `{"model":"m",` + scaffoldMsgs + `,"messages":[` + conv + `]}` }
	resp := func(input string) string { return `{"model":"m",` + scaffoldResp + `,"input":` + input + `}` }
	chat := func(conv string) string {
		return `{"model":"m","messages":[{"role":"system","content":"You are a coding agent."},` + conv + `]}`
	}
	const (
		task1  = `{"role":"user","content":"fix the bug in main.go"}`
		task2  = `{"role":"user","content":"write the README"}`
		turn2  = `,{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"bash","input":{"cmd":"go test"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"FAIL"}]}`
		rturn2 = `,{"type":"function_call","call_id":"c1","name":"bash","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"FAIL"}`
	)
	m1 := key(APIMessages, msgs(task1), "")
	r1 := key(APIResponses, resp("["+task1+"]"), "")
	c1 := key(APIOpenAI, chat(task1), "")
	tests := []struct {
		name string
		got  uint64
		want uint64 // 0: no key
		same bool   // want == got (else: got ≠ want and got ≠ 0)
	}{
		{"messages turn 2 = turn 1", key(APIMessages, msgs(task1+turn2), ""), m1, true},
		{"messages, keys in another order", key(APIMessages, `{"messages":[`+task1+turn2+`],"model":"m",`+scaffoldMsgs+`}`, ""), m1, true},
		{"messages, another first turn", key(APIMessages, msgs(task2+turn2), ""), m1, false},
		{"messages, scaffold alone", key(APIMessages, msgs(""), ""), 0, true},
		{"messages, a session id wins", key(APIMessages, msgs(task1), "s-1"), 0, true},
		{"responses turn 2 = turn 1", key(APIResponses, resp("["+task1+rturn2+"]"), ""), r1, true},
		{"responses, input a string = one user item", key(APIResponses, resp(`"fix the bug in main.go"`), ""), r1, true},
		{"responses, another first turn", key(APIResponses, resp("["+task2+"]"), ""), r1, false},
		{"responses, a system item is scaffold", key(APIResponses, `{"model":"m",`+scaffoldResp+`,"input":[{"role":"developer","content":"be brief"}]}`, ""), 0, true},
		{"chat turn 2 = turn 1", key(APIOpenAI, chat(task1+`,{"role":"assistant","content":"ok"},{"role":"user","content":"and now?"}`), ""), c1, true},
		{"chat, another system prompt", key(APIOpenAI, `{"model":"m","messages":[{"role":"system","content":"other"},`+task1+`]}`, ""), c1, false},
		{"chat, system alone", key(APIOpenAI, chat(`{"role":"system","content":"more"}`), ""), 0, true},
		{"completions", key(APIOpenAI, `{"model":"m","prompt":"fix the bug"}`, ""), 0, true},
	}
	if m1 == 0 || r1 == 0 || c1 == 0 {
		t.Fatalf("first turns have no key: messages %x responses %x chat %x", m1, r1, c1)
	}
	for _, tt := range tests {
		if tt.same && tt.got != tt.want {
			t.Errorf("%s: key %x, want %x", tt.name, tt.got, tt.want)
		}
		if !tt.same && (tt.got == tt.want || tt.got == 0) {
			t.Errorf("%s: key %x, want a key other than %x", tt.name, tt.got, tt.want)
		}
	}
}

// TestParseContinuationKey: a Responses continuation takes the key learned
// for the response it names; one the parser never learned takes the hash of
// the id; previous_response_id is no session id.
func TestParseContinuationKey(t *testing.T) {
	ps := NewParser(nil)
	var p Parsed
	body := `{"model":"m",` + scaffoldResp + `,"previous_response_id":"resp_7","input":[{"type":"function_call_output","call_id":"c","output":"ok"}]}`
	if err := ps.ParseAPI(APIResponses, []byte(body), "", &p); err != nil {
		t.Fatal(err)
	}
	if p.Request.SessionID != "" || p.Request.SessionKey != idHash([]byte("resp_7")) {
		t.Fatalf("unknown continuation: id %q key %x, want no id and key %x", p.Request.SessionID, p.Request.SessionKey, idHash([]byte("resp_7")))
	}
	ps.Learn([]byte("resp_7"), 42)
	if err := ps.ParseAPI(APIResponses, []byte(body), "", &p); err != nil {
		t.Fatal(err)
	}
	if p.Request.SessionKey != 42 {
		t.Fatalf("continuation of a learned response: key %x, want 42", p.Request.SessionKey)
	}
	// An escaped id is the same id.
	esc := strings.Replace(body, `"resp_7"`, `"resp\u005f7"`, 1)
	if err := ps.ParseAPI(APIResponses, []byte(esc), "", &p); err != nil || p.Request.SessionKey != 42 {
		t.Fatalf("escaped id: key %x err %v, want 42", p.Request.SessionKey, err)
	}
}

// TestLineageBounded: the table forgets its oldest entries beyond its
// bound, per shard.
func TestLineageBounded(t *testing.T) {
	l := newLineage()
	const n = lineageShards * lineagePerShard * 2
	for i := uint64(1); i <= n; i++ {
		l.learn(i, i+1)
	}
	total := 0
	for i := range l.shards {
		total += len(l.shards[i].m)
	}
	// 16 shards × 4096 = 65,536 kept of 131,072 learned: the newest.
	if total != lineageShards*lineagePerShard {
		t.Errorf("table holds %d entries, want %d", total, lineageShards*lineagePerShard)
	}
	if _, ok := l.lookup(1); ok {
		t.Error("the oldest entry is still there")
	}
	if k, ok := l.lookup(n); !ok || k != n+1 {
		t.Errorf("newest entry: %d %v, want %d", k, ok, n+1)
	}
}

// TestIDSniffer: the response id is the first "id" member of a JSON body
// or of a stream's response.created event, found across reads.
func TestIDSniffer(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   string
	}{
		{"json", []string{`{"id":"resp_1","object":"response"}`}, "resp_1"},
		{"sse, split", []string{"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"i", "d\": \"resp_2\",\"output\":[]}}\n\n"}, "resp_2"},
		{"previous_response_id is not it", []string{`{"previous_response_id":"resp_0","id":"resp_3"}`}, "resp_3"},
		{"no id", []string{`{"error":{"message":"x"}}`}, ""},
		{"id not a string", []string{`{"id":7,"x":"resp_4"}`}, ""},
		{"too long", []string{`{"id":"` + strings.Repeat("a", maxIDLen+1) + `"}`}, ""},
	}
	for _, tt := range tests {
		var sn idSniffer
		for _, c := range tt.chunks {
			sn.feed([]byte(c))
		}
		if string(sn.id) != tt.want {
			t.Errorf("%s: id %q, want %q", tt.name, sn.id, tt.want)
		}
	}
}

// responsesUpstream answers /v1/responses with ids resp_1, resp_2, …: a
// JSON response object, or a stream whose first event is response.created.
type responsesUpstream struct {
	n atomic.Int64
}

func (u *responsesUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := fmt.Sprintf("resp_%d", u.n.Add(1))
	if !strings.Contains(r.URL.Path, "responses") {
		http.NotFound(w, r)
		return
	}
	buf := make([]byte, 64<<10)
	n, _ := r.Body.Read(buf)
	if !strings.Contains(string(buf[:n]), `"stream":true`) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"object":"response","status":"completed","output":[]}`, id)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":%q,\"status\":\"in_progress\"}}\n\n", id)
	w.(http.Flusher).Flush()
	fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":%q,\"status\":\"completed\"}}\n\n", id)
}

// TestHTTPResponsesContinuationKeepsKey: through the HTTP proxy, a chain of
// Responses continuations without a session header keeps its first turn's
// session key (each response's id is learned as it streams), where keying
// by previous_response_id gave every turn a key of its own; a second
// conversation on the same scaffold has another key.
func TestHTTPResponsesContinuationKeepsKey(t *testing.T) {
	u := &responsesUpstream{}
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	var keys []uint64
	f := newFixture(t, func(req *scheduler.Request, _ *scheduler.Endpoint) float64 {
		mu.Lock()
		keys = append(keys, req.SessionKey)
		mu.Unlock()
		return 1
	}, srv.Listener.Addr().String())
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	send := func(stream bool, prev, input string) {
		t.Helper()
		body := `{"model":"m",` + scaffoldResp + fmt.Sprintf(`,"stream":%v,"input":%s`, stream, input)
		if prev != "" {
			body += `,"previous_response_id":"` + prev + `"`
		}
		resp := post(t, "http://"+addr+PathResponses, body+"}", nil)
		readAll(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	out := `[{"type":"function_call_output","call_id":"c","output":"ok"}]`
	send(true, "", `"fix the bug"`) // resp_1
	send(false, "resp_1", out)      // resp_2
	send(true, "resp_2", out)       // resp_3
	send(true, "resp_3", out)       // resp_4
	send(true, "", `"write the README"`)
	mu.Lock()
	defer mu.Unlock()
	// The test scorer is called once per candidate: one endpoint, one call
	// per request.
	if len(keys) != 5 {
		t.Fatalf("%d picks, want 5", len(keys))
	}
	for i, k := range keys[:4] {
		if k == 0 || k != keys[0] {
			t.Errorf("turn %d: key %x, want the first turn's %x", i+1, k, keys[0])
		}
	}
	if keys[4] == 0 || keys[4] == keys[0] {
		t.Errorf("another conversation: key %x, want a key other than %x", keys[4], keys[0])
	}
}
