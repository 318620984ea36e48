package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
)

// TestHTTPAgentAPIs: /v1/responses and /v1/messages are scheduled (the
// session id comes from their own body fields), forwarded to the same
// path with the body unchanged, and their streams come back as sent;
// other paths under them pass through.
func TestHTTPAgentAPIs(t *testing.T) {
	u := newUpstream(t)
	f := newFixture(t, nil, u.addr)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	tests := []struct {
		path, body, session string
	}{
		{PathResponses, `{"model":"m","stream":true,"instructions":"s","input":"hi","previous_response_id":"resp_7","user":"u-7"}`, "u-7"},
		{PathMessages, `{"model":"m","stream":true,"max_tokens":4,"system":"s","messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"u-9"}}`, "u-9"},
	}
	for _, tt := range tests {
		resp := post(t, "http://"+addr+tt.path, tt.body, nil)
		got := readAll(t, resp.Body)
		resp.Body.Close()
		// three events then [DONE], passed through byte for byte
		want := "data: {\"choices\":[{\"index\":0,\"text\":\"t0\"}]}\n\ndata: {\"choices\":[{\"index\":0,\"text\":\"t1\"}]}\n\n" +
			"data: {\"choices\":[{\"index\":0,\"text\":\"t2\"}]}\n\ndata: [DONE]\n\n"
		if resp.StatusCode != 200 || got != want || resp.Header.Get(HeaderEndpoint) != u.addr {
			t.Errorf("%s: status %d endpoint %q body %q", tt.path, resp.StatusCode, resp.Header.Get(HeaderEndpoint), got)
		}
		if u.lastPath() != tt.path || string(u.lastBody()) != tt.body {
			t.Errorf("%s: upstream got %s %s", tt.path, u.lastPath(), u.lastBody())
		}
		if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess {
			t.Errorf("%s: outcome %+v", tt.path, o)
		}
		rec := f.rec.Recent()
		if len(rec) == 0 || rec[0].SessionID != SessionHash(tt.session) {
			t.Errorf("%s: recorded decisions %+v, want session %q (hashed) newest", tt.path, rec, tt.session)
		}
	}

	// Sub-paths pass through without scheduling; GET on a scheduled path is 405.
	before := len(f.rec.Recent())
	resp, err := http.Get("http://" + addr + "/v1/responses/resp_7")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || u.lastPath() != "/v1/responses/resp_7" || len(f.rec.Recent()) != before {
		t.Errorf("GET /v1/responses/resp_7: status %d, upstream path %q, %d new decisions", resp.StatusCode, u.lastPath(), len(f.rec.Recent())-before)
	}
	resp, err = http.Get("http://" + addr + "/v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/messages: status %d, want 405", resp.StatusCode)
	}

	// A Messages field of the wrong type is a 400 on /v1/messages only,
	// in the Messages API's error envelope.
	bad := `{"model":"m","system":1,"messages":[]}`
	resp = post(t, "http://"+addr+PathMessages, bad, nil)
	body := readAll(t, resp.Body)
	resp.Body.Close()
	var env struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil || resp.StatusCode != 400 || env.Type != "error" ||
		env.Error.Type != "invalid_request_error" || env.Error.Message != ErrBadField.Message {
		t.Errorf("/v1/messages with system 1: status %d body %s (%v)", resp.StatusCode, body, err)
	}
	// An unknown model on /v1/messages: 404 not_found_error; the same on
	// /v1/responses keeps the OpenAI envelope.
	resp = post(t, "http://"+addr+PathMessages, `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, nil)
	body = readAll(t, resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal([]byte(body), &env); err != nil || resp.StatusCode != 404 || env.Error.Type != "not_found_error" {
		t.Errorf("/v1/messages, unknown model: status %d body %s", resp.StatusCode, body)
	}
	resp = post(t, "http://"+addr+PathResponses, `{"model":"nope","input":"hi"}`, nil)
	body = readAll(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || errorCode(t, body) != "model_not_found" {
		t.Errorf("/v1/responses, unknown model: status %d body %s", resp.StatusCode, body)
	}
}

func TestErrorJSONFor(t *testing.T) {
	for _, tt := range []struct {
		e    *Error
		api  API
		want string
	}{
		{ErrOverloaded, APIMessages, `{"type":"error","error":{"type":"rate_limit_error","message":"too many requests in flight; retry later"}}`},
		{ErrNoEndpoints, APIMessages, `{"type":"error","error":{"type":"overloaded_error","message":"no endpoint is available; retry later"}}`},
		{ErrBodyTooLarge, APIMessages, `{"type":"error","error":{"type":"request_too_large","message":"request body exceeds the size limit"}}`},
		{ErrUpstream, APIMessages, `{"type":"error","error":{"type":"api_error","message":"the chosen endpoint could not be reached"}}`},
		{ErrOverloaded, APIResponses, string(ErrOverloaded.JSON())},
		{ErrOverloaded, APIOpenAI, string(ErrOverloaded.JSON())},
	} {
		if got := string(tt.e.JSONFor(tt.api)); got != tt.want {
			t.Errorf("%s for API %v: %s, want %s", tt.e.Code, tt.api, got, tt.want)
		}
	}
}

// TestHTTPAgentStreamBreaks: a stream that breaks mid-way ends with an
// error event in the API's own format, then a cut connection.
func TestHTTPAgentStreamBreaks(t *testing.T) {
	u := newUpstream(t)
	u.dieAfter = 1
	f := newFixture(t, nil, u.addr)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	for path, want := range map[string]string{
		PathResponses: "\n\nevent: error\ndata: {\"type\":\"error\",\"code\":\"upstream_broken\",\"message\":\"the endpoint failed while streaming the response\",\"param\":null}\n\n",
		PathMessages:  "\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the endpoint failed while streaming the response\"}}\n\n",
	} {
		resp := post(t, "http://"+addr+path, `{"model":"m","stream":true}`, nil)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil || !strings.HasSuffix(string(b), want) {
			t.Errorf("%s: body %q (read error %v), want it to end with %q and a cut connection", path, b, err, want)
		}
		f.outcome(t)
	}
	f.waitIdle(t)
}

// TestExtProcAgentAPIs: ext_proc picks the parser from :path.
func TestExtProcAgentAPIs(t *testing.T) {
	f := newFixture(t, nil, epA)
	c, _, _ := startExtProc(t, DefaultConfig(), f)
	tests := []struct {
		path, body string
		status     int // 0: picked
		session    string
	}{
		{PathMessages, `{"model":"m","system":"s","messages":[{"role":"user","content":"x"}],"metadata":{"user_id":"u-1"}}`, 0, "u-1"},
		{PathResponses + "?stream=1", `{"model":"m","input":"x","conversation":{"id":"conv_1"}}`, 0, "conv_1"},
		{PathMessages, `{"model":"m","system":1}`, 400, ""},
		// the same body on a chat path: "system" is not an OpenAI field
		{PathChat, `{"model":"m","system":1}`, 0, ""},
	}
	for _, tt := range tests {
		s := openStream(t, context.Background(), c)
		s.send(requestHeaders(false, nil, duplex, ":path", tt.path))
		s.send(requestBody([]byte(tt.body), true))
		r := s.recv()
		if tt.status != 0 {
			if got := int(r.GetImmediateResponse().GetStatus().GetCode()); got != tt.status {
				t.Errorf("%s %s: immediate status %d, want %d", tt.path, tt.body, got, tt.status)
			}
			continue
		}
		if dest := destination(t, r.GetRequestHeaders().GetResponse(), r.GetDynamicMetadata()); dest != epA {
			t.Errorf("%s: destination %q", tt.path, dest)
		}
		s.recv() // the body, streamed back
		_ = s.s.CloseSend()
		f.outcome(t)
		rec := f.rec.Recent()
		want := ""
		if tt.session != "" {
			want = SessionHash(tt.session)
		}
		if len(rec) == 0 || rec[0].SessionID != want {
			t.Errorf("%s: newest decision %+v, want session %q (hashed)", tt.path, rec, tt.session)
		}
	}
	f.waitIdle(t)
}

// TestHTTPAgentStreamsUnbuffered: each event of a Responses or Messages
// stream reaches the client before the endpoint writes the next one.
func TestHTTPAgentStreamsUnbuffered(t *testing.T) {
	for _, path := range []string{PathResponses, PathMessages} {
		t.Run(path, func(t *testing.T) {
			u := newUpstream(t)
			u.gate = make(chan struct{})
			f := newFixture(t, nil, u.addr)
			h, err := NewHTTP(DefaultConfig(), f.deps(t))
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := start(t, h)
			resp := post(t, "http://"+addr+path, `{"model":"m","stream":true}`, nil)
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			// The upstream writes event i only after the test read event
			// i-1: a buffering proxy would deadlock here.
			for i := 0; i < u.events; i++ {
				u.gate <- struct{}{}
				line, err := br.ReadString('\n')
				if want := `data: {"choices":[{"index":0,"text":"t` + string(rune('0'+i)) + `"}]}` + "\n"; err != nil || line != want {
					t.Fatalf("event %d = %q (%v), want %q", i, line, err, want)
				}
				if blank, _ := br.ReadString('\n'); blank != "\n" {
					t.Fatalf("event %d not terminated by a blank line: %q", i, blank)
				}
			}
			if rest := readAll(t, br); rest != "data: [DONE]\n\n" {
				t.Fatalf("tail %q", rest)
			}
			f.outcome(t)
		})
	}
}
