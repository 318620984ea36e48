package sim

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/trimtab/trimtab/sim/report"
)

// HeadlineIndex returns the index of the headline level.
func (sw *Sweep) HeadlineIndex() int {
	for i, l := range sw.Levels {
		if l == sw.Scenario.Headline {
			return i
		}
	}
	best := 0
	for i, l := range sw.Levels {
		if l > sw.Levels[best] {
			best = i
		}
	}
	return best
}

func (sw *Sweep) policyIndex(name string) int {
	for i, p := range sw.Policies {
		if p == name {
			return i
		}
	}
	return -1
}

// Verdict compares an adaptive policy against the best policy at one
// level.
type Verdict struct {
	// Policy is the adaptive policy judged ("adaptive", or a profile whose
	// name starts with "adaptive").
	Policy string
	Level  float64
	// BestP50Policy and BestP99Policy hold the lowest mean p50 / p99 TTFT.
	BestP50Policy, BestP99Policy string
	BestP50, BestP99             float64
	// AdaptiveP50 / AdaptiveP99: adaptive's mean TTFT percentiles.
	AdaptiveP50, AdaptiveP99 float64
	// P50Gap and P99Gap are adaptive ÷ best − 1 (0.05 = 5% slower).
	P50Gap, P99Gap float64
	// StaticP99Ratio is adaptive p99 ÷ static-3-2-2 p99 and
	// StaticThroughputRatio adaptive ÷ static output tokens/s (NaN when
	// either policy is missing).
	StaticP99Ratio, StaticThroughputRatio float64
}

// Verdicts returns one Verdict per adaptive policy (name starting with
// "adaptive") and level; nil when none was run.
func (sw *Sweep) Verdicts() []Verdict {
	si := sw.policyIndex(PolicyStatic322)
	sums := sw.Summaries()
	var out []Verdict
	for ai, name := range sw.Policies {
		if !strings.HasPrefix(name, PolicyAdaptive) {
			continue
		}
		out = append(out, sw.verdicts(sums, ai, si)...)
	}
	return out
}

func (sw *Sweep) verdicts(sums [][]Summary, ai, si int) []Verdict {
	var out []Verdict
	for l, row := range sums {
		v := Verdict{Policy: sw.Policies[ai], Level: sw.Levels[l], BestP50: math.Inf(1), BestP99: math.Inf(1)}
		for _, s := range row {
			if s.TTFTP50 < v.BestP50 {
				v.BestP50, v.BestP50Policy = s.TTFTP50, s.Policy
			}
			if s.TTFTP99 < v.BestP99 {
				v.BestP99, v.BestP99Policy = s.TTFTP99, s.Policy
			}
		}
		a := row[ai]
		v.AdaptiveP50, v.AdaptiveP99 = a.TTFTP50, a.TTFTP99
		v.P50Gap = a.TTFTP50/v.BestP50 - 1
		v.P99Gap = a.TTFTP99/v.BestP99 - 1
		v.StaticP99Ratio, v.StaticThroughputRatio = math.NaN(), math.NaN()
		if si >= 0 {
			v.StaticP99Ratio = a.TTFTP99 / row[si].TTFTP99
			v.StaticThroughputRatio = a.OutputTokensPerSec / row[si].OutputTokensPerSec
		}
		out = append(out, v)
	}
	return out
}

