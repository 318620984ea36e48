package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim/fakeserver"
	"github.com/trimtab/trimtab/sim/scenario"
)

// startFakeServer runs a fake vLLM server serving model "m", 1000× faster
// than the modelled GPU, on a loopback listener until the test ends.
func startFakeServer(t *testing.T) string {
	t.Helper()
	cfg := fakeserver.DefaultConfig()
	cfg.Model = "m"
	cfg.TimeScale = 1000
	s, err := fakeserver.New(cfg, fakeserver.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fake server: %v", err)
		}
	})
	return ln.Addr().String()
}

// usageCase is one API and mode the fake server answers with usage.
type usageCase struct {
	name   string
	path   string
	body   func(prompt string) string
	stream bool
	// usage says whether the server reports usage (a stream without
	// stream_options.include_usage does not).
	usage bool
}

func usageCases() []usageCase {
	chat := func(stream, include bool) func(string) string {
		return func(p string) string {
			opts := ""
			if include {
				opts = `,"stream_options":{"include_usage":true}`
			}
			return fmt.Sprintf(`{"model":"m","max_tokens":7,"stream":%t%s,"messages":[{"role":"user","content":%q}]}`, stream, opts, p)
		}
	}
	completions := func(stream bool) func(string) string {
		return func(p string) string {
			return fmt.Sprintf(`{"model":"m","max_tokens":7,"stream":%t,"stream_options":{"include_usage":true},"prompt":%q}`, stream, p)
		}
	}
	responses := func(stream bool) func(string) string {
		return func(p string) string {
			return fmt.Sprintf(`{"model":"m","max_output_tokens":7,"stream":%t,"input":%q}`, stream, p)
		}
	}
	messages := func(stream bool) func(string) string {
		return func(p string) string {
			return fmt.Sprintf(`{"model":"m","max_tokens":7,"stream":%t,"messages":[{"role":"user","content":%q}]}`, stream, p)
		}
	}
	return []usageCase{
		{"chat", PathChat, chat(false, false), false, true},
		{"chat-stream-include-usage", PathChat, chat(true, true), true, true},
		{"chat-stream-no-usage", PathChat, chat(true, false), true, false},
		{"completions", PathCompletions, completions(false), false, true},
		{"completions-stream", PathCompletions, completions(true), true, true},
		{"responses", PathResponses, responses(false), false, true},
		{"responses-stream", PathResponses, responses(true), true, true},
		{"messages", PathMessages, messages(false), false, true},
		{"messages-stream", PathMessages, messages(true), true, true},
	}
}

// clientUsage decodes, with encoding/json, the usage the client received
// in body: the whole body, or the SSE events' data (later reports of a
// field replace earlier ones, as Anthropic's message_delta does
// message_start's). Messages' prompt is input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens.
func clientUsage(t *testing.T, body string, stream bool) scheduler.Usage {
	t.Helper()
	type details struct {
		Cached *int64 `json:"cached_tokens"`
	}
	type usage struct {
		Prompt        *int64   `json:"prompt_tokens"`
		Completion    *int64   `json:"completion_tokens"`
		Input         *int64   `json:"input_tokens"`
		Output        *int64   `json:"output_tokens"`
		CacheRead     *int64   `json:"cache_read_input_tokens"`
		CacheCreation *int64   `json:"cache_creation_input_tokens"`
		PromptDetails *details `json:"prompt_tokens_details"`
		InputDetails  *details `json:"input_tokens_details"`
	}
	type envelope struct {
		Usage    *usage `json:"usage"`
		Response *struct {
			Usage *usage `json:"usage"`
		} `json:"response"`
		Message *struct {
			Usage *usage `json:"usage"`
		} `json:"message"`
	}
	var docs []string
	if stream {
		sc := bufio.NewScanner(strings.NewReader(body))
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && d != "[DONE]" {
				docs = append(docs, d)
			}
		}
	} else {
		docs = []string{body}
	}
	var got usage
	merge := func(u *usage) {
		if u == nil {
			return
		}
		for _, f := range [][2]**int64{{&got.Prompt, &u.Prompt}, {&got.Completion, &u.Completion}, {&got.Input, &u.Input},
			{&got.Output, &u.Output}, {&got.CacheRead, &u.CacheRead}, {&got.CacheCreation, &u.CacheCreation}} {
			if *f[1] != nil {
				*f[0] = *f[1]
			}
		}
		if u.PromptDetails != nil {
			got.PromptDetails = u.PromptDetails
		}
		if u.InputDetails != nil {
			got.InputDetails = u.InputDetails
		}
	}
	for _, d := range docs {
		var e envelope
		if err := json.Unmarshal([]byte(d), &e); err != nil {
			t.Fatalf("client: %v in %q", err, d)
		}
		merge(e.Usage)
		if e.Response != nil {
			merge(e.Response.Usage)
		}
		if e.Message != nil {
			merge(e.Message.Usage)
		}
	}
	v := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	var u scheduler.Usage
	switch {
	case got.Prompt != nil:
		u.PromptTokens, u.OutputTokens = *got.Prompt, v(got.Completion)
	case got.CacheRead != nil:
		u.PromptTokens, u.OutputTokens = v(got.Input)+*got.CacheRead+v(got.CacheCreation), v(got.Output)
		u.CachedTokens, u.CachedReported = *got.CacheRead, true
	case got.Input != nil:
		u.PromptTokens, u.OutputTokens = *got.Input, v(got.Output)
	}
	for _, d := range []*details{got.PromptDetails, got.InputDetails} {
		if d != nil && d.Cached != nil {
			u.CachedTokens, u.CachedReported = *d.Cached, true
		}
	}
	return u
}

