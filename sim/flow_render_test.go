package sim

import (
	"bytes"
	"github.com/trimtab/trimtab/sim/scenario"
	"slices"
	"testing"
)

// batch-interference's classes in the order summary.json lists them, and
// its streams' requests as bench renders them: 1,024-token prompts and
// 256-token answers ±20 % (819 … 1,229 and 204 … 308 tokens), the same
// bytes for the same seed and stream, other bytes for another stream.
func TestStreamRenderer(t *testing.T) {
	sc := loadShipped(t, "batch-interference", 0)
	names, phase, stream := sc.RequestClasses()
	if !slices.Equal(names, []string{"interactive", "batch-1", "batch-2", "batch-3"}) || !slices.Equal(phase, []int{0}) || !slices.Equal(stream, []int{1, 2, 3}) {
		t.Fatalf("classes %v, phases %v, streams %v", names, phase, stream)
	}
	if got := sc.Streams[0].Header("x-trimtab-priority") + " " + sc.Streams[0].Header("authorization") + " " + sc.Streams[0].Header("x-llm-d-inference-ttl"); got != "sheddable Bearer job-1 600" {
		t.Errorf("batch-1's headers %q, want sheddable, Bearer job-1, 600", got)
	}
	draw := func(k int) []scenario.Rendered {
		r, err := scenario.NewStreamRenderer(sc, k, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []scenario.Rendered
		for range 20 {
			out = append(out, r.Next())
		}
		return out
	}
	a, b, c := draw(0), draw(0), draw(1)
	for i := range a {
		if n, o := len(a[i].Prompt)/scenario.BytesPerToken, a[i].OutputTokens; n < 819 || n > 1229 || o < 204 || o > 308 {
			t.Fatalf("request %d: %d prompt tokens, %d output; want 819…1229 and 204…308", i, n, o)
		}
		if !bytes.Equal(a[i].Prompt, b[i].Prompt) || bytes.Equal(a[i].Prompt, c[i].Prompt) {
			t.Fatalf("request %d: the same stream must render the same bytes, another stream others", i)
		}
	}
	if names, _, _ := loadShipped(t, "uniform", 0).RequestClasses(); names != nil {
		t.Errorf("uniform's classes %v, want none", names)
	}
}
