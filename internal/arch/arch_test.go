package arch

import (
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/trimtab/trimtab"

// allowed lists, for each top-level package directory (and each
// sub-package with a row of its own), the trimtab directories its non-test
// code imports. Anything absent is forbidden and anything listed must be
// used. The graph, as docs/design.md rule 1 and docs/architecture.md state it:
//
//   - leaves: scheduler, proxy/settings (the server: section's types),
//     telemetry (the OpenTelemetry provider), deploy (manifests and
//     their tests) and internal/jsonscan (the validating JSON scanner);
//   - scorers/internal (the scorers' shared LRU list, neutral-score
//     counter and test kit) → scheduler; scorers/prefix (the prefix
//     scorer and its index) → scheduler, scorers/internal; scorers →
//     scheduler, scorers/prefix, scorers/internal. Sub-packages never
//     import scorers, so InTree builds every scorer, the prefix one too;
//   - fleet, detector, configurator, flow (flow control) → scheduler;
//   - proxy/parse (request bodies, one type per API dialect) →
//     scheduler, internal/jsonscan;
//   - proxy → scheduler, proxy/settings, proxy/parse, internal/jsonscan,
//     flow;
//   - control → scheduler, detector, configurator;
//   - replica/peerload (router-local loads exchanged between replicas) →
//     scheduler; replica (sync between router replicas) → scheduler,
//     scorers/prefix, replica/peerload, fleet (peer discovery through
//     fleet's pod informers);
//   - configs → the packages whose Config types it embeds (scheduler,
//     scorers, scorers/prefix, fleet, control, proxy/settings, replica,
//     flow);
//   - sim/engine (the engine model) is a leaf; sim/scenario (the scenario
//     schema, workloads and renderer) → scheduler, sim/engine;
//   - sim/report (summaries, statistics, comparisons) → sim/scenario;
//   - sim → scheduler, scorers, scorers/prefix, fleet, configurator,
//     control, configs, flow, and replica/peerload (the load hooks its
//     routers share, without replica's network): the packages above
//     except proxy and replica; and sim/engine, sim/scenario, sim/report;
//   - internal (status page, dashboards, load generator) → scheduler;
//   - bench (the real-time bench machinery) → sim, sim/scenario,
//     sim/report, configs, internal;
//   - cmd → anything; nothing imports cmd or proxy.
var allowed = map[string][]string{
	"scheduler":      {},
	"proxy/settings": {},
	"deploy":         {},
	"telemetry":      {},
	"scorers":        {"scheduler", "scorers/prefix", "scorers/internal"},
	"fleet":          {"scheduler"},
	"detector":       {"scheduler"},
	"configurator":   {"scheduler"},
	"flow":           {"scheduler"},
	"proxy":          {"scheduler", "proxy/settings", "proxy/parse", "internal/jsonscan", "flow"},
	"control":        {"scheduler", "detector", "configurator"},
	"replica":        {"scheduler", "scorers/prefix", "replica/peerload", "fleet"},
	"configs":        {"scheduler", "scorers", "scorers/prefix", "fleet", "control", "proxy/settings", "replica", "flow"},
	"sim":            {"scheduler", "scorers", "scorers/prefix", "fleet", "configurator", "control", "configs", "flow", "replica/peerload", "sim/engine", "sim/scenario", "sim/report"},
	"internal":       {"scheduler"},
	"bench":          {"sim", "sim/scenario", "sim/report", "configs", "internal"},
	"cmd":            {"scheduler", "scorers", "fleet", "detector", "control", "configs", "proxy", "replica", "sim", "sim/scenario", "sim/report", "bench", "internal", "telemetry", "flow"},

	// Sub-packages with rows of their own: none imports its parent.
	"scorers/prefix":    {"scheduler", "scorers/internal"},
	"scorers/internal":  {"scheduler"},
	"replica/peerload":  {"scheduler"},
	"internal/jsonscan": {},
	"proxy/parse":       {"scheduler", "internal/jsonscan"},
	"sim/engine":        {},
	"sim/scenario":      {"scheduler", "sim/engine"},
	"sim/report":        {"sim/scenario"},
}

// top returns the row of allowed a trimtab import path belongs to: the
// longest row that is the path or a directory above it, else its
// top-level directory ("" for the module root or a foreign package).
func top(path string) string {
	if !strings.HasPrefix(path, module+"/") {
		return ""
	}
	rest := strings.TrimPrefix(path, module+"/")
	best := ""
	for row := range allowed {
		if (rest == row || strings.HasPrefix(rest, row+"/")) && len(row) > len(best) {
			best = row
		}
	}
	if best != "" {
		return best
	}
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
	used := map[[2]string]bool{}
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
			used[[2]string{from, to}] = true
		}
	}
	if packages < 2 {
		t.Fatalf("go list saw %d packages; the test is not looking at the repository", packages)
	}
	for from, tos := range allowed {
		for _, to := range tos {
			if !used[[2]string{from, to}] {
				violations = append(violations, "allowed table: "+from+" → "+to+" is unused; remove it")
			}
		}
	}
	sort.Strings(violations)
	for _, v := range violations {
		t.Error(v)
	}
}

func TestTableCatchesAViolation(t *testing.T) {
	// The table itself must forbid the edges docs/design.md rules out, or the
	// test above could never fail.
	for _, bad := range [][2]string{
		{"scheduler", "scorers"}, {"scheduler", "fleet"}, {"scorers", "proxy"},
		{"fleet", "detector"}, {"sim", "proxy"}, {"sim", "cmd"}, {"configs", "proxy"},
		{"detector", "configurator"}, {"configurator", "detector"}, {"control", "fleet"},
		{"proxy/settings", "scheduler"}, {"configs", "cmd"},
		{"replica", "proxy"}, {"scheduler", "replica"}, {"scorers", "replica"}, {"sim", "replica"},
		{"scheduler", "flow"}, {"flow", "proxy"}, {"flow", "scorers"}, {"flow", "sim"},
		{"scorers/prefix", "scorers"}, {"scorers/internal", "scorers"}, {"scorers/internal", "scorers/prefix"},
		{"scorers", "replica/peerload"}, {"scorers/prefix", "replica/peerload"}, {"replica/peerload", "replica"},
		{"replica/peerload", "scorers"},
		{"proxy/parse", "proxy"}, {"internal/jsonscan", "internal"},
		{"sim/scenario", "sim"}, {"sim/engine", "sim"}, {"sim/engine", "sim/scenario"}, {"sim/report", "sim"},
	} {
		if slices.Contains(allowed[bad[0]], bad[1]) {
			t.Errorf("%s may import %s", bad[0], bad[1])
		}
	}
}

// TestNoArrowBackUp: a row below another (scorers/prefix below scorers)
// never imports a row above it. Parents import their sub-packages, so an
// arrow back up would be one room split in two with arrows both ways.
func TestNoArrowBackUp(t *testing.T) {
	for child, tos := range allowed {
		for _, to := range tos {
			if strings.HasPrefix(child, to+"/") {
				t.Errorf("%s may import %s, above it", child, to)
			}
		}
	}
}