// TestHTTPOutcomeCarriesReportedUsage: through the HTTP proxy, against a
// fake vLLM server, every API's response, streamed or not, gives the
// Outcome and the calibration's Observation the usage the server
// reported: the same prompt twice, so the second is served from the
// prefix cache and reports cached tokens. A stream without usage gives
// its count of token events instead.
func TestHTTPOutcomeCarriesReportedUsage(t *testing.T) {
	srv := startFakeServer(t)
	f := newFixture(t, nil, srv)
	ring := scheduler.NewObservationRing(64)
	f.sched.ObserveInto(ring)
	h, err := NewHTTP(DefaultConfig(), f.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	var spare []scheduler.Observation
	for i, tc := range usageCases() {
		t.Run(tc.name, func(t *testing.T) {
			// 4,000 prompt bytes, distinct per case: about 1,000 tokens,
			// many 16-token blocks to find in the cache the second time.
			prompt := strings.Repeat(fmt.Sprintf("case %d %s: the same long prompt again. ", i, tc.name), 200)[:4000]
			for round := range 2 {
				resp := post(t, "http://"+addr+tc.path, tc.body(prompt), nil)
				body := readAll(t, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("round %d: status %d: %s", round, resp.StatusCode, body)
				}
				o := f.outcome(t)
				f.waitIdle(t)
				spare = ring.Drain(spare)
				if len(spare) != 1 {
					t.Fatalf("round %d: %d observations, want 1", round, len(spare))
				}
				obs := spare[0].Usage
				if o.Usage != obs {
					t.Errorf("round %d: observation usage %+v, outcome usage %+v: want the same", round, obs, o.Usage)
				}
				want := clientUsage(t, body, tc.stream)
				got := o.Usage
				if !tc.usage {
					if want != (scheduler.Usage{}) {
						t.Fatalf("round %d: the server reported %+v; this case expects no usage", round, want)
					}
					// 7 tokens, each in its own event or coalesced: at
					// least 1, at most 7 + the role-only first chunk.
					if got.Chunks < 1 || got.Chunks > 8 || got.PromptTokens != 0 || got.OutputTokens != 0 {
						t.Errorf("round %d: usage %+v, want no reported counts and 1…8 chunks", round, got)
					}
					return
				}
				if want.PromptTokens < 900 || want.OutputTokens != 7 || !want.CachedReported {
					t.Fatalf("round %d: the server reported %+v; want ≈1,000 prompt tokens (4,000 bytes ÷ 4 + template), 7 output, cached reported", round, want)
				}
				if round == 1 && want.CachedTokens == 0 {
					t.Fatalf("round 1: the server reported no cached tokens for a repeated prompt: %+v", want)
				}
				got.Chunks = 0
				if got != want {
					t.Errorf("round %d: outcome usage %+v, want the server's %+v", round, got, want)
				}
				if tc.stream && o.Usage.Chunks < 1 {
					t.Errorf("round %d: a stream with %d chunks, want ≥ 1", round, o.Usage.Chunks)
				}
				if !tc.stream && o.Usage.Chunks != 0 {
					t.Errorf("round %d: a JSON body with %d chunks, want 0", round, o.Usage.Chunks)
				}
			}
		})
	}
}

// TestExtProcOutcomeCarriesReportedUsage: through the ext_proc server,
// with this test as Envoy (full duplex streamed: it forwards the request
// to the destination, a fake vLLM server, and relays the response to the
// server in 100-byte body messages, so events and usage objects span
// messages), every API's response, streamed or not, gives the Outcome
// and the Observation the usage the server reported.
func TestExtProcOutcomeCarriesReportedUsage(t *testing.T) {
	srv := startFakeServer(t)
	f := newFixture(t, nil, srv)
	ring := scheduler.NewObservationRing(64)
	f.sched.ObserveInto(ring)
	c, _, _ := startExtProc(t, DefaultConfig(), f)
	var spare []scheduler.Observation
	for i, tc := range usageCases() {
		t.Run(tc.name, func(t *testing.T) {
			prompt := strings.Repeat(fmt.Sprintf("ext_proc case %d %s: the same long prompt again. ", i, tc.name), 200)[:4000]
			for round := range 2 {
				body := []byte(tc.body(prompt))
				s := openStream(t, context.Background(), c)
				s.send(&extprocv3.ProcessingRequest{
					Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
						Headers: hdrMap(":method", "POST", ":path", tc.path, "content-type", "application/json")}},
					ProtocolConfig: duplex,
				})
				s.send(requestBody(body, true))
				r := s.recv()
				dest := destination(t, r.GetRequestHeaders().GetResponse(), r.GetDynamicMetadata())
				for {
					if s.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
						break
					}
				}
				resp, err := http.Post("http://"+dest+tc.path, "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
					Headers: hdrMap(":status", strconv.Itoa(resp.StatusCode), "content-type", resp.Header.Get("Content-Type"))}}})
				s.recv()
				var got bytes.Buffer
				buf := make([]byte, 100)
				for {
					n, err := io.ReadFull(resp.Body, buf)
					eos := err != nil
					if n == 0 && !eos {
						continue
					}
					s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
						Body: buf[:n], EndOfStream: eos}}})
					sr := s.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
					got.Write(sr.GetBody())
					if eos {
						break
					}
				}
				resp.Body.Close()
				_ = s.s.CloseSend()
				if resp.StatusCode != 200 {
					t.Fatalf("round %d: status %d: %s", round, resp.StatusCode, got.String())
				}
				o := f.outcome(t)
				f.waitIdle(t)
				spare = ring.Drain(spare)
				if len(spare) != 1 || spare[0].Usage != o.Usage {
					t.Fatalf("round %d: observations %+v, want one with the outcome's usage %+v", round, spare, o.Usage)
				}
				want := clientUsage(t, got.String(), tc.stream)
				if !tc.usage {
					if o.Usage.Chunks < 1 || o.Usage.Chunks > 8 || o.Usage.PromptTokens != 0 || o.Usage.OutputTokens != 0 || want != (scheduler.Usage{}) {
						t.Errorf("round %d: usage %+v (server: %+v), want none reported and 1…8 chunks", round, o.Usage, want)
					}
					return
				}
				if want.PromptTokens < 900 || want.OutputTokens != 7 || (round == 1 && want.CachedTokens == 0) {
					t.Fatalf("round %d: the server reported %+v; want ≈1,000 prompt tokens, 7 output, cached tokens on the repeat", round, want)
				}
				u := o.Usage
				u.Chunks = 0
				if u != want {
					t.Errorf("round %d: outcome usage %+v, want the server's %+v", round, o.Usage, want)
				}
			}
		})
	}
}

