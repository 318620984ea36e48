package sim

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// LoadScenarios loads every named scenario (a file or a shipped name; the
// single name "all" is every shipped one). A duration > 0 replays each in
// that simulated time instead (Scenario.Scaled).
func LoadScenarios(names []string, duration time.Duration) ([]*scenario.Scenario, error) {
	if len(names) == 1 && names[0] == "all" {
		names = Shipped()
	}
	out := make([]*scenario.Scenario, 0, len(names))
	for _, n := range names {
		sc, err := LoadScenario(n)
		if err != nil {
			return nil, err
		}
		if duration > 0 {
			sc = sc.Scaled(duration)
		}
		out = append(out, sc)
	}
	return out, nil
}

// WriteReport writes the sweep's report into dir: dir/<scenario>.md and,
// with plots, the images under dir/img. command is the command line the
// report says made it. It returns the report's path.
func (sw *Sweep) WriteReport(dir string, plots bool, command string) (string, error) {
	imgs := "-"
	if plots {
		imgs = "img/"
		if err := sw.WriteImages(filepath.Join(dir, "img")); err != nil {
			return "", fmt.Errorf("scenario %s: plots: %w", sw.Scenario.Name, err)
		}
	}
	path := filepath.Join(dir, sw.Scenario.Name+".md")
	return path, report.WriteFile(path, func(w io.Writer) error { return sw.WriteMarkdown(w, imgs, command) })
}

// WriteFiles writes a tuning's report, dir/tune.md, and dir/tuned.yaml,
// the profile f at the best vector with comment on top. command is the
// command line the report says made it.
func (r *TuneResult) WriteFiles(dir string, f *configs.File, comment, command string) error {
	if err := report.WriteFile(filepath.Join(dir, "tune.md"), func(w io.Writer) error { return r.WriteMarkdown(w, command) }); err != nil {
		return err
	}
	return report.WriteFile(filepath.Join(dir, "tuned.yaml"), func(w io.Writer) error { return r.WriteProfile(w, f, comment) })
}

// fairBaselines are the comparisons WriteComparisons makes: adaptive
// against each baseline, with the tolerance that marks a row worse and the
// TTFT p99 and throughput gains that count as a win.
var fairBaselines = []struct {
	policy    string
	tol       float64
	ttft, tok float64
	heading   string
}{
	{PolicyAdaptiveOff, 0.02, 0.2, 0.1, "adaptive against adaptive-off (same profile, loop off)"},
	{PolicyTunedStatic, 0.03, 0.1, 0, "adaptive against tuned-static (the best single static vector, `trimtab sim tune`)"},
}

// FairBaseline is one comparison compare.md makes: adaptive against
// Policy, a row worse than Tol marked, TTFTWin and TokWin (relative, 0
// off) counted as wins, under Heading.
type FairBaseline struct {
	Policy               string
	Tol, TTFTWin, TokWin float64
	Heading              string
}

// FairBaselines returns the comparisons WriteComparisons makes, in order.
func FairBaselines() []FairBaseline {
	out := make([]FairBaseline, 0, len(fairBaselines))
	for _, p := range fairBaselines {
		out = append(out, FairBaseline{Policy: p.policy, Tol: p.tol, TTFTWin: p.ttft, TokWin: p.tok, Heading: p.heading})
	}
	return out
}

// WriteComparisons writes path (compare.md) when runs hold adaptive beside
// its fair baselines: adaptive against adaptive-off (the same profile,
// loop off) and against tuned-static (the best single static vector for
// the suite), per scenario and level. It returns one verdict line per
// baseline compared; nothing is written when there is none. agg combines
// each policy's runs at one (scenario, level): Mean for the simulator's
// seeds, Median for bench's repeats.
func WriteComparisons(path, command string, runs []report.RunSummary, agg report.Aggregate) ([]string, error) {
	var body strings.Builder
	var lines []string
	for _, p := range fairBaselines {
		c := report.Compare(runs, PolicyAdaptive, p.policy, agg)
		if len(c.Rows) == 0 {
			continue
		}
		worse, wins := c.Worse(p.tol), c.Wins(p.ttft, p.tok)
		calm, fz := c.Loop()
		fmt.Fprintf(&body, "## %s\n\nA ÷ B − 1 on %s; ⚠ marks a row worse than %.0f %%", p.heading, agg, 100*p.tol)
		if agg == report.Median {
			body.WriteString(" beyond noise; ≈ marks a difference the repeats' min–max ranges cover (they overlap), counted neither as worse nor as a win")
		}
		body.WriteString(".\n\n")
		if err := c.WriteMarkdown(&body, p.tol); err != nil {
			return nil, err
		}
		line := fmt.Sprintf("adaptive vs %s: %d of %d rows worse by > %.0f %%; wins in %d scenarios %v; calm-phase entries %d, watchdog freezes %d",
			p.policy, len(worse), len(c.Rows), 100*p.tol, len(wins), wins, calm, fz)
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

// Line formats the verdict as one line, the load level in unit
// (Scenario.LevelUnit).
func (v Verdict) Line(unit string) string {
	return fmt.Sprintf("%s %s %g: p50 %+.1f%% vs %s, p99 %+.1f%% vs %s, p99 ÷ static %.2f, tok/s ÷ static %.2f",
		v.Policy, unit, v.Level, 100*v.P50Gap, v.BestP50Policy, 100*v.P99Gap, v.BestP99Policy, v.StaticP99Ratio, v.StaticThroughputRatio)
}
