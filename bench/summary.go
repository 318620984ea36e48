package bench

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// Stats summarises a set of requests. Latencies are in milliseconds; NaN
// when there are none. TTFT and E2E count every request: one that failed
// (any error kind: an HTTP error, a refused or reset connection, a stream
// cut before [DONE], the client's time-out, the bench stopped) is a miss
// and counts at the client timeout (report.Latencies.Miss), its TTFT at its
// first token when one came earlier, so a policy whose requests fail
// cannot read fast. ITL is over the successful requests.
type Stats struct {
	// Failed counts the misses.
	Requests, Failed, Tokens  int
	TTFTP50, TTFTP90, TTFTP99 float64
	E2EP50, E2EP99            float64
	ITLP50, ITLP99            float64
	// TokPerSec is Tokens ÷ the window given to Summarise (NaN for 0).
	TokPerSec float64
	// Good counts the successful requests within the SLO given to
	// Summarise; Goodput is Good ÷ the window (NaN for 0).
	Good    int
	Goodput float64
	// Cached and Prompt are the prompt tokens of successful requests whose
	// server reported cached_tokens.
	Cached, Prompt int
	Errors         map[string]int
	ByEndpoint     map[string]int

	// ContCached and ContPrompt are Cached and Prompt of the agent
	// sessions' continuations.
	ContCached, ContPrompt int
}

func msOf(d time.Duration) float64 { return float64(d) / 1e6 }

// Summarise computes Stats over reqs: tokens per second and goodput over
// window, misses counted at timeout, goodput judged against slo.
func Summarise(reqs []Request, window, timeout time.Duration, slo scenario.SLO) Stats {
	s := Stats{Errors: map[string]int{}, ByEndpoint: map[string]int{}}
	var lat report.Latencies
	var itl []float64
	for i := range reqs {
		r := &reqs[i]
		s.Requests++
		if r.Err != "" {
			s.Failed++
			s.Errors[r.Err]++
			lat.Miss(r.TTFT, timeout)
			continue
		}
		s.Tokens += r.Tokens
		s.ByEndpoint[r.Endpoint]++
		lat.Complete(r.TTFT, r.E2E, r.Tokens, slo)
		for _, g := range r.Gaps {
			itl = append(itl, msOf(g))
		}
		if r.CachedKnown {
			s.Cached += r.CachedTokens
			s.Prompt += r.PromptTokens
			if r.Continuation {
				s.ContCached += r.CachedTokens
				s.ContPrompt += r.PromptTokens
			}
		}
	}
	lat.Sort()
	sort.Float64s(itl)
	s.TTFTP50, s.TTFTP90, s.TTFTP99 = report.Percentile(lat.TTFT, 50), report.Percentile(lat.TTFT, 90), report.Percentile(lat.TTFT, 99)
	s.E2EP50, s.E2EP99 = report.Percentile(lat.E2E, 50), report.Percentile(lat.E2E, 99)
	s.ITLP50, s.ITLP99 = report.Percentile(itl, 50), report.Percentile(itl, 99)
	s.Good, s.Goodput = lat.Good, math.NaN()
	s.TokPerSec = math.NaN()
	if window > 0 {
		s.TokPerSec = float64(s.Tokens) / window.Seconds()
		s.Goodput = lat.Goodput(window)
	}
	return s
}

// stats is Summarise with the run's timeout and SLO.
func (r *RunResult) stats(reqs []Request, window time.Duration) Stats {
	return Summarise(reqs, window, r.Timeout, r.SLO)
}

// ContinuationHitRatio is ContCached ÷ ContPrompt — the simulator's
// continuation_hit_ratio —, or NaN without continuations.
func (s Stats) ContinuationHitRatio() float64 {
	if s.ContPrompt == 0 {
		return math.NaN()
	}
	return float64(s.ContCached) / float64(s.ContPrompt)
}

// CachedRatio is Cached ÷ Prompt, or NaN when no server reported it.
func (s Stats) CachedRatio() float64 {
	if s.Prompt == 0 {
		return math.NaN()
	}
	return float64(s.Cached) / float64(s.Prompt)
}

