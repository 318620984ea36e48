package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/report"
)

// The metrics a paired comparison judges, indexes of PairedRow.Metrics.
const (
	MetricTTFT = iota // TTFT p99, lower is better
	MetricE2E         // E2E p99, lower is better
	MetricTok         // output tokens/s, higher is better
	numMetrics
)

// PairedMetric is one metric of A against B over the repeats both ran.
type PairedMetric struct {
	// Median is the median over the pairs of A_r ÷ B_r − 1 (NaN with no
	// pair that has both values).
	Median float64
	// AWon and BWon count the pairs each side was better in (ties count
	// for neither); N the pairs with both values.
	AWon, BWon, N int
	// higher: higher is better (tok/s).
	higher bool
}

// bad returns m's median oriented so that positive means A is worse.
func (m PairedMetric) bad() float64 {
	if m.higher {
		return -m.Median
	}
	return m.Median
}

// worse: B won most pairs and the median paired difference is worse than
// tol.
func (m PairedMetric) worse(tol float64) bool { return 2*m.BWon > m.N && m.bad() > tol }

// won: A won most pairs and the median paired difference is better than
// by (by > 0).
func (m PairedMetric) won(by float64) bool { return by > 0 && 2*m.AWon > m.N && -m.bad() >= by }

// noise: the median paired difference is beyond tol either way but most
// pairs do not back it (worseOnly: only in A's disfavour).
func (m PairedMetric) noise(tol float64, worseOnly bool) bool {
	switch {
	case m.bad() > tol:
		return 2*m.BWon <= m.N
	case !worseOnly && -m.bad() > tol:
		return 2*m.AWon <= m.N
	}
	return false
}

// PairedRow is policy A against B at one (scenario, level), repeat by
// repeat: repeat r of A against repeat r of B, which ran the same
// workload seed.
type PairedRow struct {
	Scenario string
	Level    float64
	// Pairs counts the repeats both policies ran.
	Pairs   int
	Metrics [numMetrics]PairedMetric
	// MissesA and MissesB are each side's missed requests (failed or
	// timed out, counted in its percentiles at the timeout) over the
	// paired repeats, of MeasuredA and MeasuredB measured requests.
	MissesA, MissesB, MeasuredA, MeasuredB int
	// CalmEntries, Freezes and MaxOnset are A's control-loop record
	// (report.CompareRow).
	CalmEntries, Freezes int
	MaxOnset             float64
}

// Worse reports whether A is worse than B by more than tol on TTFT p99,
// E2E p99 or tok/s: B won most repeats on it and the median paired
// difference exceeds tol. One bad repeat on either side decides nothing.
func (r PairedRow) Worse(tol float64) bool {
	for _, m := range r.Metrics {
		if m.worse(tol) {
			return true
		}
	}
	return false
}

// PairedComparison is A against B over every (scenario, level) both ran.
type PairedComparison struct {
	A, B string
	Rows []PairedRow
}

