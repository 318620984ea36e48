package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// CompareRow is policy A against policy B at one (scenario, level): the
// relative change of the seed means (A ÷ B − 1; for TTFT and E2E negative
// is better, for tok/s positive is better), and A's control-loop record
// summed over its seeds.
type CompareRow struct {
	Scenario                   string
	Level                      float64
	Seeds                      int
	TTFTP99, E2EP99, TokPerSec float64
	// CalmEntries are A's rebalance entries inside calm phases' measured
	// windows; Freezes its watchdog trips.
	CalmEntries, Freezes int
	// MaxOnset is A's largest onset busiest-pod ratio over its phases
	// after the first (whose onset is the run's cold start).
	MaxOnset float64
}

// Comparison is A against B over every (scenario, level) both ran.
type Comparison struct {
	A, B string
	Rows []CompareRow
}

// Compare pairs policies a and b in runs (summary.json's entries) by
// scenario and level, averaging each over its seeds.
func Compare(runs []RunSummary, a, b string) Comparison {
	type key struct {
		sc string
		l  float64
	}
	type acc struct {
		n              int
		ttft, e2e, tok float64
		calm, fz       int
		onset          float64
		ttftN, e2eN    int
	}
	accs := map[string]map[key]*acc{a: {}, b: {}}
	var keys []key
	for _, r := range runs {
		m, ok := accs[r.Policy]
		if !ok {
			continue
		}
		k := key{r.Scenario, r.Level}
		x := m[k]
		if x == nil {
			x = &acc{}
			m[k] = x
			if r.Policy == a {
				keys = append(keys, k)
			}
		}
		x.n++
		if r.TTFTP99 != nil {
			x.ttft += *r.TTFTP99
			x.ttftN++
		}
		if r.E2EP99 != nil {
			x.e2e += *r.E2EP99
			x.e2eN++
		}
		x.tok += r.OutputTokensPerSec
		x.fz += r.WatchdogFreezes
		for i, p := range r.Phases {
			if strings.HasPrefix(p.Name, "calm") {
				x.calm += p.RebalanceEntries
			}
			if i > 0 {
				x.onset = max(x.onset, p.OnsetBusiestRatio)
			}
		}
	}
	mean := func(sum float64, n int) float64 {
		if n == 0 {
			return math.NaN()
		}
		return sum / float64(n)
	}
	c := Comparison{A: a, B: b}
	for _, k := range keys {
		x, y := accs[a][k], accs[b][k]
		if y == nil {
			continue
		}
		c.Rows = append(c.Rows, CompareRow{
			Scenario: k.sc, Level: k.l, Seeds: x.n,
			TTFTP99:     mean(x.ttft, x.ttftN)/mean(y.ttft, y.ttftN) - 1,
			E2EP99:      mean(x.e2e, x.e2eN)/mean(y.e2e, y.e2eN) - 1,
			TokPerSec:   mean(x.tok, x.n)/mean(y.tok, y.n) - 1,
			CalmEntries: x.calm, Freezes: x.fz, MaxOnset: x.onset,
		})
	}
	slices.SortStableFunc(c.Rows, func(p, q CompareRow) int {
		if p.Scenario != q.Scenario {
			return strings.Compare(p.Scenario, q.Scenario)
		}
		return cmpFloat(p.Level, q.Level)
	})
	return c
}

// Worse returns the rows where A is worse than B by more than tol on
// TTFT p99, E2E p99 or tok/s.
func (c Comparison) Worse(tol float64) []CompareRow {
	var out []CompareRow
	for _, r := range c.Rows {
		if r.TTFTP99 > tol || r.E2EP99 > tol || r.TokPerSec < -tol {
			out = append(out, r)
		}
	}
	return out
}

// Wins returns the scenarios where, at some level, A beats B by at least
// ttft on TTFT p99 or tok on tok/s (0 disables that test).
func (c Comparison) Wins(ttft, tok float64) []string {
	var out []string
	for _, r := range c.Rows {
		if (ttft > 0 && r.TTFTP99 <= -ttft) || (tok > 0 && r.TokPerSec >= tok) {
			if !slices.Contains(out, r.Scenario) {
				out = append(out, r.Scenario)
			}
		}
	}
	return out
}

// Loop sums A's calm-phase entries and freezes over every row.
func (c Comparison) Loop() (calmEntries, freezes int) {
	for _, r := range c.Rows {
		calmEntries += r.CalmEntries
		freezes += r.Freezes
	}
	return
}

// WriteMarkdown writes the comparison as a table, with the rows worse
// than tol marked.
func (c Comparison) WriteMarkdown(w io.Writer, tol float64) error {
	pct := func(v float64) string {
		if math.IsNaN(v) {
			return "–"
		}
		return fmt.Sprintf("%+.1f %%", 100*v)
	}
	fmt.Fprintf(w, "| scenario | level | seeds | TTFT p99 | E2E p99 | tok/s | calm entries | freezes | max onset ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range c.Rows {
		mark := ""
		if r.TTFTP99 > tol || r.E2EP99 > tol || r.TokPerSec < -tol {
			mark = " ⚠"
		}
		fmt.Fprintf(w, "| %s%s | %g | %d | %s | %s | %s | %d | %d | %.2f |\n", r.Scenario, mark, r.Level, r.Seeds, pct(r.TTFTP99), pct(r.E2EP99), pct(r.TokPerSec), r.CalmEntries, r.Freezes, r.MaxOnset)
	}
	_, err := fmt.Fprintln(w)
	return err
}
