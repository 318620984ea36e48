package fakeserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestResponseStoreBound: the store forgets its oldest responses beyond
// its count and byte bounds, and never stores one larger than the byte
// bound.
func TestResponseStoreBound(t *testing.T) {
	s, err := NewResponseStore(3, 40)
	if err != nil {
		t.Fatal(err)
	}
	conv := func(n int) []byte { return []byte(strings.Repeat("x", n)) }
	steps := []struct {
		id      string
		size    int
		n, b    int      // responses and bytes after the put
		present []string // ids still held
		gone    []string
	}{
		{"r1", 8, 1, 10, []string{"r1"}, nil},                         // 2 + 8
		{"r2", 8, 2, 20, []string{"r1", "r2"}, nil},                   // 10 + 10
		{"r3", 8, 3, 30, []string{"r1", "r2", "r3"}, nil},             // 20 + 10
		{"r4", 8, 3, 30, []string{"r2", "r3", "r4"}, nil},             // a 4th response: r1 goes
		{"r5", 28, 2, 40, []string{"r4", "r5"}, []string{"r2", "r3"}}, // 30 + 30 > 40: r2 (→50) and r3 (→40) go
		{"r6", 39, 2, 40, []string{"r4", "r5"}, []string{"r6"}},       // 41 bytes alone: not stored
		{"r4", 2, 2, 34, []string{"r4", "r5"}, nil},                   // replaced in place: 40 − 10 + 4
	}
	for i, st := range steps {
		s.put(st.id, conv(st.size))
		n, b := s.Len()
		if n != st.n || b != st.b {
			t.Errorf("step %d (%s): %d responses, %d bytes; want %d, %d", i, st.id, n, b, st.n, st.b)
		}
		for _, id := range st.present {
			if _, ok := s.get(id); !ok {
				t.Errorf("step %d: %s forgotten", i, id)
			}
		}
		for _, id := range st.gone {
			if _, ok := s.get(id); ok {
				t.Errorf("step %d: %s still held", i, id)
			}
		}
	}
	for range 1000 { // the queue does not grow without bound
		s.put("r7", conv(1))
	}
	if len(s.queue) > 8 {
		t.Errorf("queue of %d ids for %d responses", len(s.queue), len(s.m))
	}
	if _, err := NewResponseStore(0, 1); err == nil {
		t.Error("a store of 0 responses was accepted")
	}
}

// startShared starts a named server on the shared store on 127.0.0.1.
func startShared(t *testing.T, name string, store *ResponseStore) string {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TimeScale, cfg.Name = 1000, name
	s, err := New(cfg, Deps{Responses: store})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String()
}

// TestContinuationAcrossTheFleet: two servers share one store. A
// continuation of a response by previous_response_id is prefilled with
// the whole conversation on either server: on the one that answered the
// turn before, the conversation so far comes from its prefix cache; on the
// other nothing does. Response ids differ between the servers.
func TestContinuationAcrossTheFleet(t *testing.T) {
	store, _ := NewResponseStore(16, 1<<20)
	a, b := startShared(t, "a", store), startShared(t, "b", store)
	instr := strings.Repeat("You are a careful coding agent. ", 64) // 2,048 bytes
	call := func(base, prev, input string) (id string, prompt, cached float64) {
		t.Helper()
		body := fmt.Sprintf(`{"model":"llama-3.1-8b-instruct","instructions":%q,"input":%s,"max_output_tokens":4`, instr, input)
		if prev != "" {
			body += fmt.Sprintf(`,"previous_response_id":%q`, prev)
		}
		resp := post(t, base+"/v1/responses", body+"}")
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d, %v, %v", resp.StatusCode, err, out)
		}
		return out["id"].(string), num(out, "usage.input_tokens"), num(out, "usage.input_tokens_details.cached_tokens")
	}
	id0, p0, _ := call(a, "", `"list the files"`)
	result := `[{"type":"function_call_output","call_id":"c1","output":"main.go parse.go score.go"}]`
	_, pA, cA := call(a, id0, result)
	idB, pB, cB := call(b, id0, result)
	if id0 == idB { // each server's first request
		t.Errorf("both servers answered with id %s", id0)
	}
	// Turn 1 prefills turn 0's prompt (p0), its output ("lorem ipsum
	// dolor sit ", 4 tokens in 41 bytes with the role line) and the
	// tool result: more than p0 + 10 tokens on either server.
	if pA != pB || pA < p0+10 {
		t.Errorf("continuation prompts %v on a, %v on b; want equal and > %v + 10", pA, pB, p0)
	}
	// On a, turn 0's whole blocks of 16 tokens hit: ≥ p0 − 15.
	if cA < p0-15 || cB != 0 {
		t.Errorf("cached %v on the holder (want ≥ %v), %v on the other (want 0)", cA, p0-15, cB)
	}
	resp := post(t, b+"/v1/responses", `{"model":"llama-3.1-8b-instruct","input":"x","previous_response_id":"resp_nowhere"}`)
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("continuation of an unknown id: status %d, want 400", resp.StatusCode)
	}
}
