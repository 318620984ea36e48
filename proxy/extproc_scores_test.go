package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/trimtab/trimtab/scheduler"
)

// TestExtProcEmitScores: with emit_scores the answer carrying the
// destination (headers in full duplex, body in buffered mode) carries the
// scores of the emit_scores_top listed endpoints; without it, neither the
// envoy.lb scores key nor the trimtab namespace is there.
func TestExtProcEmitScores(t *testing.T) {
	const epD = "10.0.0.4:8000"
	// preferOrder: A scores 1, B 0.9, C 0.8, D 0.7; one scorer "test" of weight 1,
	// so totals equal scores; top 3 lists A (chosen), B, C and leaves D out.
	want := `{"envoy.lb":{"x-gateway-destination-endpoint":"10.0.0.1:8000",` +
		`"x-gateway-destination-endpoint-scores":{"10.0.0.1:8000":1,"10.0.0.2:8000":0.9,"10.0.0.3:8000":0.8}},` +
		`"trimtab":{"candidates":4,"chosen":"10.0.0.1:8000","endpoints":[` +
		`{"address":"10.0.0.1:8000","scores":{"test":1},"total":1},` +
		`{"address":"10.0.0.2:8000","scores":{"test":0.9},"total":0.9},` +
		`{"address":"10.0.0.3:8000","scores":{"test":0.8},"total":0.8}],` +
		`"mode":"static","weights":{"test":1},"weights_version":1}}`
	buffered := &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED, ResponseBodyMode: filterv3.ProcessingMode_BUFFERED}
	for _, tt := range []struct {
		name string
		emit bool
		pc   *extprocv3.ProtocolConfiguration
	}{
		{"full duplex", true, duplex},
		{"buffered", true, buffered},
		{"off by default", false, duplex},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, preferOrder(epA, epB, epC, epD), epA, epB, epC, epD)
			cfg := DefaultConfig()
			cfg.ExtProc.EmitScores = tt.emit
			cfg.ExtProc.EmitScoresTop = 3
			c, _, _ := startExtProc(t, cfg, f)
			s := openStream(t, context.Background(), c)
			s.send(requestHeaders(false, nil, tt.pc))
			var md *structpb.Struct
			if tt.pc == buffered {
				s.recv() // headers answered at once
				s.send(requestBody([]byte(`{"model":"m"}`), true))
				r := s.recv()
				md = r.GetDynamicMetadata()
				destination(t, r.GetRequestBody().GetResponse(), md)
			} else {
				s.send(requestBody([]byte(`{"model":"m"}`), true))
				r := s.recv()
				md = r.GetDynamicMetadata()
				destination(t, r.GetRequestHeaders().GetResponse(), md)
				s.recv()
			}
			_ = s.s.CloseSend()
			f.outcome(t)
			got, err := protojson.Marshal(md)
			if err != nil {
				t.Fatal(err)
			}
			norm := canonicalJSON(t, got) // protojson's spacing is not stable
			if !tt.emit {
				if strings.Contains(norm, ScoresKey) || md.GetFields()[ScoresNamespace] != nil {
					t.Errorf("metadata without emit_scores: %s", norm)
				}
				return
			}
			if norm != canonicalJSON(t, []byte(want)) {
				t.Errorf("metadata\n got %s\nwant %s", norm, want)
			}
		})
	}
}

func TestListedCandidates(t *testing.T) {
	x := scheduler.Explanation{Chosen: "c", Candidates: []scheduler.CandidateScore{
		{Address: "a", Total: 0.5}, {Address: "b", Total: 0.9}, {Address: "c", Total: 0.2}, {Address: "d", Total: 0.9},
	}}
	tests := []struct {
		top  int
		want string
	}{
		// the chosen c first (a weighted-random pick need not be the best), then
		// by total: b and d tie at 0.9 (address order), then a at 0.5
		{top: 8, want: "c b d a"},
		{top: 2, want: "c b"},
		{top: 1, want: "c"},
	}
	for _, tt := range tests {
		var got []string
		for _, c := range listedCandidates(x, tt.top) {
			got = append(got, c.Address)
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("top %d: %v, want %s", tt.top, got, tt.want)
		}
	}
	if x.Candidates[0].Address != "a" {
		t.Error("listedCandidates reordered the explanation's candidates")
	}
}

// canonicalJSON re-encodes JSON with encoding/json: compact, keys sorted.
func canonicalJSON(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}
