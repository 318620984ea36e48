package configs

import (
	"strings"
	"testing"
)

// TestWrongTypeSaysWantAndGot: a value of the wrong type is reported
// with the key, what the key takes and what the file gave, in the words
// of a YAML file rather than Go's type names.
func TestWrongTypeSaysWantAndGot(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"adaptive:\n  theta_on: high\n", `adaptive.theta_on: want a number, got "high"`},
		{"scheduler:\n  max_fallbacks: two\n", `scheduler.max_fallbacks: want a whole number, got "two"`},
		{"adaptive:\n  enabled: maybe\n", `adaptive.enabled: want true or false, got "maybe"`},
		{"server:\n  http:\n    addr: [1, 2]\n", `server.http.addr: want a string, got a list`},
		{"adaptive:\n  min_dwell: [1]\n", `adaptive.min_dwell: want a duration such as 500ms or 15s, got a list`},
		{"adaptive: 3\n", `adaptive: want a section of keys, got a number`},
		{"scorers:\n  - type: prefix\n    weight: heavy\n", `scorers[0].weight: want a number, got "heavy"`},
		{"scorers:\n  - type: prefix\n    weight: 1\n    params:\n      block_size: big\n", `block_size: want a whole number, got "big"`},
		// A long value is cut to 64 bytes: "x" × 64 and "…".
		{"adaptive:\n  theta_on: " + strings.Repeat("x", 100) + "\n", `adaptive.theta_on: want a number, got "` + strings.Repeat("x", 64) + `…"`},
	} {
		_, err := Parse([]byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v\nwant it to contain %s", tt.yaml, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), "float64") || strings.Contains(err.Error(), "interface {}") || strings.Contains(err.Error(), "strconv")) {
			t.Errorf("%q: error %v speaks Go", tt.yaml, err)
		}
	}
	// Two wrong values: both are reported, each in words.
	_, err := Parse([]byte("adaptive:\n  theta_on: high\n  enabled: maybe\n"))
	for _, want := range []string{`adaptive.theta_on: want a number, got "high"`, `adaptive.enabled: want true or false, got "maybe"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("two wrong values: error %v lacks %s", err, want)
		}
	}
}
