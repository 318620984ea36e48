package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/scheduler"
)

// exchange is the state of one ext_proc stream; pooled.
type exchange struct {
	e           *ExtProc
	srv         extprocv3.ExternalProcessor_ProcessServer
	st          *reqState
	body        []byte // the request body: st.body, or a lone body message's bytes
	api         API    // from :path
	reqMode     bodyMode
	respMode    bodyMode
	first       bool
	session     string
	requestID   string
	subset      []string
	subsetSet   bool
	subsetBad   bool
	arrival     time.Time
	picked      time.Time
	d           *scheduler.Decision
	addr        string
	scores      string
	admitted    bool
	reserved    int64 // body bytes charged to the server's budget
	status      int
	ttfb        time.Duration
	gotFirst    bool
	headersOut  bool // request headers answered
	headersSeen bool
	servedMD    bool   // Envoy reported the served endpoint in metadata: the header is ignored
	guessed     bool   // no protocol_config: the configured full duplex is served as BUFFERED
	traceparent string // W3C trace context from Envoy, read when tracing is on
	tracestate  string
	span        trace.Span // nil when tracing is off

	lease   flow.Lease  // the flow-control charge, released with the slot
	flowHdr flowHeaders // the headers flow control classifies by (flow on)
}

func (x *exchange) reset(e *ExtProc, srv extprocv3.ExternalProcessor_ProcessServer) {
	subset := x.subset[:0]
	*x = exchange{e: e, srv: srv, subset: subset, first: true,
		reqMode: modeOf(e.cfg.ExtProc.RequestBodyMode), respMode: modeOf(e.cfg.ExtProc.ResponseBodyMode)}
	x.st = statePool.Get().(*reqState)
	x.st.body = x.st.body[:0]
}

func (x *exchange) release() {
	x.freeSlot() // a stream that never got a decision still held its slot
	x.e.tr.endExchange(x.span, x.status)
	x.e.budget.free(x.reserved)
	putState(x.st)
	clear(x.subset)
	x.subset = x.subset[:0]
	x.e, x.srv, x.st, x.d, x.body = nil, nil, nil, nil, nil
	exchangePool.Put(x)
}

// handle processes one message; end reports that the stream should close
// (an immediate response was sent).
func (x *exchange) handle(req *extprocv3.ProcessingRequest) (end bool, err error) {
	if x.first {
		x.first = false
		if pc := req.GetProtocolConfig(); pc != nil {
			x.reqMode = modeFromProto(pc.GetRequestBodyMode())
			x.respMode = modeFromProto(pc.GetResponseBodyMode())
			if x.reqMode == modeStreamed {
				return x.immediate(unsupportedBodyMode(pc.GetRequestBodyMode()))
			}
		} else {
			x.guessed = x.reqMode == modeDuplex
			x.reqMode, x.respMode = withoutProtocolConfig(x.reqMode), withoutProtocolConfig(x.respMode)
		}
	}
	x.readSubset(req)
	switch v := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return x.requestHeaders(v.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return x.requestBody(v.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if x.d == nil {
			if end, err := x.pick(false, false); end || err != nil {
				return end, err
			}
		}
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		x.servedFromMetadata(req)
		return false, x.responseHeaders(v.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		x.servedFromMetadata(req)
		return false, x.responseBody(v.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		x.servedFromMetadata(req)
		x.finish()
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}})
	}
	return false, nil
}

// readSubset takes the gateway's subset hint from the filter metadata.
func (x *exchange) readSubset(req *extprocv3.ProcessingRequest) {
	ns := req.GetMetadataContext().GetFilterMetadata()[SubsetNamespace]
	if ns == nil {
		return
	}
	v, ok := ns.GetFields()[SubsetKey]
	if !ok {
		return
	}
	x.subsetSet, x.subsetBad = true, false
	clear(x.subset)
	x.subset = x.subset[:0]
	list := v.GetListValue()
	if list == nil {
		x.subsetBad = true
		return
	}
	for _, item := range list.GetValues() {
		s, ok := item.GetKind().(*structpb.Value_StringValue)
		if !ok {
			x.subsetBad = true
			return
		}
		// An entry may itself be a comma-separated list.
		for a := range strings.SplitSeq(s.StringValue, ",") {
			if a = strings.TrimSpace(a); a != "" {
				x.subset = append(x.subset, a)
			}
		}
	}
}

func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

