package sim

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Cell comparison thresholds: a cell is worse for adaptive when it is
// worse than the other policy by more than OracleWorseTol on one metric,
// better when it is better by at least OracleBetterBy on one and worse by
// more than OracleWorseTol on none.
const (
	OracleWorseTol = 0.02
	OracleBetterBy = 0.10
)

// OracleVectorTol is the bound against a calibration's own oracle vector
// (the acceptance bound for one profile across fleets): adaptive is worse
// than the vector in a cell when it is worse by more than this on TTFT
// p99, E2E p99 or tok/s; goodput is shown but not judged.
const OracleVectorTol = 0.05

// PolicyOracle names the oracle's vector in comparisons.
const PolicyOracle = "oracle"

// fieldPolicies are the built-in policies that stand for the field
// (docs/field-policies.md and the historical defaults), as opposed to
// trimtab's own profiles.
var fieldPolicies = []string{PolicyRoundRobin, PolicyLeastQueue, PolicyPrefixOnly, PolicyStatic322, PolicySGLang,
	PolicyLLMDTokenLoad, PolicySMGLeastLoad, PolicyDynamoKVCost}

// CellDelta is adaptive against another policy on one cell: each metric
// is adaptive ÷ other − 1 (NaN where neither has a value, +Inf where only
// adaptive has one).
type CellDelta struct {
	Cell                        Cell
	TTFT, E2E, TokPerSec, Goodp float64
	// Misses are adaptive's and the other's.
	Misses, OtherMisses float64
	Worse, Better       bool
	// tol is the bound Worse was judged at, and goodput whether goodput
	// was judged.
	tol     float64
	goodput bool
}

// CellComparison is adaptive against Against on every cell of one
// calibration.
type CellComparison struct {
	Against       string
	Cells         []CellDelta
	Worse, Better int
}

func rel(a, b float64) float64 {
	switch {
	case b > 0:
		return a/b - 1
	case a > 0:
		return math.Inf(1)
	}
	return math.NaN()
}

// CompareCells compares a (adaptive) with b cell by cell: worse when TTFT
// p99 or E2E p99 is higher, or tok/s or goodput lower, by more than
// OracleWorseTol; better when one of them is better by OracleBetterBy or
// more and none is worse.
func CompareCells(cells []Cell, a, b OracleEntry) CellComparison {
	return compareCells(cells, a, b, OracleWorseTol, true)
}

// CompareToOracle compares a (adaptive) with a calibration's oracle vector
// cell by cell, as CompareCells does but at OracleVectorTol and on TTFT
// p99, E2E p99 and tok/s only.
func CompareToOracle(cells []Cell, a, oracle OracleEntry) CellComparison {
	cc := compareCells(cells, a, oracle, OracleVectorTol, false)
	cc.Against = PolicyOracle
	return cc
}

func compareCells(cells []Cell, a, b OracleEntry, tol float64, goodput bool) CellComparison {
	cc := CellComparison{Against: b.Name}
	for i, c := range cells {
		x, y := a.Cells[i], b.Cells[i]
		d := CellDelta{Cell: c, TTFT: rel(x.TTFTP99, y.TTFTP99), E2E: rel(x.E2EP99, y.E2EP99),
			TokPerSec: rel(x.TokPerSec, y.TokPerSec), Goodp: rel(x.Goodput, y.Goodput), Misses: x.Misses, OtherMisses: y.Misses,
			tol: tol, goodput: goodput}
		// NaN compares false both ways: a metric with no value decides nothing.
		d.Worse = d.TTFT > tol || d.E2E > tol || d.TokPerSec < -tol || goodput && d.Goodp < -tol
		// Better needs goodput no worse even where it is not judged.
		d.Better = !d.Worse && !(d.Goodp < -tol) && (d.TTFT <= -OracleBetterBy || d.E2E <= -OracleBetterBy || d.TokPerSec >= OracleBetterBy || goodput && d.Goodp >= OracleBetterBy)
		if d.Worse {
			cc.Worse++
		}
		if d.Better {
			cc.Better++
		}
		cc.Cells = append(cc.Cells, d)
	}
	return cc
}

