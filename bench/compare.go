package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// CompareSim runs sc (as bench played it, with the fleet's size and
// speed: every engine class's step costs divided by the speed too)
// through the simulator: every policy at every level, Repeat seeds
// from Seed, each policy built from its profile (a baseline as the
// simulator builds it).
func CompareSim(ctx context.Context, cfg *Config, sc *scenario.Scenario) (*sim.Sweep, error) {
	s := *sc
	if n := len(cfg.Targets); n > 0 && n != s.Servers {
		s.Servers, s.Classes = n, nil
	}
	if sp := cfg.FleetSpeed; sp > 0 && sp != 1 {
		d := func(x time.Duration) time.Duration { return time.Duration(float64(x) / sp) }
		e := s.EngineConfig()
		s.Engine.StepFixed, s.Engine.StepPerPrefillToken = max(d(e.StepFixed), 1), d(e.StepPerPrefillToken)
		s.Engine.StepPerDecodeSeq, s.Engine.StepPerContextToken = d(e.StepPerDecodeSeq), d(e.StepPerContextToken)
		s.Engine.PrefillAttention1k = d(e.PrefillAttentionPer1k)
		// An engine class's own step costs (0: the base's, scaled above).
		s.Engine.Classes = slices.Clone(s.Engine.Classes)
		for i := range s.Engine.Classes {
			c := &s.Engine.Classes[i].EngineOverrides
			if c.StepFixed != 0 {
				c.StepFixed = max(d(c.StepFixed), 1)
			}
			c.StepPerPrefillToken = d(c.StepPerPrefillToken)
			c.StepPerDecodeSeq, c.StepPerContextToken = d(c.StepPerDecodeSeq), d(c.StepPerContextToken)
			c.PrefillAttention1k = d(c.PrefillAttention1k)
		}
	}
	s.Load.Levels = cfg.Levels
	var pols []sim.Policy
	for _, p := range cfg.Policies {
		if p.Baseline != nil {
			pols = append(pols, *p.Baseline)
			continue
		}
		if p.Profile == nil {
			return nil, fmt.Errorf("policy %s has no profile to simulate", p.Name)
		}
		pols = append(pols, sim.ProfilePolicy(p.Name, "", p.Profile))
	}
	return sim.RunSweep(ctx, sim.SweepConfig{Scenario: &s, Policies: pols, Seed: cfg.Seed, Seeds: cfg.Repeat, TracePath: cfg.TracePath, Parallel: 1})
}

// rankRow is one policy's place in a ranking: its median over runs, and
// the runs' min and max.
type rankRow struct {
	policy string
	v      float64
	lo, hi float64
}

// orderVerdict says how the real ranking agrees with the simulator's:
// "same order"; "order differs within noise" when every pair the two rank
// differently is tied in the simulator (within 0.5 ms, its printed
// precision) or has overlapping real min–max spreads (so another set of
// repeats could order it either way); else "order differs".
func orderVerdict(simRank, realRank []rankRow) string {
	if len(simRank) == len(realRank) && slices.EqualFunc(simRank, realRank, func(a, b rankRow) bool { return a.policy == b.policy }) {
		return "same order"
	}
	realAt := map[string]rankRow{}
	realPos := map[string]int{}
	for i, r := range realRank {
		realAt[r.policy], realPos[r.policy] = r, i
	}
	for i, p := range simRank {
		for _, q := range simRank[i+1:] {
			pi, okp := realPos[p.policy]
			qi, okq := realPos[q.policy]
			if !okp || !okq {
				return "order differs"
			}
			if pi < qi || math.Abs(p.v-q.v) < 0.5 {
				continue
			}
			rp, rq := realAt[p.policy], realAt[q.policy]
			if !(rp.lo <= rq.hi && rq.lo <= rp.hi) {
				return "order differs"
			}
		}
	}
	return "order differs within noise"
}

// ranking orders policies by the median over runs of f (lower first).
func ranking(sums []report.RunSummary, policies []string, level float64, f func(*report.RunSummary) float64) []rankRow {
	var out []rankRow
	for _, p := range policies {
		rs := group(sums, p, level)
		if len(rs) == 0 {
			continue
		}
		c := col(rs, f)
		out = append(out, rankRow{p, c.med, c.lo, c.hi})
	}
	slices.SortStableFunc(out, func(a, b rankRow) int {
		switch {
		case math.IsNaN(a.v) || a.v > b.v:
			return 1
		case math.IsNaN(b.v) || a.v < b.v:
			return -1
		}
		return 0
	})
	return out
}

// WriteRankings writes the simulator's and the real ranking of the
// policies side by side, by TTFT p99 overall and in each phase, per level.
func (rep *Report) WriteRankings(w io.Writer) error {
	if rep.Sim == nil {
		return nil
	}
	real := rep.Summaries()
	simSums := rep.Sim.RunSummaries()
	var names []string
	for _, p := range rep.Config.Policies {
		names = append(names, p.Name)
	}
	var b strings.Builder
	b.WriteString("Policies ranked by median TTFT p99 (ms), best first: the simulator's prediction beside the real run. " +
		"\"Within noise\": every pair ordered differently is tied in the simulator or overlaps in the real runs' min–max.\n\n")
	for _, level := range rep.Config.Levels {
		metrics := []struct {
			name string
			f    func(*report.RunSummary) float64
		}{{"overall", func(s *report.RunSummary) float64 { return val(s.TTFTP99) }}}
		for i, ph := range rep.Scenario.Phases {
			metrics = append(metrics, struct {
				name string
				f    func(*report.RunSummary) float64
			}{"phase " + ph.Name, func(s *report.RunSummary) float64 {
				if i < len(s.Phases) {
					return val(s.Phases[i].TTFTP99)
				}
				return math.NaN()
			}})
		}
		for _, m := range metrics {
			sr, rr := ranking(simSums, names, level, m.f), ranking(real, names, level, m.f)
			verdict := orderVerdict(sr, rr)
			fmt.Fprintf(&b, "%s %g, %s (%s):\n\n| rank | sim | sim p99 | real | real p99 |\n|---|---|---|---|---|\n", rep.Scenario.LevelUnit(), level, m.name, verdict)
			for i := 0; i < max(len(sr), len(rr)); i++ {
				cell := func(rs []rankRow) (string, string) {
					if i >= len(rs) {
						return "", ""
					}
					return rs[i].policy, fmtMs(rs[i].v)
				}
				a, av := cell(sr)
				c, cv := cell(rr)
				fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", i+1, a, av, c, cv)
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
