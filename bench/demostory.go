package bench

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// DemoNumbers are one policy's numbers over the demo's burst.
type DemoNumbers struct {
	// TTFTP99 and E2EP99 are in milliseconds (NaN: no request finished).
	TTFTP99, E2EP99 float64
	// TokPerSec is output tokens per second.
	TokPerSec float64
	// Busiest is the busiest pod's time-averaged load ÷ the pool's mean
	// (1: even; NaN: not scraped).
	Busiest float64
	// Failed counts requests that failed or timed out.
	Failed int
}

// WeightShift is one scorer's weight in calm and where the loop took it.
type WeightShift struct {
	Scorer   string
	From, To float64
}

// DemoLoop is what the adaptive router's control loop did during a run.
type DemoLoop struct {
	// Entries counts calm → rebalance transitions; FirstEntry is the first
	// one's offset from the run's start, BackToCalm the offset of the
	// return to calm after it (negative: it never returned).
	Entries                int
	FirstEntry, BackToCalm time.Duration
	// Reason is the configurator's reason for the first entry ("" unknown).
	Reason string
	// Frozen is true when the flap watchdog froze the loop.
	Frozen bool
	// PeakSignal is the highest signal sampled; ThetaOn the threshold
	// that enters rebalance.
	PeakSignal, ThetaOn float64
	// Shifts are the weights that moved most from calm, largest first.
	Shifts []WeightShift
	// Unknown is why the router's timeline is missing ("" when it is not).
	Unknown string
}

// DemoOutcome is what the demo's closing summary is written from.
type DemoOutcome struct {
	// Burst describes the burst ("30s at 35 req/s, 90 % of them on one
	// 6,000-token prompt").
	Burst    string
	Adaptive DemoNumbers
	// Static is the static policy's numbers (nil: not run); StaticName
	// names it.
	Static     *DemoNumbers
	StaticName string
	Loop       DemoLoop
}

// demoTie is the relative difference under which two numbers of one run
// each are called a tie: run-to-run noise on a shared machine is of this
// order.
const demoTie = 0.05

// DemoSummary writes the demo's closing three lines in words: what
// happened, the key numbers, and the comparison. It says so when the
// loop never acted and when adaptive does not win.
func DemoSummary(o DemoOutcome) [3]string {
	var out [3]string
	l := o.Loop
	a := o.Adaptive
	switch {
	case l.Unknown != "":
		out[0] = "What happened: unknown — the router's timeline could not be read (" + l.Unknown + ")."
	case l.Entries > 0:
		s := "What happened: in the burst the picks the calm weights would make piled onto the pods holding the hot prompt; "
		if l.Entries == 1 {
			s += fmt.Sprintf("the loop left calm at %s", secs(l.FirstEntry))
		} else {
			s += fmt.Sprintf("the loop entered rebalance %d times, first at %s", l.Entries, secs(l.FirstEntry))
		}
		if l.Reason != "" {
			s += " (" + l.Reason + ")"
		}
		if len(l.Shifts) > 0 {
			var parts []string
			for _, w := range l.Shifts {
				parts = append(parts, fmt.Sprintf("%s %s → %s", w.Scorer, num(w.From), num(w.To)))
			}
			s += ", moved weight from affinity to load (" + strings.Join(parts, ", ") + ")"
		}
		if l.BackToCalm >= 0 {
			s += fmt.Sprintf(" and returned to calm at %s", secs(l.BackToCalm))
		} else {
			s += " and was still rebalancing at the end"
		}
		if l.Frozen {
			s += "; the flap watchdog froze it on the profile's weights"
		}
		out[0] = s + "."
	default:
		if l.PeakSignal >= l.ThetaOn {
			out[0] = fmt.Sprintf("What happened: the loop never left calm (the signal reached %.2f, over theta_on %.2f, but not for long enough to enter rebalance), so no weight changed", l.PeakSignal, l.ThetaOn)
		} else {
			out[0] = fmt.Sprintf("What happened: the loop never left calm (signal at most %.2f, below theta_on %.2f), so no weight changed", l.PeakSignal, l.ThetaOn)
		}
		if !math.IsNaN(a.Busiest) {
			out[0] += fmt.Sprintf("; the load guard alone held the busiest pod at %.1f× the mean", a.Busiest)
		}
		out[0] += "."
	}

	out[1] = "Key numbers (" + o.Burst + "): adaptive " + a.words()
	if o.Static != nil {
		out[1] += "; " + o.StaticName + " " + o.Static.words()
	}
	out[1] += "."

	if o.Static == nil {
		out[2] = "Comparison: none — the static weights were not run (--compare=false)."
		return out
	}
	s := o.Static
	type metric struct {
		name    string
		a, s    float64
		smaller bool // smaller is better
	}
	var better, worse, even []string
	for _, m := range []metric{{"TTFT p99", a.TTFTP99, s.TTFTP99, true}, {"E2E p99", a.E2EP99, s.E2EP99, true}, {"output tok/s", a.TokPerSec, s.TokPerSec, false}} {
		if math.IsNaN(m.a) || math.IsNaN(m.s) || m.s == 0 {
			continue
		}
		d := (m.a - m.s) / m.s
		gain := -d
		if !m.smaller {
			gain = d
		}
		word := fmt.Sprintf("%s (%+.0f %%)", m.name, 100*d)
		switch {
		case gain > demoTie:
			better = append(better, word)
		case gain < -demoTie:
			worse = append(worse, word)
		default:
			even = append(even, m.name)
		}
	}
	if a.Failed < s.Failed {
		better = append(better, fmt.Sprintf("failures (%d against %d)", a.Failed, s.Failed))
	} else if a.Failed > s.Failed {
		worse = append(worse, fmt.Sprintf("failures (%d against %d)", a.Failed, s.Failed))
	}
	tail := ""
	if len(even) > 0 {
		tail = "; within 5 %: " + strings.Join(even, ", ")
	}
	switch {
	case len(better) > 0 && len(worse) == 0:
		out[2] = "Comparison: adaptive did better than " + o.StaticName + " on " + strings.Join(better, ", ") + tail
		if l.Entries == 0 && l.Unknown == "" {
			out[2] += " — with the loop calm throughout, that is the load guard's doing, not the loop's"
		}
	case len(worse) > 0 && len(better) == 0:
		out[2] = "Comparison: adaptive did worse than " + o.StaticName + " on " + strings.Join(worse, ", ") + tail + " — on this run adaptive did not pay off"
	case len(worse) > 0:
		out[2] = "Comparison: mixed — adaptive did better than " + o.StaticName + " on " + strings.Join(better, ", ") + " and worse on " + strings.Join(worse, ", ") + tail
	default:
		out[2] = "Comparison: a tie — adaptive and " + o.StaticName + " are within 5 % of each other on every measure"
	}
	out[2] += "."
	return out
}