// loss is how much worse a cell is for adaptive, for ordering.
func (d CellDelta) loss() float64 {
	l := 0.0
	for _, v := range []float64{d.TTFT, d.E2E, -d.TokPerSec, -d.Goodp} {
		if !math.IsNaN(v) {
			l = max(l, v)
		}
	}
	return l
}

// worseText names the metrics on which d is worse, with their deltas.
func (d CellDelta) worseText() string {
	var parts []string
	add := func(name string, v float64, bad bool) {
		if bad {
			parts = append(parts, name+" "+pct(v))
		}
	}
	add("TTFT p99", d.TTFT, d.TTFT > d.tol)
	add("E2E p99", d.E2E, d.E2E > d.tol)
	add("tok/s", d.TokPerSec, d.TokPerSec < -d.tol)
	add("goodput", d.Goodp, d.goodput && d.Goodp < -d.tol)
	return strings.Join(parts, ", ")
}

func pct(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.IsInf(v, 1):
		return "+∞"
	}
	return fmt.Sprintf("%+.1f %%", 100*v)
}

// entry returns calibration c's entry for policy name ("oracle" for the
// oracle).
func (c *OracleCalibration) entry(name string) (OracleEntry, bool) {
	if name == PolicyOracle {
		return c.Oracle, len(c.Oracle.Cells) == len(c.Cells)
	}
	i := slices.IndexFunc(c.Policies, func(e OracleEntry) bool { return e.Name == name })
	if i < 0 {
		return OracleEntry{}, false
	}
	return c.Policies[i], true
}

// Comparisons returns adaptive against the oracle's vector
// (CompareToOracle) and every other policy of c (CompareCells):
// guard-only, adaptive-off and tuned-static first, then the rest in c's
// order. None when c has no adaptive.
func (c *OracleCalibration) Comparisons() []CellComparison {
	if _, ok := c.entry(PolicyAdaptive); !ok {
		return nil
	}
	var out []CellComparison
	for _, n := range comparisonOrder(c.Policies) {
		if cc, ok := c.compare(n, 0, len(c.Cells)); ok {
			out = append(out, cc)
		}
	}
	return out
}

// compare returns adaptive against policy n (PolicyOracle: the oracle's
// vector) on cells [i, j); ok is false when either is missing.
func (c *OracleCalibration) compare(n string, i, j int) (CellComparison, bool) {
	a, okA := c.entry(PolicyAdaptive)
	b, okB := c.entry(n)
	if !okA || !okB {
		return CellComparison{}, false
	}
	a.Cells, b.Cells = a.Cells[i:j], b.Cells[i:j]
	if n == PolicyOracle {
		return CompareToOracle(c.Cells[i:j], a, b), true
	}
	return CompareCells(c.Cells[i:j], a, b), true
}

// label names policy n in a comparison's heading.
func label(n string) string {
	if n == PolicyOracle {
		return "the oracle's vector"
	}
	return n
}

// tolFor is the bound a comparison with policy n judges at.
func tolFor(n string) float64 {
	if n == PolicyOracle {
		return OracleVectorTol
	}
	return OracleWorseTol
}

func comparisonOrder(pols []OracleEntry) []string {
	names := []string{PolicyOracle}
	for _, n := range []string{PolicyGuardOnly, PolicyAdaptiveOff, PolicyTunedStatic} {
		if slices.ContainsFunc(pols, func(e OracleEntry) bool { return e.Name == n }) {
			names = append(names, n)
		}
	}
	for _, e := range pols {
		if e.Name != PolicyAdaptive && !slices.Contains(names, e.Name) {
			names = append(names, e.Name)
		}
	}
	return names
}

func (o *OracleFile) seedRange() string {
	if len(o.Seeds) == 0 {
		return "none"
	}
	if len(o.Seeds) == 1 {
		return fmt.Sprintf("seed %d", o.Seeds[0])
	}
	return fmt.Sprintf("seeds %d–%d", o.Seeds[0], o.Seeds[len(o.Seeds)-1])
}

