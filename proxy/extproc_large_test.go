package proxy

import (
	"context"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

var buffered = &extprocv3.ProtocolConfiguration{
	RequestBodyMode:  filterv3.ProcessingMode_BUFFERED,
	ResponseBodyMode: filterv3.ProcessingMode_BUFFERED,
}

// TestExtProcOversizedMessageGets413: a body over max_body_bytes (16 MiB
// by default) in one message — 20 MB, beyond the old gRPC receive limit
// of 16 MiB + 1 MiB — is answered with an ImmediateResponse 413, not a
// ResourceExhausted stream error (a 500 at the client); so is one a byte
// over the limit. The receive limit is 2 × 16 MiB + 1 MiB = 33 MiB.
func TestExtProcOversizedMessageGets413(t *testing.T) {
	tests := []struct {
		name string
		pc   *extprocv3.ProtocolConfiguration
		size int
	}{
		{"buffered 20 MB", buffered, 20_000_000},
		{"full duplex 20 MB", duplex, 20_000_000},
		{"buffered max_body_bytes + 1", buffered, 16<<20 + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, epA)
			c, _, _ := startExtProc(t, DefaultConfig(), f)
			s := openStream(t, context.Background(), c)
			s.send(requestHeaders(false, nil, tt.pc))
			if tt.pc == buffered {
				if r := s.recv(); r.GetRequestHeaders() == nil {
					t.Fatalf("buffered: headers answer %v", r)
				}
			}
			s.send(requestBody(make([]byte, tt.size), true))
			checkImmediate(t, s.recv(), 413, "body_too_large", false)
			f.noMoreOutcomes(t)
		})
	}
}
