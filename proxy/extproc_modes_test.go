package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/trimtab/trimtab/scheduler"
)

// An Envoy announcing request_body_mode STREAMED or BUFFERED_PARTIAL gets
// a clear refusal on its first message: the destination could only be put
// where Envoy ignores it in those modes.
func TestExtProcRefusesStreamedRequestBodyMode(t *testing.T) {
	for _, m := range []filterv3.ProcessingMode_BodySendMode{filterv3.ProcessingMode_STREAMED, filterv3.ProcessingMode_BUFFERED_PARTIAL} {
		t.Run(m.String(), func(t *testing.T) {
			f := newFixture(t, nil, epA)
			c, _, _ := startExtProc(t, DefaultConfig(), f)
			s := openStream(t, context.Background(), c)
			s.send(requestHeaders(false, nil, &extprocv3.ProtocolConfiguration{
				RequestBodyMode: m, ResponseBodyMode: filterv3.ProcessingMode_STREAMED}))
			r := s.recv()
			checkImmediate(t, r, 500, "unsupported_body_mode", false)
			msg := string(r.GetImmediateResponse().GetBody())
			for _, want := range []string{m.String(), "BUFFERED", "FULL_DUPLEX_STREAMED"} {
				if !strings.Contains(msg, want) {
					t.Errorf("refusal %q does not name %q", msg, want)
				}
			}
			f.noMoreOutcomes(t)
		})
	}
}

// STREAMED on the response side is fine: each chunk is acknowledged.
func TestExtProcStreamedResponseBodyMode(t *testing.T) {
	f := newFixture(t, nil, epA)
	c, _, _ := startExtProc(t, DefaultConfig(), f)
	s := openStream(t, context.Background(), c)
	s.send(requestHeaders(false, nil, &extprocv3.ProtocolConfiguration{
		RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: filterv3.ProcessingMode_STREAMED}))
	s.send(requestBody([]byte(`{"model":"m","prompt":"x"}`), true))
	r := s.recv()
	if got := destination(t, r.GetRequestHeaders().GetResponse(), r.GetDynamicMetadata()); got != epA {
		t.Fatalf("destination %q, want %q", got, epA)
	}
	s.recv() // body
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200")}}})
	s.recv()
	for _, eos := range []bool{false, true} {
		s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: []byte("chunk"), EndOfStream: eos}}})
		if rb := s.recv().GetResponseBody(); rb == nil || rb.GetResponse().GetBodyMutation() != nil {
			t.Fatalf("streamed response chunk answer %v, want an empty body response", rb)
		}
	}
	f.outcome(t)
	f.waitIdle(t)
}

// An Envoy that sends no protocol_config (older than the field) and
// buffers the request body holds the body back until the request headers
// are answered. trimtab must answer them at once, not wait for body chunks
// the way FULL_DUPLEX_STREAMED would: the exchange below would otherwise
// hang until the context deadline (in Envoy, until message_timeout).
func TestExtProcNoProtocolConfigBufferedEnvoy(t *testing.T) {
	f := newFixture(t, nil, epA)
	c, _, _ := startExtProc(t, DefaultConfig(), f) // request_body_mode full-duplex-streamed
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	s := openStream(t, ctx, c)
	s.send(requestHeaders(false, nil, nil))
	hr := s.recv().GetRequestHeaders()
	if hr == nil || hr.GetResponse().GetHeaderMutation() != nil {
		t.Fatalf("headers answer %v, want an immediate CONTINUE without a destination", hr)
	}
	s.send(requestBody([]byte(`{"model":"m","prompt":"x"}`), true))
	r := s.recv()
	br := r.GetRequestBody()
	if br == nil || br.GetResponse().GetBodyMutation() != nil || !br.GetResponse().GetClearRouteCache() {
		t.Fatalf("body answer %v: want the destination as a header mutation, body untouched", r)
	}
	if got := destination(t, br.GetResponse(), r.GetDynamicMetadata()); got != epA {
		t.Fatalf("destination %q, want %q", got, epA)
	}
	// The response side is not full duplex either: each message is
	// acknowledged without a streamed body.
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200")}}})
	s.recv()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: []byte(`{"choices":[]}`), EndOfStream: true}}})
	if rb := s.recv().GetResponseBody(); rb == nil || rb.GetResponse().GetBodyMutation() != nil {
		t.Fatalf("response body answer %v, want an empty body response", rb)
	}
	if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess || o.Status != 200 {
		t.Errorf("outcome %+v, want success 200", o)
	}
	f.waitIdle(t)
}

// With request_body_mode NONE Envoy sends no body, so the pick is made
// from the headers alone and rides on the headers answer.
func TestExtProcRequestBodyModeNone(t *testing.T) {
	f := newFixture(t, nil, epA)
	c, _, _ := startExtProc(t, DefaultConfig(), f)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	s := openStream(t, ctx, c)
	s.send(requestHeaders(false, nil, &extprocv3.ProtocolConfiguration{
		RequestBodyMode: filterv3.ProcessingMode_NONE, ResponseBodyMode: filterv3.ProcessingMode_NONE}, "x-session-id", "s1"))
	r := s.recv()
	hr := r.GetRequestHeaders()
	if hr == nil {
		t.Fatalf("answer %v, want a headers response", r)
	}
	if got := destination(t, hr.GetResponse(), r.GetDynamicMetadata()); got != epA {
		t.Fatalf("destination %q, want %q", got, epA)
	}
	for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "content-length" {
			t.Errorf("content-length set to %q on a request without a body", h.GetHeader().GetRawValue())
		}
	}
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200")}}})
	s.recv()
	_ = s.s.CloseSend()
	if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess || o.Status != 200 {
		t.Errorf("outcome %+v, want success 200", o)
	}
	f.waitIdle(t)
}

