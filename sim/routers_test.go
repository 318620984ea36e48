package sim

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// TestOneRouterIsTheSingleRouter: a routers: section with one replica runs
// exactly the single-router simulation, for every policy.
func TestOneRouterIsTheSingleRouter(t *testing.T) {
	for _, p := range allPolicies(t) {
		plain := smallScenario(t)
		one := smallScenario(t)
		one.Routers = &scenario.Routers{Replicas: 1}
		one.Routers.SetDefaults()
		a, err := Run(RunConfig{Scenario: plain, Policy: p, Level: 24, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(RunConfig{Scenario: one, Policy: p, Level: 24, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if a.Issued != b.Issued || !slices.Equal(a.TTFT, b.TTFT) || a.PrefixHitRate != b.PrefixHitRate || a.WeightChanges != b.WeightChanges {
			t.Errorf("%s: one router in a routers: section differs from the plain run (issued %d vs %d, hit %v vs %v)", p.Name, b.Issued, a.Issued, b.PrefixHitRate, a.PrefixHitRate)
		}
	}
}

// TestReplicaSyncRecoversTheLoss: three routers behind round robin without
// sync lose prefix hits against one router (each index learns a third of
// the picks); with sync they get them back.
func TestReplicaSyncRecoversTheLoss(t *testing.T) {
	run := func(n int, sync bool) *Result {
		t.Helper()
		sc := loadShipped(t, "shared-prefix", time.Minute)
		if n > 1 {
			sc.Routers = &scenario.Routers{Replicas: n, Sync: &sync}
			sc.Routers.SetDefaults()
		}
		return runOne(t, sc, PolicyAdaptive, 125)
	}
	single, off, on := run(1, false), run(3, false), run(3, true)
	t.Logf("prefix hit: 1 router %.4f, 3 without sync %.4f, 3 with sync %.4f; TTFT p99 %.1f, %.1f, %.1f ms",
		single.PrefixHitRate, off.PrefixHitRate, on.PrefixHitRate,
		report.Percentile(single.TTFT, 99), report.Percentile(off.TTFT, 99), report.Percentile(on.TTFT, 99))
	if off.PrefixHitRate > single.PrefixHitRate-0.01 {
		t.Errorf("3 routers without sync hit %.4f, one router %.4f: want a loss of at least 1 point", off.PrefixHitRate, single.PrefixHitRate)
	}
	if on.PrefixHitRate < single.PrefixHitRate*0.99 {
		t.Errorf("3 synced routers hit %.4f, want within 1 %% of one router's %.4f", on.PrefixHitRate, single.PrefixHitRate)
	}
	if on.SyncPicks == 0 || off.SyncPicks != 0 {
		t.Errorf("sync picks: %d with sync, %d without; want > 0 and 0", on.SyncPicks, off.SyncPicks)
	}
}

// TestRoutersConserveRequests: with replicas, a pod loss and client-hash
// spread, every request still completes, fails or times out exactly once.
func TestRoutersConserveRequests(t *testing.T) {
	for _, spread := range []string{scenario.SpreadRoundRobin, scenario.SpreadClientHash} {
		sc := loadShipped(t, "pod-loss", 30*time.Second)
		sc.Routers = &scenario.Routers{Replicas: 3, Spread: spread}
		sc.Routers.SetDefaults()
		r := runOne(t, sc, PolicyAdaptive, sc.Load.Levels[0])
		if r.Completed == 0 || r.SyncPicks == 0 {
			t.Errorf("%s: %d completed, %d sync picks", spread, r.Completed, r.SyncPicks)
		}
		if s := r.Summary(); s.Routers == nil || s.Routers.Replicas != 3 || s.Routers.Spread != spread || !s.Routers.Sync {
			t.Errorf("%s: summary routers %+v", spread, s.Routers)
		}
	}
}

func TestRoutersErrors(t *testing.T) {
	base := "name: x\nduration: 1m\nworkload: {kind: uniform, question_tokens: 1, output_tokens: 1}\nload: {levels: [1]}\n"
	tests := []struct{ yaml, want string }{
		{"routers: {replicas: 0}", ""},
		{"routers: {replicas: 65}", "routers.replicas: 65, want 1…64"},
		{"routers: {replicas: 2, spread: random}", `routers.spread: "random", want round-robin or client-hash`},
		{"routers: {replicas: 2, sync_delay: -1ms}", "routers.sync_delay: -1ms, want ≥ 0"},
		{"routers: {replicas: 2, sync: maybe}", "cannot unmarshal"},
	}
	for _, tt := range tests {
		sc, err := ParseScenario([]byte(base+tt.yaml), "")
		if tt.want == "" {
			if err != nil || sc.Routers.Replicas != 1 || !sc.Routers.SyncOn() || sc.Routers.SyncDelay != 20*time.Millisecond {
				t.Errorf("%s: %v, routers %+v; want the defaults", tt.yaml, err, sc.Routers)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.yaml, err, tt.want)
		}
	}
	sc, err := ParseScenario([]byte(base+"routers: {replicas: 3, sync: off, spread: client-hash}"), "")
	if err != nil || sc.Routers.SyncOn() || sc.Routers.Spread != scenario.SpreadClientHash {
		t.Errorf("sync: off: %v, %+v", err, sc.Routers)
	}
}

// TestRoutersSyncTheHeaviestPrefixIndex: with several prefix scorers in
// the profile, every router syncs the one with the largest profile weight
// (the first of those on a tie), the same one `trimtab serve`'s replica
// sync shares (prefix.Synced). Weights 0, 32, 32, 0: the second.
func TestRoutersSyncTheHeaviestPrefixIndex(t *testing.T) {
	p := profilePolicy("four-indexes", "", `
picker: {type: max-score}
scorers:
  - {type: prefix, name: pa, weight: 0, params: {learn: pick}}
  - {type: prefix, name: pb, weight: 32}
  - {type: prefix, name: pc, weight: 32}
  - {type: prefix, name: pd, weight: 0, params: {learn: pick}}
  - {type: inflight, weight: 1}
`)
	sc := smallScenario(t)
	sc.Routers = &scenario.Routers{Replicas: 2}
	sc.Routers.SetDefaults()
	r := &runner{cfg: RunConfig{Scenario: sc, Policy: p, Level: 1, Seed: 1}, sc: sc}
	if err := r.buildRouters(); err != nil {
		t.Fatal(err)
	}
	for _, rt := range r.routers {
		if want := rt.sched.Scorers()[1].Scorer; rt.prefix != want {
			t.Errorf("%s syncs %p, want pb's index %p (weight 32, the first of the heaviest)", rt.name, rt.prefix, want)
		}
	}
}
