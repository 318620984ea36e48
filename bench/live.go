package bench

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Live is a run's state while it plays, for a progress line or the demo's
// screen.
type Live struct {
	// Run is the run's number (1-based) of Runs.
	Run, Runs   int
	Policy      string
	Level       float64
	Repeat      int
	Phase       string
	Concurrency float64
	// Unit names Concurrency's unit ("req/s"; "" reads "clients").
	Unit           string
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
// signal and weights, per-pod load as bars, and TTFT so far.
func (l Live) Screen() string {
	var b strings.Builder
	b.WriteString("\033[H\033[2J")
	fmt.Fprintf(&b, "trimtab %s   run %d/%d   t=%.0fs/%.0fs   phase: %s (%g %s)", l.Policy, l.Run, l.Runs,
		l.Elapsed.Seconds(), l.Total.Seconds(), l.Phase, l.Concurrency, l.unit())
	if l.AdminURL != "" {
		fmt.Fprintf(&b, "   status page: %s/ui", l.AdminURL)
	}
	fmt.Fprintf(&b, "\n\nmode %s   signal %.2f\n  ", strings.ToUpper(l.Mode), l.Signal)
	for _, n := range l.Scorers {
		fmt.Fprintf(&b, "%-15s %5.2f   ", n, l.Weights[n])
	}
	b.WriteString("\n\nrequests running + waiting per pod\n")
	b.WriteString(LoadBars(l.Pods, l.Load, 40))
	fmt.Fprintf(&b, "\nTTFT so far: p50 %s  p90 %s  p99 %s   requests %d  failed %d\n",
		fmtMs(l.Stats.TTFTP50), fmtMs(l.Stats.TTFTP90), fmtMs(l.Stats.TTFTP99), l.Stats.Requests, l.Stats.Failed)
	return b.String()
}

func (l Live) unit() string {
	if l.Unit != "" {
		return l.Unit
	}
	return "clients"
}

// eighths are the partial blocks of a bar, from one eighth to a whole.
var eighths = []rune("▏▎▍▌▋▊▉█")

// Bar is v as a horizontal bar of whole and eighth blocks, full at top
// and width cells wide; at most width cells, empty for v ≤ 0 or NaN.
func Bar(v, top float64, width int) string {
	if !(v > 0) || !(top > 0) || width < 1 {
		return ""
	}
	n := int(math.Round(min(v/top, 1) * float64(width) * 8)) // eighths of a cell
	if n == 0 {
		n = 1 // anything above zero shows
	}
	bar := strings.Repeat("█", n/8)
	if r := n % 8; r > 0 {
		bar += string(eighths[r-1])
	}
	return bar
}

// LoadBars renders one line per pod: its name, a bar of its load scaled
// to the largest load (at least 1) over width cells, and the load. Pods
// beyond len(load) are left out.
func LoadBars(pods []string, load []float64, width int) string {
	top, wname := 1.0, 0
	for i, v := range load {
		if i < len(pods) {
			top, wname = max(top, v), max(wname, len(pods[i]))
		}
	}
	var b strings.Builder
	for i, n := range pods {
		if i >= len(load) {
			break
		}
		fmt.Fprintf(&b, "  %-*s %-*s %3.0f\n", wname, n, width, Bar(load[i], top, width), load[i])
	}
	return b.String()
}

// levels are the eight heights of a one-character bar.
var levels = []rune("▁▂▃▄▅▆▇█")

// LoadStrip is every pod's load as one character, ▁ (idle) to █ (the
// largest load, at least 1): a whole pool on one line, for output that is
// not a terminal.
func LoadStrip(load []float64) string {
	top := 1.0
	for _, v := range load {
		top = max(top, v)
	}
	var b strings.Builder
	for _, v := range load {
		i := 0
		if v > 0 {
			i = min(int(math.Ceil(v/top*float64(len(levels))))-1, len(levels)-1)
		}
		b.WriteRune(levels[max(i, 0)])
	}
	return b.String()
}
