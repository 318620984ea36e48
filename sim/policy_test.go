package sim

import (
	"slices"
	"testing"
)

// TestGuardOnlyPolicy: guard-only is the adaptive profile with the loop
// off and its guard kept; adaptive-off drops both; adaptive keeps both.
func TestGuardOnlyPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		guard  float64
		loop   bool
		static bool
	}{
		{PolicyGuardOnly, 2.5, false, true},
		{PolicyAdaptiveOff, 0, false, true},
		{PolicyAdaptive, 2.5, true, false},
	} {
		ps, err := Policies([]string{tc.name})
		if err != nil {
			t.Fatal(err)
		}
		s, loop, err := ps[0].Build(1, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if w := s.Weights(); w.Guard.Factor != tc.guard {
			t.Errorf("%s: guard factor %v, want %v", tc.name, w.Guard.Factor, tc.guard)
		}
		if (loop != nil) != tc.loop {
			t.Errorf("%s: loop %v, want %v", tc.name, loop != nil, tc.loop)
		}
		f, err := ps[0].Profile()
		if err != nil {
			t.Fatalf("%s profile: %v", tc.name, err)
		}
		if f.Adaptive.Enabled == tc.static || f.Scheduler.Guard.Factor != tc.guard {
			t.Errorf("%s profile: adaptive %v guard %v", tc.name, f.Adaptive.Enabled, f.Scheduler.Guard.Factor)
		}
	}
	if !slices.Contains(PolicyNames(), PolicyGuardOnly) {
		t.Errorf("policy names %v lack %s", PolicyNames(), PolicyGuardOnly)
	}
}
