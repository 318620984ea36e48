package sim

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// SweepConfig is a whole experiment: every policy at every level of a
// scenario, over Seeds consecutive seeds starting at Seed.
type SweepConfig struct {
	Scenario  *scenario.Scenario
	Policies  []Policy
	Seed      uint64
	Seeds     int
	TracePath string
	// Parallel is how many runs execute at once (≥ 1).
	Parallel int
	// Progress, when set, is called after each run with the number done
	// and the total.
	Progress func(done, total int)
}

// Sweep is the results of a SweepConfig, in (level, policy, seed) order.
type Sweep struct {
	Scenario *scenario.Scenario
	Policies []string
	Levels   []float64
	Seeds    []uint64
	// Runs[level][policy][seed].
	Runs [][][]*Result
}

// RunSweep runs every (level, policy, seed) combination. Runs are
// independent and deterministic, so running them in parallel does not
// change any result. Timelines are recorded for the first seed. When ctx
// is cancelled no further run starts; RunSweep waits for the runs in
// progress and returns ctx.Err().
func RunSweep(ctx context.Context, cfg SweepConfig) (*Sweep, error) {
	sc := cfg.Scenario
	seeds := max(cfg.Seeds, 1)
	sw := &Sweep{Scenario: sc, Levels: sc.Load.Levels}
	for _, p := range cfg.Policies {
		sw.Policies = append(sw.Policies, p.Name)
	}
	for k := range seeds {
		sw.Seeds = append(sw.Seeds, cfg.Seed+uint64(k))
	}
	type job struct{ l, p, k int }
	var jobs []job
	sw.Runs = make([][][]*Result, len(sw.Levels))
	for l := range sw.Levels {
		sw.Runs[l] = make([][]*Result, len(cfg.Policies))
		for p := range cfg.Policies {
			sw.Runs[l][p] = make([]*Result, seeds)
			for k := range seeds {
				jobs = append(jobs, job{l, p, k})
			}
		}
	}
	par := max(cfg.Parallel, 1)
	ch := make(chan job)
	var (
		mu       sync.Mutex
		firstErr error
		done     int
		wg       sync.WaitGroup
	)
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				res, err := Run(RunConfig{
					Scenario:  sc,
					Policy:    cfg.Policies[j.p],
					Level:     sw.Levels[j.l],
					Seed:      sw.Seeds[j.k],
					TracePath: cfg.TracePath,
					Timeline:  j.k == 0,
				})
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("%s at level %v, seed %d: %w", cfg.Policies[j.p].Name, sw.Levels[j.l], sw.Seeds[j.k], err)
				}
				sw.Runs[j.l][j.p][j.k] = res
				done++
				if cfg.Progress != nil {
					cfg.Progress(done, len(jobs))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return sw, nil
}

// Summary is one policy at one level, averaged over seeds.
type Summary struct {
	Policy                     string
	Level                      float64
	TTFTP50, TTFTP90, TTFTP99  float64 // ms
	E2EP50, E2EP99             float64 // ms
	OutputTokensPerSec         float64
	PrefixHitRate              float64
	LoadMax, LoadMin           float64
	Measured, Failed, TimedOut float64
	// Misses are the measured requests the percentiles count at the
	// timeout (Failed + TimedOut); Goodput is in requests/s within SLO.
	Misses, Goodput                   float64
	Issued, Completed, Preemptions    float64
	WeightChanges                     float64
	TTFTP99Min, TTFTP99Max, TTFTP50SD float64
}

// Summarise averages one (level, policy) cell over its seeds: every
// statistic is the mean of the per-seed values.
func Summarise(runs []*Result) Summary {
	var s Summary
	if len(runs) == 0 {
		return s
	}
	s.Policy, s.Level = runs[0].Policy, runs[0].Level
	n := float64(len(runs))
	s.TTFTP99Min = math.Inf(1)
	var p50s []float64
	for _, r := range runs {
		p99 := nz(report.Percentile(r.TTFT, 99))
		p50 := nz(report.Percentile(r.TTFT, 50))
		p50s = append(p50s, p50)
		s.TTFTP50 += p50 / n
		s.TTFTP90 += nz(report.Percentile(r.TTFT, 90)) / n
		s.TTFTP99 += p99 / n
		s.TTFTP99Min = min(s.TTFTP99Min, p99)
		s.TTFTP99Max = max(s.TTFTP99Max, p99)
		s.E2EP50 += nz(report.Percentile(r.E2E, 50)) / n
		s.E2EP99 += nz(report.Percentile(r.E2E, 99)) / n
		s.OutputTokensPerSec += r.OutputTokensPerSec / n
		s.PrefixHitRate += r.PrefixHitRate / n
		s.LoadMax += r.LoadMax / n
		s.LoadMin += r.LoadMin / n
		s.Measured += float64(r.Measured) / n
		s.Failed += float64(r.MeasuredFailed) / n
		s.TimedOut += float64(r.MeasuredTimedOut) / n
		s.Misses += float64(r.Misses) / n
		s.Goodput += nz(r.Goodput) / n
		s.Issued += float64(r.Issued) / n
		s.Completed += float64(r.Completed) / n
		s.Preemptions += float64(r.Preemptions) / n
		s.WeightChanges += float64(r.WeightChanges) / n
	}
	if len(p50s) > 1 {
		var v float64
		for _, x := range p50s {
			v += (x - s.TTFTP50) * (x - s.TTFTP50)
		}
		s.TTFTP50SD = math.Sqrt(v / (n - 1))
	}
	return s
}

func nz(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// Summaries returns Summarise for every cell: [level][policy].
func (sw *Sweep) Summaries() [][]Summary {
	out := make([][]Summary, len(sw.Levels))
	for l := range sw.Levels {
		out[l] = make([]Summary, len(sw.Policies))
		for p := range sw.Policies {
			out[l][p] = Summarise(sw.Runs[l][p])
		}
	}
	return out
}