// TestTraceOutputLengthFromUsage: the traffic trace records each request's
// output length from what its response reported, through the HTTP proxy
// and through ext_proc, against a fake vLLM server: completion_tokens
// (= max_tokens: the fake server always generates them all), or, from a
// stream without usage, its count of token events.
func TestTraceOutputLengthFromUsage(t *testing.T) {
	srv := startFakeServer(t)
	f := newFixture(t, nil, srv)
	cfg := DefaultConfig()
	cfg.Admin.Record.Enabled = true
	traffic := NewTrafficRecorder(cfg.Admin.Record, nil)
	deps := f.deps(t)
	deps.Traffic = traffic
	h, err := NewHTTP(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, h)
	edeps := f.deps(t)
	edeps.Traffic = traffic
	e, err := NewExtProc(cfg, edeps)
	if err != nil {
		t.Fatal(err)
	}
	eaddr, _ := start(t, e)
	conn, err := grpc.NewClient(eaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ec := extprocv3.NewExternalProcessorClient(conn)

	var want []int
	for i, tc := range []struct {
		path, body string
		stream     bool
		extproc    bool
	}{
		{PathChat, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"one"}]}`, false, false},
		{PathCompletions, `{"model":"m","max_tokens":9,"stream":true,"stream_options":{"include_usage":true},"prompt":"two"}`, true, false},
		{PathMessages, `{"model":"m","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"three"}]}`, true, false},
		{PathChat, `{"model":"m","max_tokens":6,"stream":true,"messages":[{"role":"user","content":"four"}]}`, true, false},
		{PathResponses, `{"model":"m","max_output_tokens":11,"input":"five"}`, false, true},
	} {
		var body string
		if tc.extproc {
			body = viaExtProc(t, ec, tc.path, tc.body)
		} else {
			resp := post(t, "http://"+addr+tc.path, tc.body, nil)
			body = readAll(t, resp.Body)
			resp.Body.Close()
		}
		f.outcome(t)
		u := clientUsage(t, body, tc.stream)
		n := int(u.OutputTokens)
		if n == 0 { // no usage: the data events the client saw, less [DONE]
			for line := range strings.Lines(body) {
				if strings.HasPrefix(line, "data: ") && line != "data: [DONE]\n" {
					n++
				}
			}
		}
		if n == 0 {
			t.Fatalf("request %d: the client sees no output length in %q", i, body)
		}
		want = append(want, n)
	}
	f.waitIdle(t)
	var buf bytes.Buffer
	if _, err := traffic.WriteTrace(&buf); err != nil {
		t.Fatal(err)
	}
	entries, err := scenario.ParseTrace(bufio.NewScanner(&buf), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Fatalf("%d trace entries, want %d:\n%s", len(entries), len(want), buf.String())
	}
	// 5, 9, 4, 11 reported; the chat stream without usage: its data events.
	for i, e := range entries {
		if e.OutputLength != want[i] {
			t.Errorf("entry %d: output_length %d, want %d", i, e.OutputLength, want[i])
		}
	}
}

