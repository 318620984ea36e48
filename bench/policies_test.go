package bench

import (
	"slices"
	"testing"

	"github.com/trimtab/trimtab/sim"
)

// TestPoliciesRunEverySimPolicy: bench accepts every policy the simulator
// has — the profiles and the baselines that are not profiles
// (round-robin, sglang-switch, smg-least-load, dynamo-kv-cost), which run
// in the router with the simulator's own scheduler — and lists them all.
func TestPoliciesRunEverySimPolicy(t *testing.T) {
	names := sim.PolicyNames()
	if got := PolicyNames(); !slices.Equal(got, names) {
		t.Errorf("PolicyNames() = %v, want the simulator's %v", got, names)
	}
	pols, err := Policies(names, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pols) != len(names) {
		t.Fatalf("%d policies for %d names", len(pols), len(names))
	}
	var baselines []string
	for i, p := range pols {
		if p.Name != names[i] || p.Profile == nil {
			t.Errorf("policy %d: %q with profile %v, want %q with one", i, p.Name, p.Profile != nil, names[i])
		}
		if p.Baseline != nil {
			baselines = append(baselines, p.Name)
			if p.Baseline.Name != p.Name || p.Baseline.Build == nil || p.Profile.Adaptive.Enabled {
				t.Errorf("%s: baseline %q, build %v, loop on %v", p.Name, p.Baseline.Name, p.Baseline.Build != nil, p.Profile.Adaptive.Enabled)
			}
		}
	}
	// The simulator's baselines that are not profiles.
	want := []string{sim.PolicyRoundRobin, sim.PolicySGLang, sim.PolicySMGLeastLoad, sim.PolicyDynamoKVCost}
	slices.Sort(want)
	slices.Sort(baselines)
	if !slices.Equal(baselines, want) {
		t.Errorf("baselines %v, want %v", baselines, want)
	}
}
