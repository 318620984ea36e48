package configs

import (
	"strings"
	"testing"
)

// TestReloadOver: weights and the adaptive section reload; any other
// change is refused, naming the section; an invalid profile is refused
// with its own error.
func TestReloadOver(t *testing.T) {
	const base = `
scorers:
  - type: prefix
    weight: 3
    params: {block_size: 64}
  - type: queue
    weight: 2
picker: {type: max-score}
scrape: {interval: 50ms}
server:
  http: {addr: ":8080"}
`
	running, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, old, new string
		want           string // "" : accepted
	}{
		{"same", "", "", ""},
		{"weight", "weight: 3", "weight: 5", ""},
		{"adaptive", "picker:", "adaptive: {enabled: true}\npicker:", ""},
		{"scorer removed", "  - type: queue\n    weight: 2\n", "", "scorers (the list) changed: restart"},
		{"params", "block_size: 64", "block_size: 32", "scorers[0] (type, name or params) changed"},
		{"name", "  - type: queue\n", "  - type: queue\n    name: q\n", "scorers[1] (type, name or params) changed"},
		{"picker", "type: max-score", "type: weighted-random", "picker changed"},
		{"scrape", "interval: 50ms", "interval: 100ms", "endpoints/scrape changed"},
		{"server", `":8080"`, `":8081"`, "server changed"},
		{"invalid", "weight: 2", "weight: -2", "scorers[1] (queue).weight: must be a finite number"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			next := Default()
			if tt.want != "" && strings.Contains(tt.want, "weight") {
				// An invalid profile cannot come from Parse; build it.
				next, _ = Parse([]byte(base))
				w := -2.0
				next.Scorers[1].Weight = &w
			} else if next, err = Parse([]byte(strings.Replace(base, tt.old, tt.new, 1))); err != nil {
				t.Fatal(err)
			}
			r, err := next.ReloadOver(running)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if len(r.Weights) != 2 || r.Weights[1] != 2 || r.Adaptive.Enabled != next.Adaptive.Enabled {
					t.Errorf("reloadable %+v, want the new profile's weights and adaptive section", r)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
