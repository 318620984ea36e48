package scenario

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTraceSynthesis(t *testing.T) {
	// Two entries sharing their first two ids share exactly 2 × 512 tokens
	// of prompt bytes and then differ.
	g := &TraceGen{w: &Workload{TraceTokensPerID: 512}, entries: []TraceEntry{
		{InputLength: 1500, OutputLength: 5, HashIDs: []uint64{7, 8, 9}},
		{InputLength: 1300, OutputLength: 5, HashIDs: []uint64{7, 8, 10}},
	}}
	var a, b Request
	g.Next(nil, 0, &a)
	g.Next(nil, 0, &b)
	if a.PromptTokens() != 1500 || b.PromptTokens() != 1300 {
		t.Fatalf("prompt tokens %d and %d, want 1500 and 1300", a.PromptTokens(), b.PromptTokens())
	}
	var ba, bb []byte
	for _, s := range a.Segs {
		ba = AppendSegment(ba, s)
	}
	for _, s := range b.Segs {
		bb = AppendSegment(bb, s)
	}
	common := 0
	for common < len(ba) && common < len(bb) && ba[common] == bb[common] {
		common++
	}
	// 2 × 512 tokens × 4 bytes = 4096 shared bytes (the third blocks
	// differ from their first byte with overwhelming probability).
	if common < 4096 || common > 4096+8 {
		t.Errorf("shared %d bytes, want 4096", common)
	}
}

func TestParseTraceErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}`, "input_length must be ≥ 1"},
		{`{"timestamp": 0, "input_length": 1, "output_length": -1, "hash_ids": []}`, "output_length ≥ 0"},
		{`{"timestamp": 5, "input_length": 1, "output_length": 1, "hash_ids": []}` + "\n" + `{"timestamp": 4, "input_length": 1, "output_length": 1, "hash_ids": []}`, "timestamp 4 before 5"},
		{`not json`, "trace line 1"},
		{``, "no entries"},
	}
	for _, tt := range tests {
		_, err := ParseTrace(bufio.NewScanner(strings.NewReader(tt.in)), 0)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseTrace(%q) = %v, want an error containing %q", tt.in, err, tt.want)
		}
	}
}

func FuzzParseTrace(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("..", "testdata", "mooncake_sample.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(data))
	f.Add(`{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1]}`)
	f.Add("\n\n{}\n")
	f.Fuzz(func(t *testing.T, in string) {
		es, err := ParseTrace(bufio.NewScanner(strings.NewReader(in)), 100)
		if err != nil {
			return
		}
		var last int64
		for _, e := range es {
			if e.InputLength < 1 || e.OutputLength < 0 || e.Timestamp < last {
				t.Fatalf("accepted a bad entry %+v", e)
			}
			last = e.Timestamp
		}
	})
}