// WriteMarkdown writes the scenario's report: a description, then one
// table per level (per policy: TTFT p50/p90/p99 and E2E p50/p99, misses
// counted at the timeout, the misses beside them, goodput, output
// tokens/s, prefix-cache hit rate, max/min time-averaged pod load, failed
// and timed-out requests), then adaptive's standing. Statistics
// are means over the seeds. imgPrefix is prepended to image file names
// (e.g. "img/"); command is the command line that produced the report.
func (sw *Sweep) WriteMarkdown(w io.Writer, imgPrefix, command string) error {
	sc := sw.Scenario
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n%s\n\n", sc.Name, strings.TrimSpace(sc.Description))
	ec := sc.EngineConfig()
	fmt.Fprintf(&b, "%d servers (%d KV blocks of %d tokens, max %d sequences, %d tokens/step), %v simulated (first %v excluded), scrape every %v, client timeout %v; %d seed(s): %s.\n\n",
		sc.Servers, ec.NumBlocks, ec.BlockSize, ec.MaxNumSeqs, ec.MaxBatchedTokens, sc.Duration, sc.Warmup, sc.ScrapeInterval, sc.Timeout, len(sw.Seeds), joinSeeds(sw.Seeds))
	fmt.Fprintf(&b, "Percentiles count every measured request: a failed or timed-out one (missed) at the client timeout, %v. Goodput: requests completed within TTFT ≤ %v and TPOT ≤ %v, per second.\n\n",
		sc.Timeout, sc.SLO.TTFT, sc.SLO.TPOT)
	if sc.EngineName != "" {
		fmt.Fprintf(&b, "Engine calibration `%s` (docs/calibrations.md)", sc.EngineName)
		for i, c := range sc.Engine.Classes {
			sep := ", "
			if i == 0 {
				sep = ": a mixed pool of "
			}
			fmt.Fprintf(&b, "%s%s (%.0f %% of the servers, capacity %g)", sep, c.Name, 100*c.Share, c.Capacity)
		}
		b.WriteString("; the sizes above are the base engine's.\n\n")
	}
	if sc.Routers != nil {
		fmt.Fprintf(&b, "Routed by %s.\n\n", sc.Routers)
	}
	if command != "" {
		fmt.Fprintf(&b, "```\n%s\n```\n\n", command)
	}
	sums := sw.Summaries()
	for l, row := range sums {
		fmt.Fprintf(&b, "### %s %v\n\n", sc.LevelUnit(), fmtLevel(sw.Levels[l]))
		b.WriteString("| policy | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | E2E p50 ms | E2E p99 ms | missed (at timeout) | goodput req/s | output tok/s | prefix hit | pod load max / min | failed | timed out |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, s := range row {
			fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %.0f | %.0f | %s of %s | %.2f | %.0f | %.1f%% | %.1f / %.1f | %s | %s |\n",
				s.Policy, s.TTFTP50, s.TTFTP90, s.TTFTP99, s.E2EP50, s.E2EP99, fmtCount(s.Misses), fmtCount(s.Measured), s.Goodput,
				s.OutputTokensPerSec, 100*s.PrefixHitRate, s.LoadMax, s.LoadMin, fmtCount(s.Failed), fmtCount(s.TimedOut))
		}
		b.WriteString("\n")
	}
	if vs := sw.Verdicts(); vs != nil {
		b.WriteString("Adaptive against the best policy at each level (mean over seeds; + is slower):\n\n")
		b.WriteString("| policy | " + sc.LevelUnit() + " | best p50 | its p50 | gap | best p99 | its p99 | gap | ÷ static p99 | ÷ static tok/s |\n")
		b.WriteString("|---|--:|---|--:|--:|---|--:|--:|--:|--:|\n")
		for _, v := range vs {
			fmt.Fprintf(&b, "| %s | %s | %s %.1f | %.1f | %+.1f%% | %s %.1f | %.1f | %+.1f%% | %.2f | %.2f |\n",
				v.Policy, fmtLevel(v.Level), v.BestP50Policy, v.BestP50, v.AdaptiveP50, 100*v.P50Gap,
				v.BestP99Policy, v.BestP99, v.AdaptiveP99, 100*v.P99Gap, v.StaticP99Ratio, v.StaticThroughputRatio)
		}
		b.WriteString("\n")
	}
	if imgPrefix != "-" {
		for _, img := range sw.Images() {
			fmt.Fprintf(&b, "![%s](%s%s)\n\n", img.Title, imgPrefix, img.File)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func joinSeeds(seeds []uint64) string {
	parts := make([]string, len(seeds))
	for i, s := range seeds {
		parts[i] = fmt.Sprint(s)
	}
	return strings.Join(parts, ", ")
}

func fmtLevel(l float64) string {
	if l == math.Trunc(l) {
		return fmt.Sprintf("%.0f", l)
	}
	return fmt.Sprintf("%g", l)
}

func fmtCount(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// GoldenSummary renders a compact, exact text summary of every run, for
// golden tests: counts and latency percentiles in microseconds.
func (sw *Sweep) GoldenSummary() string {
	var b strings.Builder
	for l := range sw.Levels {
		for p := range sw.Policies {
			for _, r := range sw.Runs[l][p] {
				fmt.Fprintf(&b, "%s level=%v policy=%s seed=%d issued=%d completed=%d failed=%d timedout=%d measured=%d misses=%d good=%d ttft_us=%.0f/%.0f/%.0f e2e_us=%.0f/%.0f tok_s=%.1f hit=%.4f load=%.2f/%.2f preempt=%d weights=%d\n",
					r.Scenario, r.Level, r.Policy, r.Seed, r.Issued, r.Completed, r.Failed, r.TimedOut, r.Measured, r.Misses, r.Good,
					1000*nz(report.Percentile(r.TTFT, 50)), 1000*nz(report.Percentile(r.TTFT, 90)), 1000*nz(report.Percentile(r.TTFT, 99)),
					1000*nz(report.Percentile(r.E2E, 50)), 1000*nz(report.Percentile(r.E2E, 99)),
					r.OutputTokensPerSec, r.PrefixHitRate, r.LoadMax, r.LoadMin, r.Preemptions, r.WeightChanges)
			}
		}
	}
	return b.String()
}