func (x *exchange) requestHeaders(h *extprocv3.HttpHeaders) (bool, error) {
	if x.headersSeen {
		return false, errors.New("request headers sent twice on one stream")
	}
	x.headersSeen = true
	x.arrival = x.e.deps.Clock.Now()
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch strings.ToLower(hv.GetKey()) {
		case "x-session-id":
			x.session = headerValue(hv)
		case "x-request-id":
			x.requestID = headerValue(hv)
		case ":path":
			x.api = apiOfHeader(hv)
		case "traceparent", "tracestate":
			if x.e.tr != nil {
				x.readTraceHeader(hv)
			}
		default:
			if fl := x.e.deps.Flow; fl != nil {
				x.flowHdr.keep(fl, strings.ToLower(hv.GetKey()), headerValue(hv))
			}
		}
	}
	x.span = x.e.tr.startExchange(x.srv.Context(), x.traceparent, x.tracestate, x.arrival)
	if h.GetEndOfStream() || x.reqMode == modeNone { // no body (a GET, or NONE): route without a model
		return x.pick(true, true)
	}
	if x.reqMode != modeDuplex {
		x.headersOut = true
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}})
	}
	return false, nil
}

func (x *exchange) requestBody(b *extprocv3.HttpBody) (bool, error) {
	if x.d != nil { // body after the pick (should not happen): pass it on
		return false, x.sendBodyChunk(b.GetBody(), b.GetEndOfStream())
	}
	if int64(len(x.st.body)+len(b.GetBody())) > x.e.cfg.MaxBodyBytes {
		return x.immediate(ErrBodyTooLarge)
	}
	if n := int64(len(b.GetBody())); n > 0 {
		if !x.e.budget.reserve(n) {
			return x.immediate(ErrBodyMemory)
		}
		x.reserved += n
	}
	if len(x.st.body) == 0 && b.GetEndOfStream() {
		// The whole body in one message (BUFFERED, or a small body): use
		// the message's bytes in place rather than copying them. Nothing
		// else holds the message, and sends marshal before they return.
		x.body = b.GetBody()
	} else {
		x.st.body = append(x.st.body, b.GetBody()...)
		x.body = x.st.body
	}
	if !b.GetEndOfStream() {
		switch {
		case x.guessed:
			// BUFFERED sends the body in one message, FULL_DUPLEX_STREAMED
			// in parts: this stream may be either, and neither can be
			// served right once the headers were answered without a
			// destination.
			return x.immediate(errBodyInPartsWithoutProtocolConfig)
		case x.reqMode == modeBuffered:
			// The whole body, trailers follow: Envoy holds them until
			// this message is answered.
			return x.pick(false, false)
		}
		return false, nil
	}
	return x.pick(true, false)
}

// errBodyInPartsWithoutProtocolConfig refuses a request whose body
// arrives in parts on a stream without protocol_config while trimtab's
// request_body_mode is full-duplex-streamed: such a stream is served as
// BUFFERED (an Envoy that buffers waits for the headers answer), so the
// headers went on without a destination, and a FULL_DUPLEX_STREAMED Envoy
// would then wait for a streamed body it never gets back.
var errBodyInPartsWithoutProtocolConfig = &Error{Status: http.StatusInternalServerError, Type: "server_error",
	Code: "protocol_config_missing",
	Message: "the request body arrived in parts but Envoy sent no protocol_config, so trimtab cannot tell " +
		"FULL_DUPLEX_STREAMED from BUFFERED and serves the stream as BUFFERED, where the body is one message; " +
		"use an Envoy that sends protocol_config for FULL_DUPLEX_STREAMED, or, if Envoy's processing_mode.request_body_mode " +
		"is BUFFERED (a body followed by trailers), set trimtab's server.ext_proc.request_body_mode: buffered"}

