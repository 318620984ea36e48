package configs

import (
	"strings"
	"testing"
)

// TestFillSetting: adaptive.fill parses from a profile, names scorers as
// the profile does, and needs a prefix scorer (its input) while the loop
// is on; each error names the key.
func TestFillSetting(t *testing.T) {
	const profile = `
scorers:
  - {type: %p, weight: 32}
  - {type: inflight, weight: 1}
  - {type: time-cost, weight: 0}
adaptive:
  enabled: %e
  fill: {enabled: true, add: {%a}, on: 0.8, off: 0.5, window: 2m, churn_on: 0.1}
`
	parse := func(scorer, enabled, add string) (*File, error) {
		r := strings.NewReplacer("%p", scorer, "%e", enabled, "%a", add)
		return Parse([]byte(r.Replace(profile)))
	}
	f, err := parse("prefix", "true", "time-cost: 1")
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Adaptive.Fill; !c.Enabled || c.On != 0.8 || c.Off != 0.5 || c.Add["time-cost"] != 1 || c.Interval.Seconds() != 5 ||
		c.Window.Minutes() != 2 || c.ChurnOn != 0.1 || c.ChurnOff != 0.01 {
		t.Errorf("parsed %+v, want on 0.8, off 0.5, add time-cost 1, window 2m, churn_on 0.1; interval 5s and churn_off 0.01 (the defaults)", c)
	}
	for name, tt := range map[string]struct{ scorer, enabled, add, want string }{
		"unknown scorer":      {"prefix", "true", "nope: 1", "adaptive.fill.add.nope: no scorer of the profile has this name; add one (weight 0"},
		"negative":            {"prefix", "true", "time-cost: -1", "adaptive.fill.add.time-cost"},
		"no prefix scorer":    {"lora", "true", "time-cost: 1", "adaptive.fill: no scorer of the profile reports the prefix index's fill"},
		"off checks the name": {"prefix", "false", "nope: 1", "adaptive.fill.add.nope"},
	} {
		if _, err := parse(tt.scorer, tt.enabled, tt.add); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tt.want)
		}
	}
	// The roll-back: the loop off keeps the section valid without its input.
	if _, err := parse("lora", "false", "time-cost: 1"); err != nil {
		t.Errorf("loop off, no prefix scorer: %v, want valid", err)
	}
}
