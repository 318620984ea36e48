package scenario

import (
	"strings"
	"testing"
	"time"
)

func TestSLOMet(t *testing.T) {
	ms := time.Millisecond
	slo := DefaultSLO() // TTFT ≤ 2 s, TPOT ≤ 100 ms
	tests := []struct {
		name      string
		ttft, e2e time.Duration
		out       int
		want      bool
	}{
		{"one token at the TTFT bound", 2000 * ms, 2000 * ms, 1, true},      // 2000 ≤ 2000; decode 0 ≤ 0·100
		{"first token 1 ms late", 2001 * ms, 2001 * ms, 1, false},           // 2001 > 2000
		{"decode at the TPOT bound", 100 * ms, 1100 * ms, 11, true},         // 1100 − 100 = 1000 ≤ 10·100
		{"decode 1 ms over the TPOT bound", 100 * ms, 1101 * ms, 11, false}, // 1001 > 1000
		{"slow decode, fast first token", 50 * ms, 30050 * ms, 200, false},  // 30000 > 199·100 = 19900
		{"long answer within the bound", 1500 * ms, 21400 * ms, 200, true},  // 19900 ≤ 19900
		{"no output token counted", 10 * ms, 10 * ms, 0, true},              // max(0−1, 0) = 0: decode 0 ≤ 0
	}
	for _, tt := range tests {
		if got := slo.Met(tt.ttft, tt.e2e, tt.out); got != tt.want {
			t.Errorf("%s: Met(%v, %v, %d) = %v, want %v", tt.name, tt.ttft, tt.e2e, tt.out, got, tt.want)
		}
	}
}

func TestScenarioSLO(t *testing.T) {
	base := "name: x\nduration: 1m\nworkload: {kind: uniform, question_tokens: 1, output_tokens: 1}\nload: {levels: [1]}\n"
	sc, err := Parse([]byte(base), "")
	if err != nil {
		t.Fatal(err)
	}
	if sc.SLO != DefaultSLO() {
		t.Errorf("default SLO %+v, want %+v", sc.SLO, DefaultSLO())
	}
	sc, err = Parse([]byte(base+"slo: {ttft: 500ms}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if want := (SLO{TTFT: 500 * time.Millisecond, TPOT: 100 * time.Millisecond}); sc.SLO != want {
		t.Errorf("SLO with ttft set %+v, want %+v (tpot keeps its default)", sc.SLO, want)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"slo: {ttft: 0s}\n", "slo.ttft: must be > 0"},
		{"slo: {tpot: -1ms}\n", "slo.tpot: must be > 0"},
		{"slo: {e2e: 1s}\n", "field e2e not found"},
	} {
		_, err := Parse([]byte(base+tt.yaml), "")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("slo %q: %v, want an error containing %q", tt.yaml, err, tt.want)
		}
	}
}
