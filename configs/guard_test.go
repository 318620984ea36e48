package configs

import (
	"os"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

// TestGuardSetting: scheduler.guard is the guard of both modes; the
// adaptive section's guard keys still set it; both written and
// disagreeing is an error naming both keys.
func TestGuardSetting(t *testing.T) {
	const scorersYAML = `
scorers:
  - {type: prefix, weight: 3}
  - {type: inflight, weight: 1}
`
	for _, tc := range []struct {
		name     string
		yaml     string
		sched    scheduler.GuardConfig // resolved scheduler.guard
		adFactor float64               // resolved adaptive.guard_factor
		err      string
	}{
		{"static, nothing written: no guard", ``,
			scheduler.GuardConfig{Slack: 6, CrowdFactor: 1.5, CrowdSlack: 3, Unit: "requests", PrefillTokensPerSecond: 13100, WaitSlack: scheduler.DefaultWaitSlackSeconds}, 2.5, ""},
		{"adaptive, nothing written: the loop's own guard only", "adaptive: {enabled: true}",
			scheduler.GuardConfig{Slack: 6, CrowdFactor: 1.5, CrowdSlack: 3, Unit: "requests", PrefillTokensPerSecond: 13100, WaitSlack: scheduler.DefaultWaitSlackSeconds}, 2.5, ""},
		{"static with scheduler.guard", "scheduler: {guard: {factor: 3, slack: 4}}\nadaptive: {enabled: false}",
			scheduler.GuardConfig{Factor: 3, Slack: 4, CrowdFactor: 1.5, CrowdSlack: 3, Unit: "requests", PrefillTokensPerSecond: 13100, WaitSlack: scheduler.DefaultWaitSlackSeconds}, 3, ""},
		{"adaptive with scheduler.guard: the loop uses it", "scheduler: {guard: {factor: 2}}\nadaptive: {enabled: true}",
			scheduler.GuardConfig{Factor: 2, Slack: 6, CrowdFactor: 1.5, CrowdSlack: 3, Unit: "requests", PrefillTokensPerSecond: 13100, WaitSlack: scheduler.DefaultWaitSlackSeconds}, 2, ""},
		{"legacy adaptive.guard_factor with the loop off keeps the guard", "adaptive: {enabled: false, guard_factor: 2.5, guard_slack: 5}",
			scheduler.GuardConfig{Factor: 2.5, Slack: 5, CrowdFactor: 1.5, CrowdSlack: 3, Unit: "requests", PrefillTokensPerSecond: 13100, WaitSlack: scheduler.DefaultWaitSlackSeconds}, 2.5, ""},
		{"both written, same value", "scheduler: {guard: {factor: 2.5}}\nadaptive: {guard_factor: 2.5}",
			scheduler.GuardConfig{Factor: 2.5, Slack: 6, CrowdFactor: 1.5, CrowdSlack: 3, Unit: "requests", PrefillTokensPerSecond: 13100, WaitSlack: scheduler.DefaultWaitSlackSeconds}, 2.5, ""},
		{"both written, different", "scheduler: {guard: {factor: 3}}\nadaptive: {guard_factor: 2.5}",
			scheduler.GuardConfig{}, 0, "scheduler.guard.factor (3) and adaptive.guard_factor (2.5) disagree"},
		{"crowd keys conflict", "scheduler: {guard: {factor: 3, crowd_slack: 1}}\nadaptive: {crowd_slack: 2}",
			scheduler.GuardConfig{}, 0, "scheduler.guard.crowd_slack (1) and adaptive.crowd_slack (2) disagree"},
		{"seconds, slacks unwritten: the seconds defaults", "scheduler: {guard: {factor: 2.5, unit: seconds}}\nadaptive: {enabled: true}",
			scheduler.GuardConfig{Factor: 2.5, Slack: 0.5, CrowdFactor: 1.5, CrowdSlack: 0.25, Unit: "seconds", PrefillTokensPerSecond: 13100, WaitSlack: scheduler.DefaultWaitSlackSeconds}, 2.5, ""},
		{"seconds, slack written", "scheduler: {guard: {factor: 2, unit: seconds, slack: 1, prefill_tokens_per_second: 20000}}",
			scheduler.GuardConfig{Factor: 2, Slack: 1, CrowdFactor: 1.5, CrowdSlack: 0.25, Unit: "seconds", PrefillTokensPerSecond: 20000, WaitSlack: scheduler.DefaultWaitSlackSeconds}, 2, ""},
		{"wait bound written", "scheduler: {guard: {factor: 2.5, wait_factor: 4}}\nadaptive: {enabled: true}",
			scheduler.GuardConfig{Factor: 2.5, Slack: 6, CrowdFactor: 1.5, CrowdSlack: 3, Unit: "requests", PrefillTokensPerSecond: 13100, WaitFactor: 4, WaitSlack: scheduler.DefaultWaitSlackSeconds}, 2.5, ""},
		{"bad wait_factor", "scheduler: {guard: {factor: 2.5, wait_factor: 0.5}}",
			scheduler.GuardConfig{}, 0, "scheduler: guard.wait_factor"},
		{"wait bound without a guard", "scheduler: {guard: {wait_factor: 4}}\nadaptive: {enabled: false}",
			scheduler.GuardConfig{}, 0, "scheduler.guard.wait_factor: 4 has no guard"},
		{"join bound with no scorer reporting joins", "scheduler: {guard: {factor: 2.5, wait_factor: 4, join_factor: 1.5}}\nadaptive: {enabled: true}",
			scheduler.GuardConfig{}, 0, "scheduler: guard.join_factor: 1.5 needs a scorer that reports joins in progress; set learn: join_new and join_spread_fill"},
		{"bad join_factor", "scheduler: {guard: {factor: 2.5, join_factor: 0.5}}",
			scheduler.GuardConfig{}, 0, "scheduler: guard.join_factor"},
		{"join bound without a guard", "scheduler: {guard: {join_factor: 1.5}}\nadaptive: {enabled: false}",
			scheduler.GuardConfig{}, 0, "scheduler.guard.join_factor: 1.5 has no guard"},
		{"bad wait_slack", "scheduler: {guard: {factor: 2.5, wait_factor: 4, wait_slack: -1}}",
			scheduler.GuardConfig{}, 0, "scheduler: guard.wait_slack"},
		{"bad unit", "scheduler: {guard: {factor: 2, unit: tokens}}",
			scheduler.GuardConfig{}, 0, "guard.unit"},
		{"bad factor", "scheduler: {guard: {factor: 0.5}}",
			scheduler.GuardConfig{}, 0, "scheduler: guard.factor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.yaml + scorersYAML))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Scheduler.Guard != tc.sched {
				t.Errorf("scheduler.guard %+v, want %+v", f.Scheduler.Guard, tc.sched)
			}
			if f.Adaptive.GuardFactor != tc.adFactor {
				t.Errorf("adaptive.guard_factor %v, want %v", f.Adaptive.GuardFactor, tc.adFactor)
			}
			s, err := f.BuildScheduler(scorers.InTree(), scheduler.Deps{})
			if err != nil {
				t.Fatal(err)
			}
			// Static weights carry the scheduler's guard when it is on.
			if w := s.Weights(); w.Guard.Factor != tc.sched.Factor {
				t.Errorf("version 1 weights guard %+v, want factor %v", w.Guard, tc.sched.Factor)
			}
		})
	}
}

