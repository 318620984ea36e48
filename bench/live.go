package bench

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Live is a run's state while it plays, for a progress line or the demo's
// screen.
type Live struct {
	// Run is the run's number (1-based) of Runs.
	Run, Runs      int
	Policy         string
	Level          float64
	Repeat         int
	Phase          string
	Concurrency    float64
	Elapsed, Total time.Duration
	// Stats are over every request finished so far.
	Stats Stats
	// Mode, Signal and Weights are the router's (empty without an admin
	// server); Scorers orders Weights.
	Mode     string
	Signal   float64
	Weights  map[string]float64
	Scorers  []string
	AdminURL string
	// Pods and Load are the targets' names and latest scraped load.
	Pods []string
	Load []float64
}

func fmtMs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 10000:
		return fmt.Sprintf("%.1fs", v/1000)
	}
	return fmt.Sprintf("%.0fms", v)
}

// Line is a one-line progress report.
func (l Live) Line() string {
	s := fmt.Sprintf("run %d/%d %-12s level %g rep %d  %3.0f/%.0fs %-10s  %d req, %d err, TTFT p50/p99 %s/%s",
		l.Run, l.Runs, l.Policy, l.Level, l.Repeat, l.Elapsed.Seconds(), l.Total.Seconds(), l.Phase,
		l.Stats.Requests, l.Stats.Failed, fmtMs(l.Stats.TTFTP50), fmtMs(l.Stats.TTFTP99))
	if l.Mode != "" {
		s += fmt.Sprintf("  mode %s signal %.2f", l.Mode, l.Signal)
	}
	return s
}

// Screen is a full-screen view (ANSI clear first): the router's mode,
// signal and weights, per-pod load and served share, and TTFT so far.
func (l Live) Screen() string {
	var b strings.Builder
	b.WriteString("\033[H\033[2J")
	fmt.Fprintf(&b, "trimtab %s   run %d/%d   t=%.0fs/%.0fs   phase: %s (%g clients)", l.Policy, l.Run, l.Runs,
		l.Elapsed.Seconds(), l.Total.Seconds(), l.Phase, l.Concurrency)
	if l.AdminURL != "" {
		fmt.Fprintf(&b, "   status page: %s/ui", l.AdminURL)
	}
	fmt.Fprintf(&b, "\n\nmode %s   signal %.2f\n  ", strings.ToUpper(l.Mode), l.Signal)
	for _, n := range l.Scorers {
		fmt.Fprintf(&b, "%-15s %5.2f   ", n, l.Weights[n])
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pod\trunning+waiting\t")
	for i, n := range l.Pods {
		if i < len(l.Load) {
			fmt.Fprintf(tw, "%s\t%.0f\t\n", n, l.Load[i])
		}
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nTTFT so far: p50 %s  p90 %s  p99 %s   requests %d  failed %d\n",
		fmtMs(l.Stats.TTFTP50), fmtMs(l.Stats.TTFTP90), fmtMs(l.Stats.TTFTP99), l.Stats.Requests, l.Stats.Failed)
	return b.String()
}
