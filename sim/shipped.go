package sim

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/trimtab/trimtab/sim/scenario"
)

//go:embed scenarios/*.yaml scenarios/data/*.jsonl.gz
var shipped embed.FS

// LoadScenario reads a scenario file. A name without a path separator
// and without a file of that name is looked up among the shipped scenarios
// ("hot-prefix-burst" or "hot-prefix-burst.yaml"). The scenario's policies
// must be built-in policies.
func LoadScenario(path string) (*scenario.Scenario, error) {
	sc, err := scenario.LoadFile(path)
	if err == nil {
		return sc, checkPolicies(sc)
	}
	if !errors.Is(err, fs.ErrNotExist) || strings.ContainsRune(path, os.PathSeparator) {
		return nil, err
	}
	sc, serr := ShippedScenario(strings.TrimSuffix(path, ".yaml"))
	if serr != nil {
		return nil, fmt.Errorf("%w (and no shipped scenario %q; shipped: %s)", err, path, strings.Join(Shipped(), ", "))
	}
	return sc, nil
}

// ParseScenario decodes one scenario from YAML as the scenario package's
// Parse does, and checks that its policies are built-in policies.
func ParseScenario(data []byte, dir string) (*scenario.Scenario, error) {
	sc, err := scenario.Parse(data, dir)
	if err != nil {
		return nil, err
	}
	return sc, checkPolicies(sc)
}

// checkPolicies reports the first of sc's policies that names no built-in
// policy.
func checkPolicies(sc *scenario.Scenario) error {
	for i, p := range sc.Policies {
		if _, ok := builtinPolicy(p); !ok {
			return fmt.Errorf("scenario %q: policies[%d]: unknown policy %q (known: %s)", sc.Name, i, p, strings.Join(PolicyNames(), ", "))
		}
	}
	return nil
}

// Shipped returns the names of the embedded scenarios, sorted.
func Shipped() []string { return embeddedNames(shipped, "scenarios") }

// embeddedNames returns the names of the YAML files in dir of fsys,
// without their extension, sorted.
func embeddedNames(fsys embed.FS, dir string) []string {
	ents, _ := fsys.ReadDir(dir)
	var names []string
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// ShippedScenario returns one embedded scenario by name. Its relative
// paths (a trace) resolve inside the binary, so it runs from any
// directory.
func ShippedScenario(name string) (*scenario.Scenario, error) {
	sc, err := scenario.ParseFS(shipped, "scenarios/"+name+".yaml")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("scenario: no shipped scenario %q", name)
	}
	if err != nil {
		return nil, err
	}
	return sc, checkPolicies(sc)
}
