package proxy

import (
	"context"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/trimtab/trimtab/scheduler"
)

// endpointLoad returns addr's in-flight count and pending prefill bytes.
func endpointLoad(t *testing.T, s *scheduler.Scheduler, addr string) (int64, int64) {
	t.Helper()
	for _, e := range s.Pool().Pointers() {
		if e.Address == addr {
			return e.InFlight(), e.PendingPrefill()
		}
	}
	t.Fatalf("%s not in the pool", addr)
	return 0, 0
}

// Envoy retried along the fallbacks and reports the endpoint that served
// the request in x-gateway-destination-endpoint-served: in-flight counts,
// pending prefill and the outcome metrics go to that endpoint, not the pick.
func TestExtProcCreditsServedEndpoint(t *testing.T) {
	tests := []struct {
		name   string
		served string
		want   string // endpoint credited
	}{
		{name: "first fallback served", served: epB, want: epB},
		{name: "second fallback served", served: " " + epC, want: epC},
		{name: "the pick served", served: epA, want: epA},
		// not a candidate: ignored, the pick keeps the credit
		{name: "unknown endpoint ignored", served: "10.9.9.9:1", want: epA},
	}
	const body = `{"model":"m","prompt":"hello"}`
	prompt := int64(len("hello"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, preferOrder(epA, epB, epC), epA, epB, epC)
			cfg := DefaultConfig()
			cfg.ExtProc.DestinationFallbacks = true
			c, _, _ := startExtProc(t, cfg, f)
			s := openStream(t, context.Background(), c)
			s.send(requestHeaders(false, nil, duplex))
			s.send(requestBody([]byte(body), true))
			r := s.recv()
			if got := destination(t, r.GetRequestHeaders().GetResponse(), r.GetDynamicMetadata()); got != epA+","+epB+","+epC {
				t.Fatalf("destination %q, want %s,%s,%s", got, epA, epB, epC)
			}
			s.recv() // body
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: hdrMap(":status", "200", ServedHeader, tt.served)}}})
			hr := s.recv().GetResponseHeaders()
			var tagged string
			for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
				if h.GetHeader().GetKey() == "x-trimtab-endpoint" {
					tagged = string(h.GetHeader().GetRawValue())
				}
			}
			if tagged != tt.want {
				t.Errorf("x-trimtab-endpoint %q, want %q", tagged, tt.want)
			}
			// before the first response byte: one in flight, the prompt pending, on want only
			for _, a := range []string{epA, epB, epC} {
				in, pend := endpointLoad(t, f.sched, a)
				wantIn, wantPend := int64(0), int64(0)
				if a == tt.want {
					wantIn, wantPend = 1, prompt
				}
				if in != wantIn || pend != wantPend {
					t.Errorf("%s: in flight %d, pending prefill %d; want %d, %d", a, in, pend, wantIn, wantPend)
				}
			}
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
				Body: []byte(`{"choices":[]}`), EndOfStream: true}}})
			s.recv()
			if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess {
				t.Errorf("outcome %+v, want success", o)
			}
			f.waitIdle(t)
			if got := seriesEndpoints(t, f.reg)["trimtab_extproc_requests_total"]; !slices.Equal(got, []string{tt.want}) {
				t.Errorf("requests_total endpoints %v, want [%s]", got, tt.want)
			}
		})
	}
}

// servedMD is the metadata_context Envoy forwards on a response message
// when its override_host policy records the endpoint it connected to
// (selected_host_key) in envoy.lb, next to the destination trimtab set.
func servedMD(dest string, served *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		DestinationNamespace: {Fields: map[string]*structpb.Value{
			DestinationHeader: structpb.NewStringValue(dest),
			ServedKey:         served,
		}},
	}}
}