// TestJoinBoundSetting: scheduler.guard.join_factor with a prefix scorer
// that reports joins in progress (learn: join_new, join_spread_fill)
// builds, and the scheduler carries it.
func TestJoinBoundSetting(t *testing.T) {
	f, err := Parse([]byte(`
scheduler: {guard: {factor: 2.5, wait_factor: 4, join_factor: 1.5}}
adaptive: {enabled: true}
scorers:
  - {type: prefix, weight: 3, params: {learn: join_new, join_spread_fill: 0.7}}
  - {type: inflight, weight: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := scheduler.GuardConfig{Factor: 2.5, Slack: 6, CrowdFactor: 1.5, CrowdSlack: 3, Unit: "requests", PrefillTokensPerSecond: 13100,
		WaitFactor: 4, WaitSlack: scheduler.DefaultWaitSlackSeconds, JoinFactor: 1.5}
	if f.Scheduler.Guard != want {
		t.Errorf("scheduler.guard %+v, want %+v", f.Scheduler.Guard, want)
	}
	if _, err := f.BuildScheduler(scorers.InTree(), scheduler.Deps{}); err != nil {
		t.Fatal(err)
	}
}

// TestShippedGuardOnly: the adaptive profile rolled back with
// adaptive.enabled: false keeps its guard, and the scheduler it builds
// publishes it with the weights.
func TestShippedGuardOnly(t *testing.T) {
	f, err := LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	if f.Scheduler.Guard.Factor != 2.5 || f.Scheduler.Guard.Slack != 6 {
		t.Fatalf("adaptive profile scheduler.guard %+v, want factor 2.5 slack 6", f.Scheduler.Guard)
	}
	off := *f
	off.Adaptive.Enabled = false
	s, err := off.BuildScheduler(scorers.InTree(), scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Weights(); w.Guard.Factor != 2.5 || w.Calm == nil {
		t.Errorf("loop off: weights %+v, want the guard (factor 2.5) and herd accounting", w)
	}
	// The roll-back the file's header promises is one edit: the shipped
	// file with adaptive.enabled: false parses and validates as it is,
	// the trade law and rebalance scope left in place (idle).
	raw, err := os.ReadFile("adaptive.yaml")
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(raw), "adaptive:\n  enabled: true\n", "adaptive:\n  enabled: false\n", 1)
	if edited == string(raw) {
		t.Fatal("configs/adaptive.yaml has no \"adaptive:\\n  enabled: true\" to edit")
	}
	if g, err := Parse([]byte(edited)); err != nil || g.Adaptive.Enabled {
		t.Errorf("the roll-back edit (adaptive.enabled: false): %v, loop %v; want a valid profile with the loop off", err, g != nil && g.Adaptive.Enabled)
	}
}
