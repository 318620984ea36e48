package arch

import (
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/trimtab/trimtab"

// allowed lists, for each top-level package directory, the trimtab
// directories its non-test code may import. Anything absent is forbidden,
// so a new dependency is a deliberate edit here. The shape (DESIGN.md):
// cmd → proxy → scheduler; cmd → scorers → scheduler; detector,
// configurator → scheduler, fleet; sim → everything below cmd and proxy;
// nothing imports cmd or proxy.
var allowed = map[string][]string{
	"scheduler":    {},
	"scorers":      {"scheduler"},
	"fleet":        {"scheduler"},
	"detector":     {"scheduler", "fleet"},
	"configurator": {"scheduler", "fleet", "detector"},
	"configs":      {"scheduler", "scorers", "fleet", "detector", "configurator"},
	"proxy":        {"scheduler"},
	"sim":          {"scheduler", "scorers", "fleet", "detector", "configurator", "configs"},
	"cmd":          {"scheduler", "scorers", "fleet", "detector", "configurator", "configs", "proxy", "sim", "internal"},
	"internal":     {"scheduler", "scorers", "fleet", "detector", "configurator", "configs", "sim"},
	"deploy":       {"configs"},
}

// top returns the top-level directory of a trimtab import path ("" for
// the module root or a foreign package).
func top(path string) string {
	if !strings.HasPrefix(path, module+"/") {
		return ""
	}
	rest := strings.TrimPrefix(path, module+"/")
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[:i]
	}
	return rest
}

func TestDependencyDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var violations []string
	packages := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		packages++
		from := top(fields[0])
		ok, known := allowed[from]
		if !known {
			violations = append(violations, fields[0]+": top-level directory "+from+" has no entry in arch_test.go's allowed table")
			continue
		}
		for _, imp := range fields[1:] {
			to := top(imp)
			if to == "" || to == from {
				continue
			}
			if !slices.Contains(ok, to) {
				violations = append(violations, fields[0]+" imports "+imp)
			}
		}
	}
	if packages < 2 {
		t.Fatalf("go list saw %d packages; the test is not looking at the repository", packages)
	}
	sort.Strings(violations)
	for _, v := range violations {
		t.Error(v)
	}
}

func TestTableCatchesAViolation(t *testing.T) {
	// The table itself must forbid the edges DESIGN.md rules out, or the
	// test above could never fail.
	for _, bad := range [][2]string{
		{"scheduler", "scorers"}, {"scheduler", "fleet"}, {"scorers", "proxy"},
		{"fleet", "detector"}, {"sim", "proxy"}, {"sim", "cmd"}, {"configs", "proxy"},
	} {
		if slices.Contains(allowed[bad[0]], bad[1]) {
			t.Errorf("%s may import %s", bad[0], bad[1])
		}
	}
}