// untilAnswer reads answers like Envoy waiting on the request: until an
// ImmediateResponse, or in full duplex until the streamed body comes back
// whole. A stall (what Envoy would sit through until message_timeout)
// fails at ctx's deadline instead of hanging the test.
func untilAnswer(t *testing.T, s *epStream, duplexBody bool) []*extprocv3.ProcessingResponse {
	t.Helper()
	var got []*extprocv3.ProcessingResponse
	for {
		r, err := s.s.Recv()
		if err != nil {
			t.Fatalf("stalled after %d answers %v: %v", len(got), got, err)
		}
		got = append(got, r)
		if r.GetImmediateResponse() != nil {
			return got
		}
		if rb := r.GetRequestBody(); rb != nil {
			sr := rb.GetResponse().GetBodyMutation().GetStreamedResponse()
			if !duplexBody || sr.GetEndOfStream() {
				return got
			}
		}
	}
}

// An Envoy in FULL_DUPLEX_STREAMED mode that sends no protocol_config
// streams the body in parts without waiting for the headers answer and
// expects the body back as streamed responses. trimtab, which serves such
// a stream as BUFFERED, must see the body arrive in parts and refuse at
// once with an ImmediateResponse naming the cause, not leave Envoy waiting
// for a body it never gets back.
func TestExtProcNoProtocolConfigDuplexEnvoy(t *testing.T) {
	f := newFixture(t, nil, epA)
	c, _, _ := startExtProc(t, DefaultConfig(), f) // request_body_mode full-duplex-streamed
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := openStream(t, ctx, c)
	s.send(requestHeaders(false, nil, nil))
	s.send(requestBody([]byte(`{"model":"m",`), false))
	// trimtab refuses at the first part, and may have ended the stream
	// before the second arrives.
	s.sendLate(requestBody([]byte(`"prompt":"x"}`), true))
	got := untilAnswer(t, s, true)
	last := got[len(got)-1]
	checkImmediate(t, last, 500, "protocol_config_missing", false)
	msg := string(last.GetImmediateResponse().GetBody())
	for _, want := range []string{"protocol_config", "FULL_DUPLEX_STREAMED", "BUFFERED", "request_body_mode"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not name %q", msg, want)
		}
	}
	// the only other answer is the headers CONTINUE sent before the body
	if len(got) != 2 || got[0].GetRequestHeaders() == nil {
		t.Errorf("answers %v, want the headers answer then the refusal", got)
	}
	f.noMoreOutcomes(t)
	f.waitIdle(t)
}

// In BUFFERED mode the one body message is the whole body, even when it
// does not end the stream because trailers follow: Envoy holds the
// trailers until the body is answered, so the pick is made on that
// message. Announced in protocol_config, or configured as trimtab's
// request_body_mode for an Envoy that sends none.
func TestExtProcBufferedBodyBeforeTrailers(t *testing.T) {
	buffered := &extprocv3.ProtocolConfiguration{
		RequestBodyMode: filterv3.ProcessingMode_BUFFERED, ResponseBodyMode: filterv3.ProcessingMode_NONE}
	for _, tt := range []struct {
		name string
		pc   *extprocv3.ProtocolConfiguration
		mode string // trimtab's request_body_mode
	}{
		{name: "announced", pc: buffered, mode: BodyModeFullDuplex},
		{name: "configured", mode: BodyModeBuffered},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, epA)
			cfg := DefaultConfig()
			cfg.ExtProc.RequestBodyMode = tt.mode
			c, _, _ := startExtProc(t, cfg, f)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s := openStream(t, ctx, c)
			s.send(requestHeaders(false, nil, tt.pc))
			if hr := s.recv().GetRequestHeaders(); hr == nil || hr.GetResponse().GetHeaderMutation() != nil {
				t.Fatalf("headers answer %v, want CONTINUE without a destination", hr)
			}
			s.send(requestBody([]byte(`{"model":"m","prompt":"x"}`), false))
			got := untilAnswer(t, s, false)
			r := got[len(got)-1]
			br := r.GetRequestBody()
			if br == nil || br.GetResponse().GetBodyMutation() != nil {
				t.Fatalf("body answer %v: want the destination as a header mutation, body untouched", r)
			}
			if d := destination(t, br.GetResponse(), r.GetDynamicMetadata()); d != epA {
				t.Fatalf("destination %q, want %q", d, epA)
			}
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}})
			if tr := s.recv().GetRequestTrailers(); tr == nil {
				t.Fatal("no trailers answer")
			}
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: hdrMap(":status", "200"), EndOfStream: true}}})
			s.recv()
			if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess || o.Status != 200 {
				t.Errorf("outcome %+v, want success 200", o)
			}
			f.waitIdle(t)
		})
	}
}