// pick parses the buffered body, schedules and answers with the
// destination. eos says whether the body ended (false when trailers
// follow); noBody that the request has none (headers ended the stream).
func (x *exchange) pick(eos, noBody bool) (bool, error) {
	e := x.e
	p := &x.st.p
	if noBody {
		p.Reset()
		p.Request.SessionID = x.session
	} else if err := e.parser.ParseAPI(x.api, x.body, x.session, p); err != nil {
		return x.immediate(asError(err))
	}
	if x.subsetBad {
		return x.immediate(&Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_subset",
			Message: "subset hint " + SubsetNamespace + "/" + SubsetKey + " must be a list of strings"})
	}
	if x.subsetSet && len(x.subset) == 0 {
		return x.immediate(ErrNoEndpoints)
	}
	if max := e.cfg.ExtProc.MaxInFlight; max > 0 {
		if e.inflight.Add(1) > int64(max) {
			e.inflight.Add(-1)
			return x.immediate(ErrOverloaded)
		}
		x.admitted = true
	}
	req := &p.Request
	req.ID = x.requestID
	req.Arrival = x.arrival
	if x.subsetSet {
		req.Subset = x.subset
	}
	d, lease, err := pickFlow(x.srv.Context(), e.sched, e.deps.Flow, req, x.flowHdr.get)
	x.lease = lease
	if err != nil {
		x.freeSlot() // no decision will call done: free the slot now
		return x.immediate(pickError(err, req))
	}
	x.d = d
	x.st.us.reset(false) // until the response headers say what the body is
	x.st.rec = e.deps.Traffic.Record(req)
	x.picked = e.deps.Clock.Now()
	x.addr = d.Endpoint.Address
	dest := d.Endpoint.Address
	if e.cfg.ExtProc.DestinationFallbacks && d.Ranked() > 1 {
		var b strings.Builder
		for r := 0; r < d.Ranked(); r++ {
			if r > 0 {
				b.WriteByte(',')
			}
			b.WriteString(d.RankedEndpoint(r).Address)
		}
		dest = b.String()
	}
	sampled := e.deps.Recorder.Sample()
	var xp scheduler.Explanation
	if sampled || e.cfg.ExtProc.ScoresHeader || e.cfg.ExtProc.EmitScores {
		xp = d.Explain()
		if sampled {
			e.deps.Recorder.Record(xp)
		}
		if e.cfg.ExtProc.ScoresHeader {
			x.scores = scoresHeader(xp)
		}
	}
	set := []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: DestinationHeader, RawValue: []byte(dest)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}}
	set = e.tr.exchangeDecided(x.span, d, set)
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		DestinationNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationHeader: structpb.NewStringValue(dest),
		}}),
	}}
	if e.cfg.ExtProc.EmitScores {
		addScores(md, xp, e.cfg.ExtProc.EmitScoresTop)
	}
	if x.headersOut { // BUFFERED: the destination rides on the body answer
		return false, x.send(&extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}, ClearRouteCache: true}}},
			DynamicMetadata: md,
		})
	}
	if !noBody {
		set = append(set, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: "content-length", RawValue: []byte(strconv.Itoa(len(x.body)))},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	x.headersOut = true
	if err := x.send(&extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}, ClearRouteCache: true}}},
		DynamicMetadata: md,
	}); err != nil {
		return false, err
	}
	if noBody {
		return false, nil
	}
	// FULL_DUPLEX_STREAMED: give the body back, unchanged, in chunks.
	body := x.body
	for off := 0; ; off += bodyChunk {
		end := min(off+bodyChunk, len(body))
		if err := x.sendBodyChunk(body[off:end], eos && end == len(body)); err != nil {
			return false, err
		}
		if end == len(body) {
			return false, nil
		}
	}
}

func (x *exchange) sendBodyChunk(b []byte, eos bool) error {
	if x.reqMode != modeDuplex {
		return x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}})
	}
	return x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}}}})
}

// freeSlot gives back the max_in_flight slot the exchange was admitted
// with, once; every path out of an admitted exchange calls it.
func (x *exchange) freeSlot() {
	x.lease.Release()
	x.lease = flow.Lease{}
	if x.admitted {
		x.e.inflight.Add(-1)
		x.admitted = false
	}
}

// immediate answers the request with an error and ends the stream.
func (x *exchange) immediate(er *Error) (bool, error) {
	x.e.m.count("none", er.Status)
	x.e.tr.refused(x.span, er)
	set := []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}}
	if er.retryable() {
		set = append(set, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: "retry-after", RawValue: []byte(retryAfterValue(x.e.cfg.RetryAfter))},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	if er.DropReason != "" {
		set = append(set, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: strings.ToLower(flow.HeaderDropReason), RawValue: []byte(er.DropReason)},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	return true, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(er.Status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: set},
			Body:    er.JSONFor(x.api),
			Details: "trimtab_" + er.Code,
		}}})
}

func (x *exchange) send(r *extprocv3.ProcessingResponse) error {
	if err := x.srv.Send(r); err != nil {
		return fmt.Errorf("send to envoy: %w", err)
	}
	return nil
}
