package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDrawTTFT draws a run with a rebalance span and a failed request.
func TestDrawTTFT(t *testing.T) {
	s := time.Second
	r := &RunResult{Phases: []PhaseSpan{{"calm", 0, 2 * s}, {"burst", 2 * s, 4 * s}},
		Requests: []Request{{Sent: s, TTFT: 50 * time.Millisecond}, {Sent: 3 * s, Err: ErrCutStream}},
		Modes:    []ModePoint{{T: 0, Mode: "calm"}, {T: 2 * s, Mode: "rebalance"}, {T: 3 * s, Mode: "calm"}, {T: 3500 * time.Millisecond, Mode: "frozen"}}}
	path := filepath.Join(t.TempDir(), "ttft.png")
	if err := drawTTFT(path, "test", r); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() < 1000 {
		t.Fatalf("png: %v, %v", st, err)
	}
}