// The Inference Extension protocol reports the endpoint that served in
// the ext_proc request's metadata_context (envoy.lb /
// x-gateway-destination-endpoint-served), on whichever response message
// Envoy sends; the response header of the same name is only a fallback,
// used when the metadata does not carry the key.
func TestExtProcCreditsServedEndpointFromMetadata(t *testing.T) {
	const dest = epA + "," + epB + "," + epC
	tests := []struct {
		name     string
		hdrMD    *structpb.Value // metadata on the response headers message
		bodyMD   *structpb.Value // metadata on the response body messages
		header   string          // ServedHeader response header, "" for none
		want     string          // endpoint credited
		wantHdrs string          // x-trimtab-endpoint on the response headers
	}{
		{name: "metadata on response headers", hdrMD: structpb.NewStringValue(epB), want: epB, wantHdrs: epB},
		{name: "metadata on response body only", bodyMD: structpb.NewStringValue(epC), want: epC, wantHdrs: epA},
		// metadata is the protocol; a response header can come from the pod
		{name: "metadata beats header", hdrMD: structpb.NewStringValue(epB), header: epC, want: epB, wantHdrs: epB},
		{name: "header alone is the fallback", header: epB, want: epB, wantHdrs: epB},
		// a value of the wrong kind is no report: the header decides
		{name: "non-string metadata ignored", hdrMD: structpb.NewNumberValue(1), header: epC, want: epC, wantHdrs: epC},
		// not a candidate (Envoy's fallback policy chose it): the pick keeps the credit
		{name: "metadata naming a stranger", hdrMD: structpb.NewStringValue("10.9.9.9:1"), header: epB, want: epA, wantHdrs: epA},
	}
	const body = `{"model":"m","prompt":"hello"}`
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, preferOrder(epA, epB, epC), epA, epB, epC)
			cfg := DefaultConfig()
			cfg.ExtProc.DestinationFallbacks = true
			c, _, _ := startExtProc(t, cfg, f)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s := openStream(t, ctx, c)
			s.send(requestHeaders(false, nil, duplex))
			s.send(requestBody([]byte(body), true))
			r := s.recv()
			if got := destination(t, r.GetRequestHeaders().GetResponse(), r.GetDynamicMetadata()); got != dest {
				t.Fatalf("destination %q, want %s", got, dest)
			}
			s.recv() // body
			md := func(v *structpb.Value) *corev3.Metadata {
				if v == nil {
					return nil
				}
				return servedMD(dest, v)
			}
			kv := []string{":status", "200"}
			if tt.header != "" {
				kv = append(kv, ServedHeader, tt.header)
			}
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: hdrMap(kv...)}}, MetadataContext: md(tt.hdrMD)})
			var tagged string
			for _, h := range s.recv().GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
				if h.GetHeader().GetKey() == "x-trimtab-endpoint" {
					tagged = string(h.GetHeader().GetRawValue())
				}
			}
			if tagged != tt.wantHdrs {
				t.Errorf("x-trimtab-endpoint %q, want %q", tagged, tt.wantHdrs)
			}
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
				Body: []byte(`data: {}`)}}, MetadataContext: md(tt.bodyMD)})
			s.recv()
			// mid-response: the one request in flight sits on want only
			for _, a := range []string{epA, epB, epC} {
				in, _ := endpointLoad(t, f.sched, a)
				if wantIn := map[bool]int64{true: 1}[a == tt.want]; in != wantIn {
					t.Errorf("%s: in flight %d, want %d", a, in, wantIn)
				}
			}
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
				Body: []byte("data: [DONE]"), EndOfStream: true}}, MetadataContext: md(tt.bodyMD)})
			s.recv()
			if o := f.outcome(t); o.Kind != scheduler.OutcomeSuccess {
				t.Errorf("outcome %+v, want success", o)
			}
			f.waitIdle(t)
			if got := seriesEndpoints(t, f.reg)["trimtab_extproc_requests_total"]; !slices.Equal(got, []string{tt.want}) {
				t.Errorf("requests_total endpoints %v, want [%s]", got, tt.want)
			}
		})
	}
}
