package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestHTTPUnknownModelNamesIt: a request for a model no endpoint serves
// gets 404 model_not_found whose message names the model the client
// sent, quoted, and cut to maxEchoedModel bytes when it is longer.
func TestHTTPUnknownModelNamesIt(t *testing.T) {
	u := newUpstream(t)
	long := strings.Repeat("m", 5000)
	for _, tt := range []struct {
		name, model, want string
	}{
		{"plain", "llama-nope", `no endpoint serves the requested model "llama-nope"`},
		{"quotes escaped", `a"b`, `no endpoint serves the requested model "a\"b"`},
		// 5,000 bytes are cut to maxEchoedModel (64) and marked with "…".
		{"bounded", long, `no endpoint serves the requested model "` + long[:maxEchoedModel] + `…"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, u.addr)
			h, err := NewHTTP(DefaultConfig(), f.deps(t))
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := start(t, h)
			model, _ := json.Marshal(tt.model)
			resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
				strings.NewReader(`{"model":`+string(model)+`,"prompt":"x"}`))
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound || errorCode(t, body) != "model_not_found" {
				t.Fatalf("status %d body %s, want 404 model_not_found", resp.StatusCode, body)
			}
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatal(err)
			}
			if e.Error.Message != tt.want {
				t.Errorf("message %q, want %q", e.Error.Message, tt.want)
			}
		})
	}
}
