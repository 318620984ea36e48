package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat"
)

// CompareRow is policy A against policy B at one (scenario, level): the
// relative change of the runs' aggregate (A ÷ B − 1; for TTFT and E2E
// negative is better, for tok/s positive is better), and A's control-loop
// record summed over its runs.
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
	// TTFTNoise, E2ENoise and TokNoise say, with Median (bench's
	// repeats), that A's runs and B's overlap on that statistic (the
	// lowest of each side at most the highest of the other): a difference
	// the repeats' own spread covers, counted neither as worse nor as a
	// win. Always false with Mean: each seed is a different workload, not
	// a noisy repeat of one.
	TTFTNoise, E2ENoise, TokNoise bool
}

// Comparison is A against B over every (scenario, level) both ran.
type Comparison struct {
	A, B string
	// Agg is how each side's runs at one (scenario, level) were combined.
	Agg  Aggregate
	Rows []CompareRow
}

// Aggregate combines a policy's runs at one (scenario, level).
type Aggregate int

const (
	// Mean averages the runs: the simulator's seeds, each a different
	// workload run without noise.
	Mean Aggregate = iota
	// Median takes the middle run: trimtab bench's repeats in wall-clock
	// time, where one run's stall (a p99 that doubles) would otherwise
	// decide the comparison; its tables show medians too.
	Median
)

func (a Aggregate) String() string {
	if a == Median {
		return "medians over repeats"
	}
	return "seed means"
}

func (a Aggregate) of(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	if a == Median {
		return MedianOf(v)
	}
	return stat.Mean(v, nil)
}

// MedianOf returns the middle of v (the mean of the two middle values when
// len(v) is even; NaN when v is empty), sorting a copy.
func MedianOf(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Compare pairs policies a and b in runs (summary.json's entries) by
// scenario and level, combining each side's runs with agg.
func Compare(runs []RunSummary, a, b string, agg Aggregate) Comparison {
	type key struct {
		sc string
		l  float64
	}
	type acc struct {
		n              int
		ttft, e2e, tok []float64
		calm, fz       int
		onset          float64
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
			x.ttft = append(x.ttft, *r.TTFTP99)
		}
		if r.E2EP99 != nil {
			x.e2e = append(x.e2e, *r.E2EP99)
		}
		x.tok = append(x.tok, r.OutputTokensPerSec)
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
	c := Comparison{A: a, B: b, Agg: agg}
	for _, k := range keys {
		x, y := accs[a][k], accs[b][k]
		if y == nil {
			continue
		}
		row := CompareRow{
			Scenario: k.sc, Level: k.l, Seeds: x.n,
			TTFTP99:     agg.of(x.ttft)/agg.of(y.ttft) - 1,
			E2EP99:      agg.of(x.e2e)/agg.of(y.e2e) - 1,
			TokPerSec:   agg.of(x.tok)/agg.of(y.tok) - 1,
			CalmEntries: x.calm, Freezes: x.fz, MaxOnset: x.onset,
		}
		if agg == Median {
			row.TTFTNoise, row.E2ENoise, row.TokNoise = overlap(x.ttft, y.ttft), overlap(x.e2e, y.e2e), overlap(x.tok, y.tok)
		}
		c.Rows = append(c.Rows, row)
	}
	slices.SortStableFunc(c.Rows, func(p, q CompareRow) int {
		if p.Scenario != q.Scenario {
			return strings.Compare(p.Scenario, q.Scenario)
		}
		return cmp.Compare(p.Level, q.Level)
	})
	return c
}

// overlap reports whether the ranges of x and y (both non-empty) meet.
func overlap(x, y []float64) bool {
	return len(x) > 0 && len(y) > 0 && slices.Min(x) <= slices.Max(y) && slices.Min(y) <= slices.Max(x)
}

// worse reports whether r is worse than tol on TTFT p99, E2E p99 or tok/s,
// beyond the runs' noise.
func (r CompareRow) worse(tol float64) bool {
	return (r.TTFTP99 > tol && !r.TTFTNoise) || (r.E2EP99 > tol && !r.E2ENoise) || (r.TokPerSec < -tol && !r.TokNoise)
}

// Worse returns the rows where A is worse than B by more than tol on
// TTFT p99, E2E p99 or tok/s, beyond the runs' noise.
func (c Comparison) Worse(tol float64) []CompareRow {
	var out []CompareRow
	for _, r := range c.Rows {
		if r.worse(tol) {
			out = append(out, r)
		}
	}
	return out
}

// Wins returns the scenarios where, at some level, A beats B by at least
// ttft on TTFT p99 or tok on tok/s (0 disables that test), beyond the
// runs' noise.
func (c Comparison) Wins(ttft, tok float64) []string {
	var out []string
	for _, r := range c.Rows {
		if (ttft > 0 && r.TTFTP99 <= -ttft && !r.TTFTNoise) || (tok > 0 && r.TokPerSec >= tok && !r.TokNoise) {
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
// than tol marked ⚠ and differences within the runs' noise marked ≈.
func (c Comparison) WriteMarkdown(w io.Writer, tol float64) error {
	pct := func(v float64, noise bool) string {
		if math.IsNaN(v) {
			return "–"
		}
		if noise {
			return fmt.Sprintf("%+.1f %% ≈", 100*v)
		}
		return fmt.Sprintf("%+.1f %%", 100*v)
	}
	runs := "seeds"
	if c.Agg == Median {
		runs = "repeats"
	}
	fmt.Fprintf(w, "| scenario | level | %s | TTFT p99 | E2E p99 | tok/s | calm entries | freezes | max onset ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", runs)
	for _, r := range c.Rows {
		mark := ""
		if r.worse(tol) {
			mark = " ⚠"
		}
		fmt.Fprintf(w, "| %s%s | %g | %d | %s | %s | %s | %d | %d | %.2f |\n", r.Scenario, mark, r.Level, r.Seeds,
			pct(r.TTFTP99, r.TTFTNoise), pct(r.E2EP99, r.E2ENoise), pct(r.TokPerSec, r.TokNoise), r.CalmEntries, r.Freezes, r.MaxOnset)
	}
	_, err := fmt.Fprintln(w)
	return err
}
