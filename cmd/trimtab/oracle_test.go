package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/sim"
)

// TestSimOracle runs `trimtab sim oracle` on a tiny suite (one short
// scenario, one seed, budget 3, two calibrations, three policies) and
// checks both files' shape, then `sim oracle doc` on the run against
// itself: the document's section is rewritten, and a second run changes
// nothing.
func TestSimOracle(t *testing.T) {
	out := t.TempDir()
	engines := "a100-40gb-llama-3.1-8b,l4-24gb-llama-3.1-8b"
	log, err := runRoot(t, "sim", "oracle", "--scenario", "small-pool-burst", "--duration", "30s", "--seeds", "1", "--budget", "3",
		"--engines", engines, "--policies", "adaptive,guard-only,llmd-token-load", "--commit", "test", "--parallel", "2", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	// 12 baselines (the budget of 3 is raised to them) + 3 policies per calibration.
	if !strings.Contains(log, "calibration 2/2 l4-24gb-llama-3.1-8b: policy llmd-token-load, step 15/15;") || !strings.Contains(log, "ETA") {
		t.Errorf("progress lines:\n%s", log)
	}
	o, err := sim.ReadOracleFile(filepath.Join(out, "oracle.json"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Commit != "test" || o.Date == "" || o.Command == "" || len(o.Seeds) != 1 || o.Budget != 3 {
		t.Errorf("stamp: %q %q %q seeds %v budget %d", o.Commit, o.Date, o.Command, o.Seeds, o.Budget)
	}
	if len(o.Calibrations) != 2 || o.Calibrations[0].Engine != "a100-40gb-llama-3.1-8b" || o.Calibrations[1].Engine != "l4-24gb-llama-3.1-8b" {
		t.Fatalf("calibrations %+v", o.Calibrations)
	}
	for _, c := range o.Calibrations {
		if len(c.Policies) != 3 || c.Policies[0].Name != "adaptive" || c.Oracle.Ratio != 1 || len(c.Oracle.Weights) != len(o.Scorers) {
			t.Errorf("%s: %d policies, oracle %+v", c.Engine, len(c.Policies), c.Oracle)
		}
		for _, e := range c.Policies {
			if len(e.Cells) != 2 || e.Cells[0].TTFTP99 <= 0 || e.Cells[0].E2EP99 <= 0 || e.Cells[0].TokPerSec <= 0 || e.Ratio <= 0 {
				t.Errorf("%s %s: %+v", c.Engine, e.Name, e)
			}
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "oracle.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| policy | a100-40gb-llama-3.1-8b | l4-24gb-llama-3.1-8b |", "| oracle | 1.000 | 1.000 |", "| guard-only |", "### adaptive against llmd-token-load", "Commit test,"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("oracle.md lacks %q:\n%s", want, md)
		}
	}
	// `sim oracle md` writes the same oracle.md from oracle.json.
	if err := os.Remove(filepath.Join(out, "oracle.md")); err != nil {
		t.Fatal(err)
	}
	if log, err := runRoot(t, "sim", "oracle", "md", out); err != nil || !strings.Contains(log, "wrote") {
		t.Fatalf("sim oracle md: %v\n%s", err, log)
	}
	if again, err := os.ReadFile(filepath.Join(out, "oracle.md")); err != nil || !bytes.Equal(again, md) {
		t.Errorf("sim oracle md wrote another oracle.md (%v):\n%s\n---\n%s", err, again, md)
	}
	if _, err := runRoot(t, "sim", "oracle", "md", filepath.Join(out, "missing")); err == nil {
		t.Error("sim oracle md on a missing run: no error")
	}
	// `sim oracle table` puts the run's row into a document's table.
	tdoc := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(tdoc, []byte("# t\n\n"+sim.OracleTableBegin+"\n"+sim.OracleTableEnd+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if log, err := runRoot(t, "sim", "oracle", "table", "--dir", out, "--doc", tdoc); err != nil {
		t.Fatalf("sim oracle table: %v\n%s", err, log)
	}
	table, _ := os.ReadFile(tdoc)
	if !bytes.Contains(table, []byte("| [a100-40gb-llama-3.1-8b](")) || !bytes.Contains(table, []byte("| [l4-24gb-llama-3.1-8b](")) {
		t.Errorf("table:\n%s", table)
	}
	if _, err := runRoot(t, "sim", "oracle", "table", "--dir", t.TempDir(), "--doc", tdoc); err == nil || !strings.Contains(err.Error(), "no oracle.json") {
		t.Errorf("sim oracle table on an empty directory: %v", err)
	}

	// The held-back check on seed 2: seed 1's oracle vectors and the three
	// policies, one vector and three policies per calibration.
	held := t.TempDir()
	log, err = runRoot(t, "sim", "oracle", "--scenario", "small-pool-burst", "--duration", "30s", "--seed", "2", "--seeds", "1",
		"--engines", engines, "--policies", "adaptive,guard-only,llmd-token-load", "--commit", "test", "--parallel", "2", "--held-back", out, "--out", held)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if !strings.Contains(log, "calibration 2/2 l4-24gb-llama-3.1-8b: policy llmd-token-load, step 4/4;") {
		t.Errorf("held-back progress lines:\n%s", log)
	}
	h, err := sim.ReadOracleFile(filepath.Join(held, "oracle.json"))
	if err != nil {
		t.Fatal(err)
	}
	if h.HeldBack != o.Command || h.Calibrations[1].Vectors != 1 || !slices.Equal(h.Calibrations[1].Oracle.Weights, o.Calibrations[1].Oracle.Weights) {
		t.Errorf("held-back run: held back %q (want %q), %d vectors, oracle %v (want %v)", h.HeldBack, o.Command, h.Calibrations[1].Vectors,
			h.Calibrations[1].Oracle.Weights, o.Calibrations[1].Oracle.Weights)
	}
	// The re-score: the search run's policies again on its calibrations,
	// scenarios, duration and seeds (all taken from its oracle.json),
	// scored as the search scored them.
	re := t.TempDir()
	log, err = runRoot(t, "sim", "oracle", "--commit", "test", "--parallel", "2", "--rescore", out, "--out", re)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	r, err := sim.ReadOracleFile(filepath.Join(re, "oracle.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.RescoreOf != o.Command || !slices.Equal(r.Seeds, o.Seeds) || r.Budget != o.Budget || r.Duration != "30s" || len(r.Calibrations) != 2 || len(r.Calibrations[0].Policies) != 3 {
		t.Errorf("re-score: of %q (want %q), seeds %v (%v), budget %d (%d)", r.RescoreOf, o.Command, r.Seeds, o.Seeds, r.Budget, o.Budget)
	}
	for i, c := range r.Calibrations {
		for j, p := range c.Policies {
			if want := o.Calibrations[i].Policies[j]; p.Score != want.Score {
				t.Errorf("re-scored %s %s: score %v, the search's %v", c.Engine, p.Name, p.Score, want.Score)
			}
		}
	}
	if md, _ := os.ReadFile(filepath.Join(re, "oracle.md")); !bytes.Contains(md, []byte("**A re-score** of the search run")) {
		t.Errorf("re-score oracle.md:\n%s", md)
	}
	for _, bad := range [][]string{
		{"--rescore", out, "--held-back", out},
		{"--rescore", out, "--duration", "20s"},
		{"--rescore", held},
		{"--rescore", filepath.Join(out, "missing")},
	} {
		args := append([]string{"sim", "oracle", "--scenario", "small-pool-burst", "--engines", engines, "--policies", "adaptive", "--out", t.TempDir()}, bad...)
		if !slices.Contains(bad, "--duration") {
			args = append(args, "--duration", "30s")
		}
		if _, err := runRoot(t, args...); err == nil || !strings.Contains(err.Error(), "re-score") && !strings.Contains(err.Error(), "--rescore") {
			t.Errorf("%v: %v, want a re-score error", bad, err)
		}
	}
	if _, err := runRoot(t, "sim", "oracle", "--held-back", filepath.Join(out, "missing"), "--out", t.TempDir()); err == nil || !strings.Contains(err.Error(), "--held-back") {
		t.Errorf("a missing --held-back run: %v", err)
	}
	if _, err := runRoot(t, "sim", "oracle", "--start-from", filepath.Join(out, "missing"), "--out", t.TempDir()); err == nil || !strings.Contains(err.Error(), "--start-from") {
		t.Errorf("a missing --start-from run: %v", err)
	}
	if _, err := runRoot(t, "sim", "oracle", "--held-back", out, "--start-from", out, "--out", t.TempDir()); err == nil || !strings.Contains(err.Error(), "--start-from: a held-back check") {
		t.Errorf("--held-back with --start-from: %v", err)
	}

	doc := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(doc, []byte("# B\n\n"+sim.OracleDocBegin+"\nold\n"+sim.OracleDocEnd+"\n\n## Method\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"sim", "oracle", "doc", "--oracle", out, "--check", filepath.Join(held, "oracle.json"), "--doc", doc}
	if log, err := runRoot(t, args...); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	first, _ := os.ReadFile(doc)
	if bytes.Contains(first, []byte("\nold\n")) || !bytes.Contains(first, []byte("| adaptive |")) || !bytes.Contains(first, []byte("**The check is held back**")) || !bytes.HasSuffix(first, []byte(sim.OracleDocEnd+"\n\n## Method\n")) {
		t.Errorf("document after doc:\n%s", first)
	}
	if log, err := runRoot(t, args...); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if second, _ := os.ReadFile(doc); !bytes.Equal(first, second) {
		t.Errorf("a second doc run changed the document:\n%s\n---\n%s", first, second)
	}
	if _, err := runRoot(t, "sim", "oracle", "doc", "--oracle", out, "--doc", doc); err == nil || !strings.Contains(err.Error(), "--check") {
		t.Errorf("missing --check: %v", err)
	}
}

// TestResultsOracleMarkdownMatchesJSON: every oracle run committed under
// docs/results has the oracle.md its oracle.json renders (regenerate with
// trimtab sim oracle md DIR).
func TestResultsOracleMarkdownMatchesJSON(t *testing.T) {
	var runs []string
	err := filepath.WalkDir("../../docs/results", func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "oracle.json" {
			runs = append(runs, filepath.Dir(p))
		}
		return err
	})
	if err != nil || len(runs) < 2 {
		t.Fatalf("oracle runs under docs/results: %v (%v)", runs, err)
	}
	for _, dir := range runs {
		o, err := sim.ReadOracleFile(filepath.Join(dir, "oracle.json"))
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if err := o.WriteMarkdown(&want); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, "oracle.md"))
		if err != nil || !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s/oracle.md is not what its oracle.json renders (%v); run: go run ./cmd/trimtab sim oracle md %s", dir, err, strings.TrimPrefix(dir, "../../"))
		}
	}
}

// TestBenchmarksDocMatchesOracleTable: docs/benchmarks.md's table of
// runs at each scenario's own length is what `trimtab sim oracle table`
// renders from docs/results/oracle-full-length.
func TestBenchmarksDocMatchesOracleTable(t *testing.T) {
	t.Chdir("../..")
	const dir, doc = "docs/results/oracle-full-length", "docs/benchmarks.md"
	section, err := renderOracleTable(dir, doc)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sim.ReplaceOracleTable(old, section)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(old, want) {
		t.Errorf("%s's oracle table differs from what %s renders; run: go run ./cmd/trimtab sim oracle table --dir %s --doc %s", doc, dir, dir, doc)
	}
}

// TestBenchmarksDocOracleMarkers: docs/benchmarks.md carries exactly one
// oracle section for `trimtab sim oracle doc` to rewrite.
func TestBenchmarksDocOracleMarkers(t *testing.T) {
	doc, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.ReplaceOracleDoc(doc, sim.OracleDocBegin+"\n"+sim.OracleDocEnd); err != nil {
		t.Error(err)
	}
}

// TestBenchmarksDocMatchesResults: docs/benchmarks.md's oracle section is
// what `trimtab sim oracle doc` renders from the results committed under
// docs/results, so no number in it can drift from them (regenerate with
// the command the section names).
func TestBenchmarksDocMatchesResults(t *testing.T) {
	read := func(dir string) *sim.OracleFile {
		o, err := sim.ReadOracleFile(filepath.Join("../../docs/results", dir, "oracle.json"))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	doc, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	const command = "trimtab sim oracle doc --oracle docs/results/oracle-seeds-1-3 --check docs/results/oracle-seeds-4-6 --doc docs/benchmarks.md"
	want, err := sim.ReplaceOracleDoc(doc, sim.RenderOracleDoc(read("oracle-seeds-1-3"), read("oracle-seeds-4-6"), command))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, want) {
		t.Errorf("docs/benchmarks.md's oracle section differs from what docs/results renders; run: go run ./cmd/trimtab %s", strings.TrimPrefix(command, "trimtab "))
	}
}
