package proxy

import (
	"context"
	"testing"
)

// TestExtProcAdmissionFreedOnPickError: a pick that fails after admission
// (unknown model, a subset matching no endpoint, an empty pool) frees its
// max_in_flight slot, so with max_in_flight 2 three failures in a row
// leave room for a good request.
func TestExtProcAdmissionFreedOnPickError(t *testing.T) {
	tests := []struct {
		name     string
		pool     []string
		subset   []string
		body     string
		status   int
		wantCode string
	}{
		{name: "unknown model", body: `{"model":"nope"}`, status: 404, wantCode: "model_not_found"},
		{name: "subset matches nothing", subset: []string{"10.9.9.9:1"}, body: `{"model":"m"}`, status: 503, wantCode: "no_endpoints"},
		{name: "no endpoints", pool: []string{}, body: `{"model":"m"}`, status: 503, wantCode: "no_endpoints"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, epA)
			cfg := DefaultConfig()
			cfg.ExtProc.MaxInFlight = 2
			c, e, _ := startExtProc(t, cfg, f)
			if tt.pool != nil {
				setPool(f.sched, tt.pool...)
			}
			for i := 0; i < 3; i++ {
				s := openStream(t, context.Background(), c)
				if tt.subset != nil {
					s.send(requestHeaders(false, subsetMD(subsetList(tt.subset...)), duplex))
				} else {
					s.send(requestHeaders(false, nil, duplex))
				}
				s.send(requestBody([]byte(tt.body), true))
				checkImmediate(t, s.recv(), tt.status, tt.wantCode, tt.status == 503)
			}
			if n := e.inflight.Load(); n != 0 {
				t.Fatalf("after 3 failed picks %d slots are held, want 0", n)
			}
			setPool(f.sched, epA)
			s := openStream(t, context.Background(), c)
			s.send(requestHeaders(false, nil, duplex))
			s.send(requestBody([]byte(`{"model":"m"}`), true))
			if r := s.recv(); r.GetRequestHeaders() == nil {
				t.Fatalf("good request after failed picks: %v, want a pick", r)
			}
		})
	}
}
