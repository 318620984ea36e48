package sim

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestShippedScenariosSelfContained: every shipped scenario loads, and a
// trace it names lives inside the binary (a relative path without ".."),
// so `trimtab sim --scenario all` needs nothing outside the repository.
// The YAML files beside the suite (the held-out scenarios in
// sim/scenarios/held-out, the long-running router's in sim/scenarios/warm,
// sim/profiles) load from the repository alone too, and none of them is
// shipped.
func TestShippedScenariosSelfContained(t *testing.T) {
	t.Chdir(t.TempDir()) // nothing may be read from the working tree
	for _, name := range Shipped() {
		sc, err := ShippedScenario(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tr := sc.Workload.Trace
		if tr == "" {
			continue
		}
		if filepath.IsAbs(tr) || strings.Contains(tr, "..") {
			t.Errorf("%s: workload.trace %q leaves the repository", name, tr)
		}
		if _, err := sc.LoadTrace(""); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestHeldOutScenariosAndProfilesLoad(t *testing.T) {
	extra, _ := filepath.Glob("scenarios/held-out/*.yaml")
	warm, _ := filepath.Glob("scenarios/warm/*.yaml")
	extra = append(extra, warm...)
	profiles, _ := filepath.Glob("profiles/*.yaml")
	if len(extra) == 0 || len(profiles) == 0 {
		t.Fatalf("no sim/scenarios/held-out or sim/profiles files (%v, %v)", extra, profiles)
	}
	for _, p := range extra {
		if name := strings.TrimSuffix(filepath.Base(p), ".yaml"); slices.Contains(Shipped(), name) {
			t.Errorf("%s: held out, but shipped as %q", p, name)
		}
		sc, err := LoadScenario(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
		} else if tr := sc.Workload.Trace; tr != "" {
			t.Errorf("%s: workload.trace %q: held-out workloads must not need a file", p, tr)
		}
	}
	for _, p := range profiles {
		if _, err := LoadProfilePolicy(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if data, err := os.ReadFile("scenarios/data/NOTICE"); err != nil || !strings.Contains(string(data), "Apache License") || !strings.Contains(string(data), "kvcache-ai/Mooncake") {
		t.Errorf("sim/scenarios/data/NOTICE: %v; want the Apache-2.0 notice and the Mooncake attribution", err)
	}
}