func (o *OracleFile) weights(w []float64) string {
	parts := make([]string, 0, len(w))
	for i, v := range w {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s %s", o.Scorers[i], fmtWeight(v)))
		}
	}
	return strings.Join(parts, " : ")
}

func (o *OracleFile) method() string {
	g := o.Guard
	guard := "no guard"
	if g.Factor > 0 {
		guard = fmt.Sprintf("the profile's `scheduler.guard` (factor %s, slack %s, crowd factor %s, crowd slack %s)",
			fmtWeight(g.Factor), fmtWeight(g.Slack), fmtWeight(g.CrowdFactor), fmtWeight(g.CrowdSlack))
		if g.WaitFactor > 0 {
			guard += fmt.Sprintf(" and its wait bound (wait factor %s, wait slack %s s", fmtWeight(g.WaitFactor), fmtWeight(g.WaitSlack))
			if g.JoinFactor > 0 {
				guard += fmt.Sprintf(", join factor %s", fmtWeight(g.JoinFactor))
			}
			guard += ")"
		}
	}
	starts := "the baselines"
	if n := len(o.StartedFrom); n > 0 {
		starts = fmt.Sprintf("the baselines and the oracles of %d earlier run%s on the same calibration, where %s one", n, map[bool]string{true: "s"}[n > 1], map[bool]string{true: "they have", false: "it has"}[n > 1])
	}
	return fmt.Sprintf("**The oracle** of a calibration is the best single static weight vector for it over %s, "+
		"every vector run with %s and the loop off: `trimtab sim tune`'s search (%s, then a coordinate search) "+
		"with a budget of %d vectors, on that calibration alone. **Score** (the tune objective): for each cell (scenario × level) "+
		"the ratios best TTFT p99 ÷ this TTFT p99 and this tok/s ÷ best tok/s, where the per-cell best is taken over every vector "+
		"the search evaluated and every policy of the table on that calibration; score = (worst ratio + mean ratio) / 2. "+
		"Each entry is a policy's score ÷ the oracle's (1 = as good as the fleet's best static vector; above 1, better). "+
		"TTFT and E2E percentiles count failed and timed-out requests at the timeout.",
		strings.Join(o.Scorers, ", "), guard, starts, o.Budget)
}

