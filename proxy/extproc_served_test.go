package proxy

import (
	"context"
	"slices"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

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
