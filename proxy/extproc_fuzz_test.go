package proxy

import (
	"context"
	"encoding/binary"
	"io"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// fakeStream is a hand-written stand-in for grpc's server stream (an
// outside interface): it replays in and records what the server sends.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
	in  []*extprocv3.ProcessingRequest
	out []*extprocv3.ProcessingResponse
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) Send(r *extprocv3.ProcessingResponse) error {
	f.out = append(f.out, r)
	return nil
}

func (f *fakeStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if len(f.in) == 0 {
		return nil, io.EOF
	}
	r := f.in[0]
	f.in = f.in[1:]
	return r, nil
}

// encodeMessages frames messages as uvarint length + protobuf bytes.
func encodeMessages(msgs ...*extprocv3.ProcessingRequest) []byte {
	var b []byte
	for _, m := range msgs {
		p, _ := proto.Marshal(m)
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

func decodeMessages(b []byte) []*extprocv3.ProcessingRequest {
	var msgs []*extprocv3.ProcessingRequest
	for len(b) > 0 && len(msgs) < 64 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			break
		}
		m := &extprocv3.ProcessingRequest{}
		if proto.Unmarshal(b[k:k+int(n)], m) == nil {
			msgs = append(msgs, m)
		}
		b = b[k+int(n):]
	}
	return msgs
}

// FuzzExtProcMessages feeds arbitrary message sequences to the ext_proc
// server. Whatever Envoy (or an attacker on its connection) sends, the
// server must not panic, must send at most one ImmediateResponse and
// nothing after it, and must leave no request in flight when the stream
// ends (Decision.Done exactly once).
func FuzzExtProcMessages(f *testing.F) {
	rb := func(b string, eos bool) *extprocv3.ProcessingRequest { return requestBody([]byte(b), eos) }
	respH := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrMap(":status", "200")}}}
	respB := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("data: x\n\n"), EndOfStream: true}}}
	trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
	f.Add(encodeMessages(requestHeaders(false, nil, duplex), rb(`{"model":"m","prompt":"x"}`, true), respH, respB))
	f.Add(encodeMessages(requestHeaders(false, subsetMD(subsetList(epB)), nil), rb(`{"model":"m",`, false), rb(`"prompt":"x"}`, true)))
	f.Add(encodeMessages(requestHeaders(true, nil, nil), respH))
	f.Add(encodeMessages(requestHeaders(false, nil, duplex), rb(`{"model":"m"}`, false), trailers, respH, trailers))
	f.Add(encodeMessages(rb(`{"model":"m"}`, true), rb(`{"model":"m"}`, true), respB, respH))
	f.Add(encodeMessages(requestHeaders(false, nil, duplex), rb(`{"model":"nope"}`, true)))
	f.Add(encodeMessages(requestHeaders(true, nil, nil), requestHeaders(true, nil, nil), respH))
	f.Add([]byte{0x05, 0x0a, 0x03, 0x0a, 0x01, 0x00})
	f.Add(encodeMessages(requestHeaders(false, nil, duplex, ":path", PathResponses),
		rb(`{"model":"m","instructions":"s","tools":[],"input":[{"role":"user","content":"x"},{"type":"function_call_output","output":"y"}]}`, true), respH, respB))
	f.Add(encodeMessages(requestHeaders(false, nil, nil, ":path", PathMessages+"?beta=true"),
		rb(`{"model":"m","system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"x"}],"metadata":{"user_id":"u"}}`, true), respH))
	// the served endpoint in metadata_context: on response headers, on
	// the body only, of the wrong kind, naming a stranger, beside a header
	served := func(m proto.Message, v *structpb.Value) *extprocv3.ProcessingRequest {
		r := proto.Clone(m).(*extprocv3.ProcessingRequest)
		r.MetadataContext = servedMD(epA+","+epB, v)
		return r
	}
	respHServed := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrMap(":status", "200", ServedHeader, epC)}}}
	f.Add(encodeMessages(requestHeaders(false, nil, duplex), rb(`{"model":"m","prompt":"x"}`, true), served(respH, structpb.NewStringValue(epB)), respB))
	f.Add(encodeMessages(requestHeaders(false, nil, duplex), rb(`{"model":"m","prompt":"x"}`, true), respH, served(respB, structpb.NewStringValue(" "+epC+" "))))
	f.Add(encodeMessages(requestHeaders(false, nil, duplex), rb(`{"model":"m","prompt":"x"}`, true), served(respHServed, structpb.NewNumberValue(1)), respB))
	f.Add(encodeMessages(requestHeaders(false, nil, duplex), rb(`{"model":"m","prompt":"x"}`, true), served(respHServed, structpb.NewStringValue("10.9.9.9:1")),
		served(respB, structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue(epB)}}))))
	f.Add(encodeMessages(served(respH, structpb.NewStringValue(epB)), requestHeaders(true, nil, nil), served(respB, structpb.NewStringValue(epB))))
	// bodies in parts without protocol_config; BUFFERED with trailers
	f.Add(encodeMessages(requestHeaders(false, nil, nil), rb(`{"model":"m",`, false), rb(`"prompt":"x"}`, true), respH))
	f.Add(encodeMessages(requestHeaders(false, nil, &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED}),
		rb(`{"model":"m","prompt":"x"}`, false), trailers, rb(`x`, true), respH, respB))
	fx := newFixture(f, preferOrder(epA, epB, epC), epA, epB, epC)
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 1 << 16
	cfg.ExtProc.EmitScores = true
	e, err := NewExtProc(cfg, Deps{Scheduler: fx.sched})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := &fakeStream{ctx: context.Background(), in: decodeMessages(data)}
		_ = e.Process(fs)
		for i, r := range fs.out {
			if r.GetImmediateResponse() != nil && i != len(fs.out)-1 {
				t.Fatalf("answer %d of %d is an ImmediateResponse, yet more followed", i+1, len(fs.out))
			}
		}
		for _, ep := range fx.sched.Pool().Pointers() {
			if n := ep.InFlight(); n != 0 {
				t.Fatalf("%s has %d in flight after the stream ended", ep.Address, n)
			}
		}
	})
}
