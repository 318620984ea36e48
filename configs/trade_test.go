package configs

import (
	"strings"
	"testing"

	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/scorers"
)

// TestTradeWeightsByName: adaptive.trade.weights names scorers as the
// profile does, whatever their case (the loader lowercases map keys); a
// name no scorer has, and a weight above the scorers' maximum, are
// errors naming the key. At mix 1 MyPrefix is 2 and time-cost 16.
func TestTradeWeightsByName(t *testing.T) {
	const profile = `
scorers:
  - {type: prefix, name: MyPrefix, weight: 32}
  - {type: inflight, weight: 1}
  - {type: time-cost, weight: 0}
adaptive:
  enabled: true
  trade: {enabled: true, weights: {%s}, d_max: 0.995, affinity_floor: 0.005}
`
	f, err := Parse([]byte(strings.Replace(profile, "%s", "MyPrefix: 2, time-cost: 16", 1)))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := f.buildScorers(scorers.InTree(), scorers.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	_, mixed := f.Adaptive.ShapedBy(entries, control.TradeState{Mix: 1}, 0)
	if mixed[0].Weight != 2 || mixed[1].Weight != 1 || mixed[2].Weight != 16 {
		t.Errorf("at mix 1: %v %v %v, want 2 1 16", mixed[0].Weight, mixed[1].Weight, mixed[2].Weight)
	}
	for weights, want := range map[string]string{
		"nope: 1":        "adaptive.trade.weights.nope: no scorer",
		"time-cost: 2e6": "adaptive.trade.weights.time-cost",
		"MyPrefix: -1":   "adaptive.trade.weights.myprefix",
	} {
		if _, err := Parse([]byte(strings.Replace(profile, "%s", weights, 1))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("weights {%s}: %v, want an error containing %q", weights, err, want)
		}
	}
}
