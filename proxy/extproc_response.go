package proxy

// The response half of an ext_proc exchange: the upstream's headers and
// body as Envoy forwards them, crediting the endpoint that served, and
// the end of the request (completion, abandonment) reported to the
// scheduler.

import (
	"bytes"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/trimtab/trimtab/scheduler"
)

func (x *exchange) responseHeaders(h *extprocv3.HttpHeaders) error {
	sse := false
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.GetKey() {
		case ":status":
			x.status, _ = strconv.Atoi(headerValue(hv))
		case "content-type":
			sse = isEventStream(headerValue(hv))
		case ServedHeader:
			if !x.servedMD {
				x.servedHeader(hv)
			}
		}
	}
	var set []*corev3.HeaderValueOption
	if x.addr != "" {
		set = append(set, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: "x-trimtab-endpoint", RawValue: []byte(x.addr)},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	if x.scores != "" {
		set = append(set, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: "x-trimtab-scores", RawValue: []byte(x.scores)},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	x.st.us.reset(sse)
	cr := &extprocv3.CommonResponse{}
	if set != nil {
		cr.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: set}
	}
	if err := x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: cr}}}); err != nil {
		return err
	}
	if h.GetEndOfStream() || x.respMode == modeNone {
		x.firstByte() // the best first-byte estimate when no body is seen
	}
	if h.GetEndOfStream() {
		x.finish()
	}
	return nil
}

// served credits the decision to addr, the endpoint Envoy reports as the
// one that served, when it is one of the decision's candidates (an Envoy
// retry along the fallbacks), so in-flight counts, pending prefill,
// learning scorers and this path's per-endpoint metrics follow the
// endpoint that did the work. Any other value is ignored: the destination
// is only ever an endpoint trimtab chose from.
func (x *exchange) served(addr string) {
	if x.d == nil || addr == "" || addr == x.addr {
		return
	}
	if x.d.MoveTo(addr) {
		x.addr = x.d.Endpoint.Address
	}
}

// servedFromMetadata reads the served endpoint from the message's
// metadata_context (DestinationNamespace / ServedKey, a string "ip:port"),
// where the Inference Extension protocol puts it and Envoy's override_host
// policy writes it (selected_host_key). Envoy forwards the namespace on
// every response message it sends; each report is applied, and once one
// is seen the ServedHeader response header, which the upstream itself
// could set, is no longer consulted. A value of another kind is no report.
func (x *exchange) servedFromMetadata(req *extprocv3.ProcessingRequest) {
	ns := req.GetMetadataContext().GetFilterMetadata()[DestinationNamespace]
	if ns == nil {
		return
	}
	s, ok := ns.GetFields()[ServedKey].GetKind().(*structpb.Value_StringValue)
	if !ok {
		return
	}
	x.servedMD = true
	x.served(strings.TrimSpace(s.StringValue))
}

// servedHeader applies the ServedHeader response header: the fallback for
// an Envoy that reports the served endpoint as a header rather than in
// metadata.
func (x *exchange) servedHeader(hv *corev3.HeaderValue) {
	if x.d == nil {
		return
	}
	raw := hv.GetRawValue()
	if len(raw) == 0 {
		raw = []byte(hv.GetValue())
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == x.addr {
		return
	}
	x.served(string(raw))
}

func (x *exchange) responseBody(b *extprocv3.HttpBody) error {
	if len(b.GetBody()) > 0 {
		x.firstByte()
	}
	var resp *extprocv3.ProcessingResponse
	if x.respMode == modeDuplex {
		resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
					Body: b.GetBody(), EndOfStream: b.GetEndOfStream()}}}}}}}
	} else {
		resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}}
	}
	if err := x.send(resp); err != nil {
		return err
	}
	if x.d != nil {
		x.st.us.write(b.GetBody())
	}
	if b.GetEndOfStream() {
		x.finish()
	}
	return nil
}

func (x *exchange) firstByte() {
	if !x.gotFirst && x.d != nil {
		x.gotFirst = true
		x.ttfb = x.e.deps.Clock.Since(x.picked)
		x.d.FirstByte()
	}
}

// finish completes the decision after the response ended.
func (x *exchange) finish() {
	if x.d == nil {
		return
	}
	kind := scheduler.OutcomeSuccess
	if x.status >= 500 || x.status == 0 {
		kind = scheduler.OutcomeError
	}
	x.done(kind)
}

// abandon completes the decision when the stream ended before the
// response did (client gone, Envoy reset, upstream failure). With
// response_body_mode NONE the body is never seen: a graceful end of the
// stream (eof) after the response headers is the response's end.
func (x *exchange) abandon(eof bool) {
	if x.d == nil {
		return
	}
	if eof && x.respMode == modeNone && x.status != 0 {
		x.finish()
		return
	}
	kind := scheduler.OutcomeCanceled
	if x.status >= 500 {
		kind = scheduler.OutcomeError
	}
	x.done(kind)
}

func (x *exchange) done(kind scheduler.OutcomeKind) {
	e := x.e
	lat := e.deps.Clock.Since(x.picked)
	e.m.endpoint(x.addr).observe(x.ttfb.Seconds(), x.gotFirst, lat.Seconds())
	e.m.count(x.addr, x.status)
	x.freeSlot() // first: once Done is observed, the slot is free
	x.st.us.finish()
	u := x.st.us.usage()
	if kind == scheduler.OutcomeSuccess {
		x.st.rec.SetOutput(outputTokens(u)) // before Done: a finished request's trace entry is whole
	}
	x.d.Done(scheduler.Outcome{Kind: kind, Status: x.status, TTFT: x.ttfb, Latency: lat, Usage: u})
	x.d = nil
}
