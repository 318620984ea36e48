package sim

import "github.com/trimtab/trimtab/sim/report"

// Summary returns the run's machine-readable summary.
func (r *Result) Summary() report.RunSummary {
	s := report.RunSummary{
		Scenario: r.Scenario, Level: r.Level, Policy: r.Policy, Seed: r.Seed, Engine: r.Engine,
		TTFTP50: report.Opt(report.Percentile(r.TTFT, 50)), TTFTP90: report.Opt(report.Percentile(r.TTFT, 90)), TTFTP99: report.Opt(report.Percentile(r.TTFT, 99)),
		E2EP50: report.Opt(report.Percentile(r.E2E, 50)), E2EP99: report.Opt(report.Percentile(r.E2E, 99)),
		OutputTokensPerSec: r.OutputTokensPerSec, PrefixHitRatio: r.PrefixHitRate,
		Failed: r.MeasuredFailed, TimedOut: r.MeasuredTimedOut, Misses: r.Misses,
		Goodput: report.Opt(r.Goodput), SLO: report.SummaryOf(r.SLO),
		BusiestPodShare: r.BusiestShare, BusiestPodRatio: r.BusiestRatio,
		Measured: r.Measured, WeightChanges: r.WeightChanges, WatchdogFreezes: r.Freezes,
		Phases:  []report.PhaseSummary{},
		PodLoad: r.PodLoad,
	}
	if r.ContinuationPromptTokens > 0 {
		v := float64(r.ContinuationCachedTokens) / float64(r.ContinuationPromptTokens)
		s.ContinuationHitRatio = &v
	}
	for i, e := range r.Calibration {
		c := report.CalibrationSummary{Endpoint: e.Address, Source: e.Source, Pooled: e.Pooled,
			PrefillTokensPerS: e.Calibration.PrefillTokensPerSecond, PrefillSamples: e.PrefillSamples,
			MeanPromptTokens: e.MeanPromptTokens, UncachedShare: e.UncachedShare, DecodeSecondsPerSeq: e.Calibration.DecodeSecondsPerSeq,
			DecodeFixedSeconds:       e.Calibration.DecodeFixedSeconds,
			EngineDecodeFixedSeconds: e.Calibration.EngineDecodeFixedSeconds, EngineDecodeSecondsPerSeq: e.Calibration.EngineDecodeSecondsPerSeq,
			EngineDecodeSecondsPerContextToken: e.Calibration.EngineDecodeSecondsPerContextToken, EngineDecodeBatchSeconds: e.Calibration.EngineDecodeBatchSeconds}
		if i < len(r.CalibrationTruth) && r.CalibrationTruth[i] > 0 {
			c.TruePrefillTokensPerS = report.Opt(r.CalibrationTruth[i])
			c.Ratio = report.Opt(c.PrefillTokensPerS / r.CalibrationTruth[i])
		}
		s.Calibration = append(s.Calibration, c)
	}
	s.HerdPicks = r.HerdPicks
	for _, st := range r.Retune {
		s.Retune = append(s.Retune, report.RetuneSummary{AtSeconds: st.At.Seconds(), Action: st.Action, Reason: st.Reason,
			Requests: st.Requests, To: st.To})
	}
	s.AdapterLoads = r.AdapterLoads
	for _, c := range r.Classes {
		s.Classes = append(s.Classes, report.ClassSummary{Name: c.Name,
			TTFTP50: report.Opt(report.Percentile(c.TTFT, 50)), TTFTP99: report.Opt(report.Percentile(c.TTFT, 99)), E2EP99: report.Opt(report.Percentile(c.E2E, 99)),
			Goodput: report.Opt(c.Goodput), Measured: c.Measured,
			Issued: c.Issued, Completed: c.Completed, Dropped: c.Dropped, TimedOut: c.TimedOut, Failed: c.Failed})
	}
	if rt := r.Routers; rt != nil {
		s.Routers = &report.RoutersSummary{Replicas: rt.Replicas, Spread: rt.Spread, Sync: rt.SyncOn(),
			SyncDelayMS: float64(rt.SyncDelay) / 1e6, SyncIntervalMS: float64(rt.SyncInterval) / 1e6, SyncPicks: r.SyncPicks}
	}
	for _, p := range r.Phases {
		s.Phases = append(s.Phases, report.PhaseSummary{
			Name: p.Name, RebalanceEntries: p.RebalanceEntries, WarmupRebalanceEntries: p.WarmupRebalanceEntries,
			TTFTP50: report.Opt(report.Percentile(p.TTFT, 50)), TTFTP99: report.Opt(report.Percentile(p.TTFT, 99)), E2EP99: report.Opt(report.Percentile(p.E2E, 99)),
			OutputTokensPerSec: p.OutputTokensPerSec, Measured: p.Measured, OnsetBusiestRatio: p.OnsetBusiestRatio,
			Misses: p.Misses, Goodput: report.Opt(p.Goodput),
		})
	}
	return s
}

// RunSummaries returns every run of the sweep, in (level, policy, seed)
// order.
func (sw *Sweep) RunSummaries() []report.RunSummary {
	var out []report.RunSummary
	for l := range sw.Levels {
		for p := range sw.Policies {
			for _, r := range sw.Runs[l][p] {
				out = append(out, r.Summary())
			}
		}
	}
	return out
}