// viaExtProc sends one request through the ext_proc server as Envoy would
// (full duplex streamed), forwards it to the destination, relays the
// response in one body message and returns the response body.
func viaExtProc(t *testing.T, c extprocv3.ExternalProcessorClient, path, body string) string {
	t.Helper()
	s := openStream(t, context.Background(), c)
	defer func() { _ = s.s.CloseSend() }()
	s.send(&extprocv3.ProcessingRequest{
		Request:        &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrMap(":method", "POST", ":path", path)}},
		ProtocolConfig: duplex,
	})
	s.send(requestBody([]byte(body), true))
	r := s.recv()
	dest := destination(t, r.GetRequestHeaders().GetResponse(), r.GetDynamicMetadata())
	for !s.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
	}
	resp, err := http.Post("http://"+dest+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, resp.Body)
	resp.Body.Close()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", strconv.Itoa(resp.StatusCode), "content-type", resp.Header.Get("Content-Type"))}}})
	s.recv()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: []byte(got), EndOfStream: true}}})
	s.recv()
	return got
}

// TestHTTPForwardsAnyBodyUnchanged: the usage scan only reads what passes:
// bodies that are no usage at all — 1 MiB of random bytes as an event
// stream, a deeply nested usage-looking JSON, a usage object split across
// many small writes — reach the client byte for byte, and the outcome is
// a success with what the body really reported.
func TestHTTPForwardsAnyBodyUnchanged(t *testing.T) {
	random := make([]byte, 1<<20)
	for i := range random {
		random[i] = byte(i*7919 + i>>8) // deterministic noise with newlines and quotes
	}
	nested := []byte(strings.Repeat(`{"usage":`, 20000) + "1" + strings.Repeat("}", 20000))
	// Within the tail window and never closed: every occurrence parses to
	// the window's end and fails.
	unclosed := []byte(strings.Repeat(`{"usage":`, 220))
	split := []byte(`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}}`)
	for _, tc := range []struct {
		name, ct string
		body     []byte
		step     int
		want     scheduler.Usage
	}{
		{"random event stream", "text/event-stream", random, 32 << 10, scheduler.Usage{}},
		{"nested usage keys", "application/json", nested, 4096, scheduler.Usage{}},
		{"unclosed usage keys", "application/json", unclosed, 100, scheduler.Usage{}},
		{"usage in 3-byte writes", "application/json", split, 3, scheduler.Usage{PromptTokens: 12, CachedTokens: 8, CachedReported: true, OutputTokens: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", tc.ct)
				rc := http.NewResponseController(w)
				for p := tc.body; len(p) > 0; {
					n := min(tc.step, len(p))
					_, _ = w.Write(p[:n])
					_ = rc.Flush()
					p = p[n:]
				}
			}))
			defer u.Close()
			addr := u.Listener.Addr().String()
			f := newFixture(t, nil, addr)
			h, err := NewHTTP(DefaultConfig(), f.deps(t))
			if err != nil {
				t.Fatal(err)
			}
			paddr, _ := start(t, h)
			resp := post(t, "http://"+paddr+PathCompletions, `{"model":"m","prompt":"x","stream":true}`, nil)
			got := readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || got != string(tc.body) {
				t.Fatalf("status %d, %d bytes: want 200 and the endpoint's %d bytes unchanged", resp.StatusCode, len(got), len(tc.body))
			}
			o := f.outcome(t)
			o.Usage.Chunks = 0 // the noise's blank lines make events of it
			if o.Kind != scheduler.OutcomeSuccess || o.Usage != tc.want {
				t.Errorf("outcome %v with usage %+v, want success with %+v", o.Kind, o.Usage, tc.want)
			}
		})
	}
}
