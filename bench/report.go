package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/trimtab/trimtab/sim/report"
)

// spread is the median of vs with its min and max, NaNs left out.
type spread struct{ med, lo, hi float64 }

func spreadOf(vs []float64) spread {
	vs = slices.DeleteFunc(slices.Clone(vs), math.IsNaN)
	if len(vs) == 0 {
		return spread{math.NaN(), math.NaN(), math.NaN()}
	}
	return spread{report.MedianOf(vs), slices.Min(vs), slices.Max(vs)}
}

func (s spread) ms() string {
	if math.IsNaN(s.med) {
		return "–"
	}
	if s.lo == s.hi {
		return fmt.Sprintf("%.0f", s.med)
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", s.med, s.lo, s.hi)
}

func (s spread) ratio() string {
	if math.IsNaN(s.med) {
		return "–"
	}
	if s.lo == s.hi {
		return fmt.Sprintf("%.2f", s.med)
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s.med, s.lo, s.hi)
}

func val(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// group returns the summaries of (policy, level), in repeat order.
func group(sums []report.RunSummary, policy string, level float64) []report.RunSummary {
	var out []report.RunSummary
	for _, s := range sums {
		if s.Policy == policy && s.Level == level {
			out = append(out, s)
		}
	}
	return out
}

func col(rs []report.RunSummary, f func(*report.RunSummary) float64) spread {
	vs := make([]float64, len(rs))
	for i := range rs {
		vs[i] = f(&rs[i])
	}
	return spreadOf(vs)
}

// WriteTables writes the overall and per-phase tables: medians over the
// repeats with (min–max), the misses (counted in the percentiles at the
// timeout) beside the percentiles, and goodput.
func (rep *Report) WriteTables(w io.Writer) error {
	sums := rep.Summaries()
	var b strings.Builder
	for _, level := range rep.Config.Levels {
		fmt.Fprintf(&b, "### %s %g: overall\n\n", rep.Scenario.LevelUnit(), level)
		b.WriteString("| policy | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | E2E p50 ms | E2E p99 ms | ITL p50 / p99 ms | missed (at timeout) | goodput req/s | tok/s | cached-token ratio | prefix-hit ratio | busiest pod: load share / served share | weight changes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, pol := range rep.Config.Policies {
			rs := group(sums, pol.Name, level)
			if len(rs) == 0 {
				continue
			}
			var itl50, itl99, served []float64
			kinds := map[string]int{}
			for _, r := range rep.Runs {
				if r.Policy == pol.Name && r.Level == level {
					st := r.stats(r.measured(-1), 0)
					itl50, itl99 = append(itl50, st.ITLP50), append(itl99, st.ITLP99)
					served = append(served, servedShare(st))
					for k, n := range st.Errors {
						kinds[k] += n
					}
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s / %s | %s of %s%s | %s | %s | %s | %s | %s | %s |\n", pol.Name,
				col(rs, func(s *report.RunSummary) float64 { return val(s.TTFTP50) }).ms(),
				col(rs, func(s *report.RunSummary) float64 { return val(s.TTFTP90) }).ms(),
				col(rs, func(s *report.RunSummary) float64 { return val(s.TTFTP99) }).ms(),
				col(rs, func(s *report.RunSummary) float64 { return val(s.E2EP50) }).ms(),
				col(rs, func(s *report.RunSummary) float64 { return val(s.E2EP99) }).ms(),
				spreadOf(itl50).ms(), spreadOf(itl99).ms(),
				col(rs, func(s *report.RunSummary) float64 { return float64(s.Misses) }).ms(),
				col(rs, func(s *report.RunSummary) float64 { return float64(s.Measured) }).ms(), kindList(kinds),
				col(rs, func(s *report.RunSummary) float64 { return val(s.Goodput) }).ratio(),
				col(rs, func(s *report.RunSummary) float64 { return s.OutputTokensPerSec }).ms(),
				col(rs, func(s *report.RunSummary) float64 { return val(s.CachedTokenRatio) }).ratio(),
				col(rs, func(s *report.RunSummary) float64 { return s.PrefixHitRatio }).ratio(),
				col(rs, func(s *report.RunSummary) float64 { return s.BusiestPodShare }).ratio()+" / "+spreadOf(served).ratio(),
				col(rs, func(s *report.RunSummary) float64 { return float64(s.WeightChanges) }).ms())
		}
		writeAgentTable(&b, rep.Config.Policies, sums, level)
		fmt.Fprintf(&b, "\n### %s %g: per phase\n\n", rep.Scenario.LevelUnit(), level)
		b.WriteString("| phase | policy | requests | missed | TTFT p50 ms | TTFT p99 ms | E2E p99 ms | goodput req/s | tok/s | calm→rebalance entries (all repeats) | onset busiest ratio |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for pi, ph := range rep.Scenario.Phases {
			for _, pol := range rep.Config.Policies {
				rs := group(sums, pol.Name, level)
				if len(rs) == 0 || pi >= len(rs[0].Phases) {
					continue
				}
				entries := 0
				for _, r := range rs {
					entries += r.Phases[pi].RebalanceEntries
				}
				p := func(f func(*report.PhaseSummary) float64) spread {
					return col(rs, func(s *report.RunSummary) float64 { return f(&s.Phases[pi]) })
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", ph.Name, pol.Name,
					p(func(s *report.PhaseSummary) float64 { return float64(s.Measured) }).ms(),
					p(func(s *report.PhaseSummary) float64 { return float64(s.Misses) }).ms(),
					p(func(s *report.PhaseSummary) float64 { return val(s.TTFTP50) }).ms(),
					p(func(s *report.PhaseSummary) float64 { return val(s.TTFTP99) }).ms(),
					p(func(s *report.PhaseSummary) float64 { return val(s.E2EP99) }).ms(),
					p(func(s *report.PhaseSummary) float64 { return val(s.Goodput) }).ratio(),
					p(func(s *report.PhaseSummary) float64 { return s.OutputTokensPerSec }).ms(),
					entries,
					p(func(s *report.PhaseSummary) float64 { return s.OnsetBusiestRatio }).ratio())
			}
		}
		writeClassTable(&b, rep.Scenario.LevelUnit(), level, rep.Config.Policies, sums)
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeClassTable writes the per-class table of a level when the runs
// have classes (workload.class, streams): counts over the whole run,
// latencies of the measured requests, and, against servers that report
// their own TTFT (trimtab fakeservers), its p99 and the p99 of what lies
// in front of the servers.
func writeClassTable(b *strings.Builder, unit string, level float64, pols []Policy, sums []report.RunSummary) {
	header := false
	for _, pol := range pols {
		rs := group(sums, pol.Name, level)
		if len(rs) == 0 {
			continue
		}
		for ci, cl := range rs[0].Classes {
			if !header {
				fmt.Fprintf(b, "\n### %s %g: per class\n\n", unit, level)
				b.WriteString("| class | policy | completed of issued | dropped | timed out / failed | TTFT p50 ms | TTFT p99 ms | E2E p99 ms | goodput req/s | server TTFT p99 ms | in front of the servers p99 ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
				header = true
			}
			c := func(f func(*report.ClassSummary) float64) spread {
				return col(rs, func(s *report.RunSummary) float64 {
					if ci >= len(s.Classes) {
						return math.NaN()
					}
					return f(&s.Classes[ci])
				})
			}
			fmt.Fprintf(b, "| %s | %s | %s of %s | %s | %s / %s | %s | %s | %s | %s | %s | %s |\n", cl.Name, pol.Name,
				c(func(s *report.ClassSummary) float64 { return float64(s.Completed) }).ms(),
				c(func(s *report.ClassSummary) float64 { return float64(s.Issued) }).ms(),
				c(func(s *report.ClassSummary) float64 { return float64(s.Dropped) }).ms(),
				c(func(s *report.ClassSummary) float64 { return float64(s.TimedOut) }).ms(),
				c(func(s *report.ClassSummary) float64 { return float64(s.Failed) }).ms(),
				c(func(s *report.ClassSummary) float64 { return val(s.TTFTP50) }).ms(),
				c(func(s *report.ClassSummary) float64 { return val(s.TTFTP99) }).ms(),
				c(func(s *report.ClassSummary) float64 { return val(s.E2EP99) }).ms(),
				c(func(s *report.ClassSummary) float64 { return val(s.Goodput) }).ratio(),
				c(func(s *report.ClassSummary) float64 { return val(s.ServerTTFTP99) }).ms(),
				c(func(s *report.ClassSummary) float64 { return val(s.RouterTTFTP99) }).ms())
		}
	}
}

func kindList(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(parts)
	return " (" + strings.Join(parts, ", ") + ")"
}

// WriteGenerator writes the load generator's own record per run: process
// CPU over the run, and how late requests left against their schedule.
func (rep *Report) WriteGenerator(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| run | policy | level | repeat | order | salt | wall s | process CPU (cores) | requests | lateness p50 / p99 / max ms | prompt tokens reported ÷ intended |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range rep.Runs {
		p50, p99, worst := r.Lateness()
		cpu := "–"
		if r.CPU > 0 && r.Wall > 0 {
			cpu = fmt.Sprintf("%.2f", r.CPU.Seconds()/r.Wall.Seconds())
		}
		prompt := "–"
		if pc := r.PromptCheck; pc.Reported > 0 {
			prompt = fmt.Sprintf("%.2f", pc.Ratio)
			if pc.Off > 0 {
				prompt += fmt.Sprintf(" ⚠ %d off", pc.Off)
			}
		}
		fmt.Fprintf(&b, "| %d | %s | %g | %d | %d | %016x | %.1f | %s | %d | %.1f / %.1f / %.1f | %s |\n", i+1, r.Policy, r.Level, r.Repeat, r.Order, r.Salt,
			r.Wall.Seconds(), cpu, len(r.Requests), msOf(p50), msOf(p99), msOf(worst), prompt)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes DIR/<scenario>.md: the setup, the command, the
// tables, the generator's record, the plots (imgPrefix "-": none) and,
// with CompareSim, the rankings side by side.
func (rep *Report) WriteMarkdown(w io.Writer, imgPrefix, command, setup string) error {
	sc := rep.Scenario
	fmt.Fprintf(w, "# trimtab bench: %s\n\n%s\n\n`%s`\n\n", sc.Name, strings.TrimSpace(sc.Description), command)
	fmt.Fprintf(w, "%s Scenario time ×%g (%v per run, warm-up %v excluded), %d repeat(s) interleaved, each starting one policy further on; "+
		"values are medians over the repeats with (min–max). Latencies in ms, client side. "+
		"Percentiles count every measured request: a failed one (missed: an HTTP error, a refused or reset connection, a stream cut before its end, or the client timeout) at the client timeout, %v. "+
		"Goodput: requests completed within TTFT ≤ %v and TPOT ≤ %v, per second of the window.\n\n",
		setup, rep.Config.TimeScale, sc.Duration.Round(time.Second), sc.Warmup.Round(time.Second), rep.Config.Repeat, sc.Timeout, sc.SLO.TTFT, sc.SLO.TPOT)
	if order := rep.order(); order != "" {
		fmt.Fprintf(w, "Policy order per repeat (rotated): %s.\n\n", order)
	}
	for _, r := range rep.Runs {
		if warn := r.PromptCheck.Warning(); warn != "" {
			fmt.Fprintf(w, "⚠ Run %s at %g, repeat %d: %s.\n\n", r.Policy, r.Level, r.Repeat, warn)
		}
	}
	if err := rep.WriteTables(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "### Load generator\n\nProcess CPU counts everything in this process (with `--fleet` also the servers and the router); lateness is how long after its scheduled time each request left; the last column is the median of the prompt size the servers reported (usage.prompt_tokens) ÷ the size bench meant, with the requests off by more than %d×.\n\n", PromptOffFactor)
	if err := rep.WriteGenerator(w); err != nil {
		return err
	}
	if imgPrefix != "-" {
		fmt.Fprintf(w, "\n### TTFT over time (first repeat; shaded: router not calm)\n\n")
		for _, img := range rep.Images() {
			fmt.Fprintf(w, "![%s](%s%s)\n\n", img.Title, imgPrefix, img.File)
		}
	}
	if rep.Sim != nil {
		fmt.Fprintf(w, "\n### Simulator against real time\n\n")
		return rep.WriteRankings(w)
	}
	return nil
}

// order lists the policies in the order each repeat ran them, at the
// first level ("1: a, b; 2: b, a").
func (rep *Report) order() string {
	var parts []string
	for _, r := range rep.Runs {
		if len(rep.Config.Levels) > 0 && r.Level != rep.Config.Levels[0] {
			continue
		}
		if r.Order == 1 {
			parts = append(parts, fmt.Sprintf("%d: %s", r.Repeat, r.Policy))
		} else if len(parts) > 0 {
			parts[len(parts)-1] += ", " + r.Policy
		}
	}
	return strings.Join(parts, "; ")
}

// servedShare is the busiest pod's share of the successful requests, by
// the x-trimtab-endpoint header (NaN when no response named its pod).
func servedShare(st Stats) float64 {
	top, n := 0, 0
	for ep, k := range st.ByEndpoint {
		if ep != "" {
			top, n = max(top, k), n+k
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return float64(top) / float64(n)
}

// writeAgentTable writes, for agentic runs, each policy's continuation
// hit ratio, herd picks and busiest pod ratio (medians with min–max).
func writeAgentTable(b *strings.Builder, pols []Policy, sums []report.RunSummary, level float64) {
	head := false
	for _, pol := range pols {
		rs := group(sums, pol.Name, level)
		if len(rs) == 0 || rs[0].ContinuationHitRatio == nil {
			continue
		}
		if !head {
			b.WriteString("\n| policy | continuation hit ratio | herd picks | busiest pod ratio |\n|---|---|---|---|\n")
			head = true
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", pol.Name,
			col(rs, func(s *report.RunSummary) float64 { return val(s.ContinuationHitRatio) }).ratio(),
			col(rs, func(s *report.RunSummary) float64 { return float64(s.HerdPicks) }).ms(),
			col(rs, func(s *report.RunSummary) float64 { return s.BusiestPodRatio }).ratio())
	}
}
