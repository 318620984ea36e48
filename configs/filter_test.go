package configs

import (
	"strings"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

// TestPrefixAffinityFilterProfile: the prefix-affinity filter is listed in
// filters and set in prefix_affinity; it needs a prefix scorer.
func TestPrefixAffinityFilterProfile(t *testing.T) {
	const ok = `
filters: [model, healthy, prefix-affinity]
prefix_affinity: {threshold: 0.9, max_tokens_in_flight_penalty: 1000}
scorers:
  - {type: prefix, weight: 0, params: {learn: pick}}
  - {type: token-load, weight: 1}
`
	f, err := Parse([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if f.PrefixAffinity.Threshold != 0.9 || f.PrefixAffinity.MaxTokensInFlightPenalty != 1000 || f.PrefixAffinity.BytesPerToken != 4 {
		t.Errorf("prefix_affinity %+v", f.PrefixAffinity)
	}
	if _, err := f.BuildScheduler(scorers.InTree(), scheduler.Deps{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"filters: [prefix-affinity]\nscorers: [{type: token-load, weight: 1}]", "filters: prefix-affinity reads the prefix scorer's index"},
		{"filters: [prefix-affinity]\nprefix_affinity: {threshold: 2}\nscorers: [{type: prefix, weight: 1}]", "prefix_affinity.threshold"},
		{"filters: [nope]\nscorers: [{type: prefix, weight: 1}]", `unknown filter "nope"`},
	} {
		if _, err := Parse([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}