// words is n as a phrase: "TTFT p99 120 ms, E2E p99 3.6 s, 4,400 tok/s,
// busiest pod 1.5× the mean".
func (n DemoNumbers) words() string {
	s := fmt.Sprintf("TTFT p99 %s, E2E p99 %s, %s tok/s", dur(n.TTFTP99), dur(n.E2EP99), thousands(n.TokPerSec))
	if !math.IsNaN(n.Busiest) {
		s += fmt.Sprintf(", busiest pod %.1f× the mean", n.Busiest)
	}
	if n.Failed > 0 {
		s += fmt.Sprintf(", %d failed", n.Failed)
	}
	return s
}

func dur(ms float64) string {
	switch {
	case math.IsNaN(ms):
		return "–"
	case ms >= 1000:
		return fmt.Sprintf("%.1f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.0fs", d.Seconds()) }

// num is a weight: whole numbers bare, others to one decimal.
func num(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// thousands is v rounded, with a comma every three digits.
func thousands(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// LoadWarning is the demo's warning when the host's 1-minute load
// average exceeds its cores ("" when it does not, or when either is
// unknown: cores < 1 or a NaN load).
func LoadWarning(load1 float64, cores int) string {
	if cores < 1 || !(load1 > float64(cores)) {
		return ""
	}
	return fmt.Sprintf("⚠ This machine is busy: its load average is %.1f on %d cores. The servers, the router and the load "+
		"share the CPU with other work, so latencies include waiting for it and the comparison between policies means little.", load1, cores)
}

// loopStory reads what the loop did from an adaptive run's timeline:
// mode changes, the signal's peak and the weights that moved most from
// the first sample's (calm) weights, at most three, each by more than
// 10 % of its calm value.
func loopStory(r *RunResult, thetaOn float64, reason string) DemoLoop {
	l := DemoLoop{BackToCalm: -1, ThetaOn: thetaOn, Reason: reason, Unknown: r.AdminErr}
	for _, c := range r.ModeChanges {
		switch c.To {
		case "rebalance":
			if l.Entries == 0 {
				l.FirstEntry = c.T
			}
			l.Entries++
		case "calm":
			if l.Entries > 0 && l.BackToCalm < 0 {
				l.BackToCalm = c.T
			}
		case "frozen":
			l.Frozen = true
		}
	}
	if len(r.Modes) == 0 {
		return l
	}
	calm := r.Modes[0].Weights
	far := maps.Clone(calm)
	for _, p := range r.Modes {
		l.PeakSignal = max(l.PeakSignal, p.Signal)
		for n, v := range p.Weights {
			if math.Abs(v-calm[n]) > math.Abs(far[n]-calm[n]) {
				far[n] = v
			}
		}
	}
	for n, v := range far {
		if c := calm[n]; math.Abs(v-c) > 0.1*max(math.Abs(c), 0.1) {
			l.Shifts = append(l.Shifts, WeightShift{Scorer: n, From: c, To: v})
		}
	}
	slices.SortFunc(l.Shifts, func(x, y WeightShift) int {
		dx, dy := math.Abs(x.To-x.From), math.Abs(y.To-y.From)
		if dx != dy {
			if dx > dy {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Scorer, y.Scorer)
	})
	if len(l.Shifts) > 3 {
		l.Shifts = l.Shifts[:3]
	}
	return l
}