// WriteMarkdown writes oracle.md: the score-ratio table, the oracles, and
// adaptive against every other policy cell by cell.
func (o *OracleFile) WriteMarkdown(w io.Writer) error {
	var b bytes.Buffer
	pr := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	pr("# trimtab sim oracle\n\n`%s`\n\nCommit %s, %s. %s; scenarios %s.\n\n", o.Command, o.Commit, o.Date,
		strings.ToUpper(o.seedRange()[:1])+o.seedRange()[1:], strings.Join(o.Scenarios, ", "))
	if o.RescoreOf != "" {
		pr("**A re-score** of the search run `%s`: each calibration's oracle vector and the policies ran again on its seeds, and the per-cell bests include those of the vectors it searched (stored in its oracle.json), so every score reads as in that run.\n\n", o.RescoreOf)
	}
	pr("%s\n\n## Score ÷ the oracle's score, per calibration\n\n", o.method())
	o.ratioTable(&b, nil)
	pr("\n## The oracles\n\n| calibration | weights | score | worst | mean | vectors |\n|---|---|---:|---:|---:|---:|\n")
	for _, c := range o.Calibrations {
		pr("| %s | %s | %.3f | %.3f | %.3f | %d |\n", c.Engine, o.weights(c.Oracle.Weights), c.Oracle.Score, c.Oracle.Worst, c.Oracle.Mean, c.Vectors)
	}
	pr("\n## Adaptive cell by cell\n\nA cell is **worse** when adaptive is worse than the other policy by more than %.0f %% on TTFT p99, E2E p99, tok/s or goodput — against the oracle's own vector, by more than %.0f %% on TTFT p99, E2E p99 or tok/s; **better** when it is better by %.0f %% or more on one of them and worse on none. Each entry: worse / better / cells.\n\n",
		100*OracleWorseTol, 100*OracleVectorTol, 100*OracleBetterBy)
	o.countTable(&b)
	for _, n := range o.comparisonNames() {
		pr("\n### adaptive against %s\n\n| calibration | scenario | level | TTFT p99 | E2E p99 | tok/s | goodput | misses (adaptive / %s) | cell |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n", label(n), n)
		rows := 0
		for _, c := range o.Calibrations {
			for _, cc := range c.Comparisons() {
				if cc.Against != n {
					continue
				}
				for _, d := range cc.Cells {
					verdict := "worse"
					switch {
					case d.Better:
						verdict = "better"
					case !d.Worse:
						continue
					}
					rows++
					pr("| %s | %s | %s | %s | %s | %s | %s | %.1f / %.1f | %s |\n", c.Engine, d.Cell.Scenario, fmtWeight(d.Cell.Level),
						pct(d.TTFT), pct(d.E2E), pct(d.TokPerSec), pct(d.Goodp), d.Misses, d.OtherMisses, verdict)
				}
			}
		}
		if rows == 0 {
			pr("| – | no cell worse by more than %.0f %% or better by %.0f %% | | | | | | | |\n", 100*tolFor(n), 100*OracleBetterBy)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// policyNames lists every policy of o in first-seen order, the oracle
// first.
func (o *OracleFile) policyNames() []string {
	names := []string{PolicyOracle}
	for _, c := range o.Calibrations {
		for _, e := range c.Policies {
			if !slices.Contains(names, e.Name) {
				names = append(names, e.Name)
			}
		}
	}
	return names
}

func (o *OracleFile) comparisonNames() []string {
	var all []OracleEntry
	for _, c := range o.Calibrations {
		all = append(all, c.Policies...)
	}
	if !slices.ContainsFunc(all, func(e OracleEntry) bool { return e.Name == PolicyAdaptive }) {
		return nil
	}
	return comparisonOrder(all)
}

func (o *OracleFile) calibration(engine string) *OracleCalibration {
	for i := range o.Calibrations {
		if o.Calibrations[i].Engine == engine {
			return &o.Calibrations[i]
		}
	}
	return nil
}

// ratioTable writes the policy × calibration table of score ÷ oracle;
// with check, each entry is followed by check's in parentheses.
func (o *OracleFile) ratioTable(b *bytes.Buffer, check *OracleFile) {
	fmt.Fprint(b, "| policy |")
	for _, c := range o.Calibrations {
		fmt.Fprintf(b, " %s |", c.Engine)
	}
	fmt.Fprint(b, "\n|---|")
	for range o.Calibrations {
		fmt.Fprint(b, "---:|")
	}
	fmt.Fprintln(b)
	for _, n := range o.policyNames() {
		fmt.Fprintf(b, "| %s |", n)
		for _, c := range o.Calibrations {
			e, ok := c.entry(n)
			cell := "–"
			if ok {
				cell = fmt.Sprintf("%.3f", e.Ratio)
			}
			if check != nil {
				cell += " (" + check.ratio(c.Engine, n) + ")"
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		fmt.Fprintln(b)
	}
}

func (o *OracleFile) ratio(engine, name string) string {
	if c := o.calibration(engine); c != nil {
		if e, ok := c.entry(name); ok {
			return fmt.Sprintf("%.3f", e.Ratio)
		}
	}
	return "–"
}

func (o *OracleFile) countTable(b *bytes.Buffer) {
	fmt.Fprint(b, "| adaptive against |")
	for _, c := range o.Calibrations {
		fmt.Fprintf(b, " %s |", c.Engine)
	}
	fmt.Fprint(b, "\n|---|")
	for range o.Calibrations {
		fmt.Fprint(b, "---:|")
	}
	fmt.Fprintln(b)
	for _, n := range o.comparisonNames() {
		fmt.Fprintf(b, "| %s |", label(n))
		for _, c := range o.Calibrations {
			cell := "–"
			for _, cc := range c.Comparisons() {
				if cc.Against == n {
					cell = fmt.Sprintf("%d / %d / %d", cc.Worse, cc.Better, len(cc.Cells))
				}
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		fmt.Fprintln(b)
	}
}