func ptr(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

// measured returns the run's measured requests, of one phase (−1: all).
func (r *RunResult) measured(phase int) []Request {
	var out []Request
	for _, q := range r.Requests {
		if q.Measured && (phase < 0 || q.Phase == phase) {
			out = append(out, q)
		}
	}
	return out
}

// busiest returns, over pod samples in [from, to), the busiest pod's
// share of the time-averaged load and its load ÷ the pool's mean (0, 0
// without samples or load).
func (r *RunResult) busiest(from, to time.Duration) (share, ratio float64) {
	var sum []float64
	for _, s := range r.Pods {
		if s.T < from || s.T >= to {
			continue
		}
		if sum == nil {
			sum = make([]float64, len(s.Load))
		}
		for i, l := range s.Load {
			sum[i] += l
		}
	}
	total, top := 0.0, 0.0
	for _, v := range sum {
		total += v
		top = max(top, v)
	}
	if total == 0 {
		return 0, 0
	}
	return top / total, top / (total / float64(len(sum)))
}

// prefixHit is Δhits ÷ Δqueries of the pods' prefix caches over the
// measurement window (0 when the servers export no such counters).
func (r *RunResult) prefixHit() float64 {
	var a, b *PodSample
	for i := range r.Pods {
		s := &r.Pods[i]
		if a == nil && s.T >= r.Warm {
			a = s
		}
		if s.T <= r.End {
			b = s
		}
	}
	if a == nil || b == nil || b.Queries <= a.Queries {
		return 0
	}
	return (b.Hits - a.Hits) / (b.Queries - a.Queries)
}

// entries counts the router's transitions out of calm (to rebalance or
// frozen) in [from, to), and transitions into frozen.
func (r *RunResult) entries(from, to time.Duration) (calmExits, freezes int) {
	for _, c := range r.ModeChanges {
		if c.T < from || c.T >= to {
			continue
		}
		if c.From == "calm" && (c.To == "rebalance" || c.To == "frozen") {
			calmExits++
		}
		if c.To == "frozen" {
			freezes++
		}
	}
	return calmExits, freezes
}

// Summary returns the run in the schema of `trimtab sim`'s summary.json,
// with cached_token_ratio and errors filled, continuation_hit_ratio from
// the servers' reported usage of agent continuations and herd_picks from
// the router's metrics. Its percentiles count the
// misses at the run's timeout (Stats) and misses counts them; goodput is
// over the measurement window against the run's SLO, as in sim.
func (r *RunResult) Summary(scenario string) report.RunSummary {
	win := r.End - r.Warm
	st := r.stats(r.measured(-1), win)
	share, ratio := r.busiest(r.Warm, r.End)
	_, fz := r.entries(0, r.End+time.Hour)
	s := report.RunSummary{
		Scenario: scenario, Level: r.Level, Policy: r.Policy, Seed: r.Seed,
		TTFTP50: ptr(st.TTFTP50), TTFTP90: ptr(st.TTFTP90), TTFTP99: ptr(st.TTFTP99),
		E2EP50: ptr(st.E2EP50), E2EP99: ptr(st.E2EP99),
		OutputTokensPerSec: nz(st.TokPerSec), PrefixHitRatio: r.prefixHit(),
		Failed: st.Failed - st.Errors[ErrTimeout], TimedOut: st.Errors[ErrTimeout], Misses: st.Failed,
		Goodput: ptr(st.Goodput), SLO: report.SummaryOf(r.SLO),
		BusiestPodShare: share, BusiestPodRatio: ratio,
		Measured: st.Requests, WeightChanges: r.WeightVersions, WatchdogFreezes: fz,
		CachedTokenRatio: ptr(st.CachedRatio()), Errors: st.Errors,
		Phases: []report.PhaseSummary{}, ContinuationHitRatio: ptr(st.ContinuationHitRatio()), HerdPicks: r.HerdPicks,
	}
	for i, ph := range r.Phases {
		from, to := max(ph.Start, r.Warm), min(ph.End, r.End)
		pst := r.stats(r.measured(i), max(to-from, 0))
		in, _ := r.entries(from, to)
		warm, _ := r.entries(ph.Start, min(ph.End, r.Warm))
		_, onset := r.busiest(ph.Start, ph.Start+sim.OnsetWindow)
		s.Phases = append(s.Phases, report.PhaseSummary{
			Name: ph.Name, RebalanceEntries: in, WarmupRebalanceEntries: warm,
			TTFTP50: ptr(pst.TTFTP50), TTFTP99: ptr(pst.TTFTP99), E2EP99: ptr(pst.E2EP99),
			OutputTokensPerSec: nz(pst.TokPerSec), Measured: pst.Requests, OnsetBusiestRatio: onset,
			Misses: pst.Failed, Goodput: ptr(pst.Goodput),
		})
	}
	s.Classes = r.classes(win)
	return s
}

// classes returns each request class's summary, as the simulator's
// (report.ClassSummary): latencies and goodput (over win, against the run's
// SLO) of its measured requests, a miss counting at its own timeout; the
// counts over all of its requests — dropped when the router's flow
// control refused it (X-Trimtab-Drop-Reason, counted by reason), timed out at the client's
// timeout, failed otherwise. Nil when the scenario names no class.
func (r *RunResult) classes(win time.Duration) []report.ClassSummary {
	var out []report.ClassSummary
	for i, name := range r.Classes {
		c := report.ClassSummary{Name: name}
		var lat report.Latencies
		var server, front []float64 // ms; see report.ClassSummary
		for j := range r.Requests {
			q := &r.Requests[j]
			if q.Class != i {
				continue
			}
			c.Issued++
			switch {
			case q.Err == "":
				c.Completed++
			case q.DropReason != "":
				c.Dropped++
				c.DropReasons = countReason(c.DropReasons, q.DropReason)
			case q.Err == ErrTimeout:
				c.TimedOut++
			default:
				c.Failed++
			}
			if !q.Measured {
				continue
			}
			c.Measured++
			if q.Err == "" {
				lat.Complete(q.TTFT, q.E2E, q.Tokens, r.SLO)
				if q.ServerTTFT > 0 && q.ServerTTFT <= q.TTFT {
					server = append(server, msOf(q.ServerTTFT))
					front = append(front, msOf(q.TTFT-q.ServerTTFT))
				}
			} else {
				lat.Miss(q.TTFT, q.Timeout)
				if q.DropReason == "" { // a refusal never reached a server
					server = append(server, lat.TTFT[len(lat.TTFT)-1]) // as Miss counts it
				}
			}
		}
		lat.Sort()
		c.TTFTP50, c.TTFTP99 = ptr(report.Percentile(lat.TTFT, 50)), ptr(report.Percentile(lat.TTFT, 99))
		if len(front) > 0 { // a completed request reported its server's TTFT
			slices.Sort(server)
			slices.Sort(front)
			c.ServerTTFTP99, c.RouterTTFTP99 = ptr(report.Percentile(server, 99)), ptr(report.Percentile(front, 99))
		}
		c.E2EP99 = ptr(report.Percentile(lat.E2E, 99))
		if win > 0 {
			c.Goodput = ptr(lat.Goodput(win))
		}
		out = append(out, c)
	}
	return out
}

// Bounds of a class's drop reasons, which an external router's header
// sets: reasons past maxDropReasons distinct ones count as "other", and a
// reason is cut to maxDropReasonLen bytes.
const (
	maxDropReasons   = 8
	maxDropReasonLen = 32
)

// countReason adds one drop for reason to m (made when nil) and returns m.
func countReason(m map[string]int, reason string) map[string]int {
	if m == nil {
		m = make(map[string]int)
	}
	if len(reason) > maxDropReasonLen {
		reason = reason[:maxDropReasonLen]
	}
	if _, ok := m[reason]; !ok && len(m) >= maxDropReasons-1 && reason != "other" {
		reason = "other"
	}
	m[reason]++
	return m
}

func nz(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// Summaries returns every run's summary, in the order they ran.
func (rep *Report) Summaries() []report.RunSummary {
	out := make([]report.RunSummary, 0, len(rep.Runs))
	for _, r := range rep.Runs {
		out = append(out, r.Summary(rep.Scenario.Name))
	}
	return out
}

// Lateness returns the p50, p99 and max of how late requests left against
// their schedule (closed loop: when the client was due to send).
func (r *RunResult) Lateness() (p50, p99, worst time.Duration) {
	var ds []float64
	for _, q := range r.Requests {
		ds = append(ds, float64(max(q.Sent-q.Scheduled, 0)))
	}
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return time.Duration(report.Percentile(ds, 50)), time.Duration(report.Percentile(ds, 99)), time.Duration(ds[len(ds)-1])
}