// ComparePaired pairs the runs of policies a and b (summary.json's
// entries) by scenario, level and seed — bench's repeat k runs every
// policy with seed Seed+k — and compares each pair. Rows are in
// report.Compare's order.
func ComparePaired(runs []report.RunSummary, a, b string) PairedComparison {
	type key struct {
		sc   string
		l    float64
		seed uint64
	}
	bs := map[key][]*report.RunSummary{}
	for i := range runs {
		if r := &runs[i]; r.Policy == b {
			k := key{r.Scenario, r.Level, r.Seed}
			bs[k] = append(bs[k], r)
		}
	}
	metric := func(s *report.RunSummary, m int) float64 {
		switch m {
		case MetricTTFT:
			return val(s.TTFTP99)
		case MetricE2E:
			return val(s.E2EP99)
		}
		return s.OutputTokensPerSec
	}
	c := PairedComparison{A: a, B: b}
	for _, base := range report.Compare(runs, a, b, report.Median).Rows {
		row := PairedRow{Scenario: base.Scenario, Level: base.Level, CalmEntries: base.CalmEntries, Freezes: base.Freezes, MaxOnset: base.MaxOnset}
		var diffs [numMetrics][]float64
		row.Metrics[MetricTok].higher = true
		used := map[key]int{}
		for i := range runs {
			ra := &runs[i]
			if ra.Policy != a || ra.Scenario != base.Scenario || ra.Level != base.Level {
				continue
			}
			k := key{ra.Scenario, ra.Level, ra.Seed}
			if used[k] >= len(bs[k]) {
				continue
			}
			rb := bs[k][used[k]]
			used[k]++
			row.Pairs++
			row.MissesA, row.MissesB = row.MissesA+ra.Misses, row.MissesB+rb.Misses
			row.MeasuredA, row.MeasuredB = row.MeasuredA+ra.Measured, row.MeasuredB+rb.Measured
			for m := range numMetrics {
				x, y := metric(ra, m), metric(rb, m)
				if math.IsNaN(x) || math.IsNaN(y) || y == 0 {
					continue
				}
				pm := &row.Metrics[m]
				pm.N++
				diffs[m] = append(diffs[m], x/y-1)
				switch better := (x < y) != pm.higher; {
				case x == y:
				case better:
					pm.AWon++
				default:
					pm.BWon++
				}
			}
		}
		if row.Pairs == 0 {
			continue
		}
		for m := range numMetrics {
			row.Metrics[m].Median = report.MedianOf(diffs[m])
		}
		c.Rows = append(c.Rows, row)
	}
	return c
}

// Worse returns the rows where A is worse than B by more than tol.
func (c PairedComparison) Worse(tol float64) []PairedRow {
	var out []PairedRow
	for _, r := range c.Rows {
		if r.Worse(tol) {
			out = append(out, r)
		}
	}
	return out
}

// Wins returns the scenarios where, at some level, A won most repeats on
// TTFT p99 with a median paired gain of at least ttft, or on tok/s with
// at least tok (0 disables that test).
func (c PairedComparison) Wins(ttft, tok float64) []string {
	var out []string
	for _, r := range c.Rows {
		if (r.Metrics[MetricTTFT].won(ttft) || r.Metrics[MetricTok].won(tok)) && !slices.Contains(out, r.Scenario) {
			out = append(out, r.Scenario)
		}
	}
	return out
}

// Loop sums A's calm-phase entries and freezes over every row.
func (c PairedComparison) Loop() (calmEntries, freezes int) {
	for _, r := range c.Rows {
		calmEntries += r.CalmEntries
		freezes += r.Freezes
	}
	return
}

// WriteMarkdown writes the comparison as a table: per metric the median
// paired difference and the repeats each side won (A–B), and each side's
// missed requests over the pairs; rows worse than tol marked ⚠, a
// difference beyond tol that most repeats do not back ≈.
func (c PairedComparison) WriteMarkdown(w io.Writer, tol float64) error {
	cell := func(m PairedMetric) string {
		if math.IsNaN(m.Median) {
			return "–"
		}
		s := fmt.Sprintf("%+.1f %% (%d–%d)", 100*m.Median, m.AWon, m.BWon)
		if m.noise(tol, false) {
			s += " ≈"
		}
		return s
	}
	var b strings.Builder
	b.WriteString("| scenario | level | repeats | TTFT p99 | E2E p99 | tok/s | missed A / B | calm entries | freezes | max onset ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range c.Rows {
		mark := ""
		if r.Worse(tol) {
			mark = " ⚠"
		}
		fmt.Fprintf(&b, "| %s%s | %g | %d | %s | %s | %s | %d of %d / %d of %d | %d | %d | %.2f |\n", r.Scenario, mark, r.Level, r.Pairs,
			cell(r.Metrics[MetricTTFT]), cell(r.Metrics[MetricE2E]), cell(r.Metrics[MetricTok]),
			r.MissesA, r.MeasuredA, r.MissesB, r.MeasuredB, r.CalmEntries, r.Freezes, r.MaxOnset)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteComparisons writes path (compare.md) when runs hold adaptive beside
// any of its fair baselines (sim.FairBaselines), compared repeat by
// repeat (ComparePaired), and returns one verdict line per baseline
// compared; nothing is written when there is none.
func WriteComparisons(path, command string, runs []report.RunSummary) ([]string, error) {
	var body strings.Builder
	var lines []string
	for _, p := range sim.FairBaselines() {
		c := ComparePaired(runs, sim.PolicyAdaptive, p.Policy)
		if len(c.Rows) == 0 {
			continue
		}
		worse, wins := c.Worse(p.Tol), c.Wins(p.TTFTWin, p.TokWin)
		calm, fz := c.Loop()
		fmt.Fprintf(&body, "## %s\n\nRepeat by repeat: repeat r of adaptive against repeat r of %s (the same workload seed). "+
			"Each cell is the median over the repeats of A ÷ B − 1 and, in brackets, how many repeats each side won (A–B). "+
			"⚠ marks a row where %s won most repeats on TTFT p99, E2E p99 or tok/s and the median difference is worse than %.0f %%; "+
			"≈ marks a median beyond %.0f %% that most repeats do not back, counted neither as worse nor as a win. "+
			"The percentiles count every missed request (failed or timed out) at the client timeout; \"missed\" sums each side's over the paired repeats, of its measured requests.\n\n",
			p.Heading, p.Policy, p.Policy, 100*p.Tol, 100*p.Tol)
		if err := c.WriteMarkdown(&body, p.Tol); err != nil {
			return nil, err
		}
		line := fmt.Sprintf("adaptive vs %s: %d of %d rows worse by > %.0f %% in most repeats%s; wins in %d scenarios%s; calm-phase entries %d, watchdog freezes %d",
			p.Policy, len(worse), len(c.Rows), 100*p.Tol, rowMetrics(worse, func(_ int, m PairedMetric) bool { return m.worse(p.Tol) }),
			len(wins), c.winMetrics(p.TTFTWin, p.TokWin), calm, fz)
		fmt.Fprintf(&body, "%s.\n\n", line)
		lines = append(lines, line)
	}
	if body.Len() == 0 {
		return nil, nil
	}
	return lines, report.WriteFile(path, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "# Adaptive against its fair baselines\n\n`%s`\n\n%s", command, body.String())
		return err
	})
}

// metricNames names PairedRow.Metrics in verdicts.
var metricNames = [numMetrics]string{MetricTTFT: "TTFT p99", MetricE2E: "E2E p99", MetricTok: "tok/s"}

// rowMetrics lists, for a verdict, each row with the metrics pick selects
// (" (s@32: TTFT p99, tok/s; …)"), or "" for no row.
func rowMetrics(rows []PairedRow, pick func(metric int, m PairedMetric) bool) string {
	var parts []string
	for _, r := range rows {
		var names []string
		for i, m := range r.Metrics {
			if pick(i, m) {
				names = append(names, metricNames[i])
			}
		}
		parts = append(parts, fmt.Sprintf("%s@%g: %s", r.Scenario, r.Level, strings.Join(names, ", ")))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// winMetrics names the rows and metrics Wins counts (TTFT p99 by ttft,
// tok/s by tok), or "" for none.
func (c PairedComparison) winMetrics(ttft, tok float64) string {
	var rows []PairedRow
	for _, r := range c.Rows {
		if r.Metrics[MetricTTFT].won(ttft) || r.Metrics[MetricTok].won(tok) {
			rows = append(rows, r)
		}
	}
	return rowMetrics(rows, func(i int, m PairedMetric) bool {
		return (i == MetricTTFT && m.won(ttft)) || (i == MetricTok && m.won(tok))
	})
}
