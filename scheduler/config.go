package scheduler

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Config holds the scheduler's own settings.
type Config struct {
	// Seed seeds tie-breaks and weighted-random draws.
	Seed uint64 `mapstructure:"seed"`
	// MaxFallbacks is how many fallback endpoints a decision carries, after
	// the chosen one (default 2).
	MaxFallbacks int `mapstructure:"max_fallbacks"`
	// Outlier is outlier ejection of failing endpoints.
	Outlier OutlierConfig `mapstructure:"outlier"`
	// Guard is the load guard every pick runs under when the weights in
	// force carry none (see GuardConfig).
	Guard GuardConfig `mapstructure:"guard"`
	// Probe is calibration probing: while the calibrator lacks prefill
	// observations of a class of endpoints (Calibration.Probes), an idle
	// member is now and then sent a request routing would have sent
	// elsewhere, so a pod priced as slow is still measured. Off by
	// default; configs/adaptive.yaml probes every 2 s at most, within
	// wait factor 1, share 0.002 (docs/calibration.md, "Probing").
	Probe ProbeConfig `mapstructure:"probe"`
}

// ProbeConfig is calibration probing (YAML scheduler.probe). Routing that
// prices an endpoint as slow sends it nothing, so nothing the router
// observes would tell the calibrator it is faster than priced. With
// Interval > 0, a pick whose chosen endpoint's calibration wants no
// requests may go instead to a candidate whose calibration does
// (Calibration.Probes, its share of what its class lacks of min_samples
// prefill points), when that candidate is idle, was not probed in the
// last Interval, and would not make the request wait for its first token
// more than WaitFactor times as long as the choice — or, failing that
// last test, once in 1/Share such picks. So probes are bounded in number
// (what the calibrator asks for, which stops once a class's window holds
// 2 × min_samples requests) and in what each costs. docs/calibration.md,
// "Probing".
type ProbeConfig struct {
	// Interval is the least time between two probes of one endpoint
	// (0: no probing, the default; else 100ms…1h). Probes go only to an
	// endpoint with no request in flight, and only while its calibration
	// asks for them.
	Interval time.Duration `mapstructure:"interval"`
	// WaitFactor bounds a probe's expected wait for its first token at
	// this multiple of the choice's, by the wait bound's measure: queued
	// and own uncached prompt tokens over the prefill rate (1…100;
	// default 1: a probe never expects to wait longer than the choice).
	WaitFactor float64 `mapstructure:"wait_factor"`
	// Share is the share of picks that may be probes expected to wait
	// longer than WaitFactor allows: one in 1/Share of the picks that
	// had a candidate to probe but for the wait, for classes no request
	// reaches within the factor (slow pods next to fast idle ones).
	// 0 (the default: none) or 0.000001…0.1.
	Share float64 `mapstructure:"share"`
}

// Validate checks the probe settings; errors name the field.
func (c ProbeConfig) Validate() error {
	switch {
	case c.Interval != 0 && (c.Interval < 100*time.Millisecond || c.Interval > time.Hour):
		return fmt.Errorf("probe.interval: %v, want 0 (off) or 100ms…1h", c.Interval)
	case c.WaitFactor != 0 && !(c.WaitFactor >= 1 && c.WaitFactor <= 100):
		return fmt.Errorf("probe.wait_factor: %v, want 1…100", c.WaitFactor)
	case c.Interval != 0 && c.WaitFactor == 0:
		return errors.New("probe.wait_factor: 0 with probing on (probe.interval set), want 1…100")
	case c.Share != 0 && !(c.Share >= 1e-6 && c.Share <= 0.1):
		return fmt.Errorf("probe.share: %v, want 0 or 0.000001…0.1", c.Share)
	case c.Share != 0 && c.Interval == 0:
		return errors.New("probe.share: set while probe.interval is 0 (probing off); set an interval or drop the share")
	}
	return nil
}

// DefaultConfig returns the defaults: seed 0, two fallbacks, outlier
// ejection on with DefaultOutlierConfig, the guard off (DefaultGuardConfig),
// probing off (wait factor 1 for when an interval turns it on).
func DefaultConfig() Config {
	return Config{MaxFallbacks: 2, Outlier: DefaultOutlierConfig(), Guard: DefaultGuardConfig(), Probe: ProbeConfig{WaitFactor: 1}}
}

// Validate checks the config.
func (c Config) Validate() error {
	if c.MaxFallbacks < 0 || c.MaxFallbacks > 16 {
		return fmt.Errorf("max_fallbacks: %d, want 0…16", c.MaxFallbacks)
	}
	if err := c.Guard.Validate(); err != nil {
		return err
	}
	if err := c.Probe.Validate(); err != nil {
		return err
	}
	return c.Outlier.Validate()
}

// GuardConfig is the scheduler's load guard (YAML scheduler.guard), a
// setting of any profile, static or adaptive. With Factor > 0 every pick
// whose weights carry no guard of their own (Weights.Guard.Factor 0: the
// profile weights of static mode) runs under Guard{Factor, Slack}, and
// herd pressure is measured against the weights in force: a pick whose
// best-scored candidate is over the bound (or over the crowd bound while
// it shares the request's prefix) charges that candidate a herd pick
// (Endpoint.HerdPicks), so the herd signal can be watched before the
// control loop is enabled. Weights that carry a guard (the adaptive
// loop's) use their own; the profile loader gives both the same values.
// docs/adaptive.md, "The load guard", has the defaults' reasons.
type GuardConfig struct {
	// Factor is the bound's factor c ≥ 1; 0 (the default) turns the
	// scheduler's guard off.
	Factor float64 `mapstructure:"factor"`
	// Slack is s ≥ 0, in requests per unit of capacity. Default 6.
	Slack float64 `mapstructure:"slack"`
	// CrowdFactor and CrowdSlack bound a crowded prefix (Weights.Crowd);
	// CrowdFactor 0 turns crowd accounting off. Defaults 1.5 and 3.
	CrowdFactor float64 `mapstructure:"crowd_factor"`
	CrowdSlack  float64 `mapstructure:"crowd_slack"`
	// Unit is what the bound counts (unit): GuardRequests (the default)
	// compares router-local in-flight requests per unit of capacity;
	// GuardSeconds compares each candidate's expected wait, its queued
	// uncached prompt tokens (this request's included) ÷ its prefill
	// rate, so Slack and CrowdSlack are seconds (see Guard). The unit
	// applies to every guard the scheduler runs, the adaptive loop's too.
	Unit string `mapstructure:"unit"`
	// PrefillTokensPerSecond is the prefill rate of an endpoint of
	// capacity 1 that has no Calibration, for the seconds unit
	// (prefill_tokens_per_second). Default 13,100, the time-cost
	// scorer's prior (scorers.TimeCostConfig).
	PrefillTokensPerSecond float64 `mapstructure:"prefill_tokens_per_second"`
	// WaitFactor and WaitSlack bound each candidate's expected wait for
	// the request's first token: the uncached prompt tokens queued ahead
	// on it (this router's, plus other replicas' pending bytes ÷ 4) and
	// the request's own uncached tokens there, over its learned prefill
	// rate (else PrefillTokensPerSecond × capacity). A candidate whose
	// wait exceeds max(WaitFactor × the smallest wait among the
	// candidates, the smallest + WaitSlack seconds) ranks after every
	// candidate within it, whatever its prefix score. It catches a pod
	// held by one very long prefill (a 100,000-token prompt takes
	// seconds), which a bound on request counts cannot see, and charges
	// no herd pick. It runs where a guard runs (factor > 0, or the
	// adaptive loop's), in either unit; a profile that sets it with no
	// guard is refused. WaitFactor 0 (the default) turns it off;
	// WaitSlack defaults to 3 seconds. configs/adaptive.yaml sets
	// WaitFactor 4.
	WaitFactor float64 `mapstructure:"wait_factor"`
	WaitSlack  float64 `mapstructure:"wait_slack"`
	// JoinFactor bounds the wait of a request that would join a prefill
	// in progress: a candidate whose match is a prompt picked onto it that
	// has not answered yet (its first prefill of a new prefix is queued
	// or running; Match.Joining, which the prefix scorer reports with
	// learn: join_new while the candidates' caches have room for another
	// copy, prefix.join_spread_fill) ranks after the other candidates
	// when its expected wait exceeds JoinFactor × the smallest wait, so
	// the request computes the prefix again where that is sooner. Where
	// the caches are full a copy evicts another prefix and the join
	// stands. It runs where the wait bound runs, needs a scorer that
	// reports joins (a profile without one is refused), and makes the
	// scheduler run the profile's MatchProducer at every pick, so a
	// wait_factor beside it counts uncached tokens even in a profile with
	// no other match consumer. 0 (the default) turns it off.
	// configs/adaptive.yaml sets 1.5 (docs/adaptive.md, "Bounding a join
	// by its wait").
	JoinFactor float64 `mapstructure:"join_factor"`
}

// Guard units (GuardConfig.Unit).
const (
	GuardRequests = "requests"
	GuardSeconds  = "seconds"
)

// The seconds unit's slacks when a profile writes none: the requests
// unit's 6 and 3 requests at SMG's mean prefill of 1,024 tokens
// (docs/field-policies.md) and the prior 13,100 tokens/s, rounded:
// 6 × 1,024 ÷ 13,100 ≈ 0.47 s and half that.
const (
	DefaultGuardSlackSeconds = 0.5
	DefaultCrowdSlackSeconds = 0.25
)

// DefaultWaitSlackSeconds is GuardConfig.WaitSlack's default. With
// wait_factor 4, a slack of 1 s breaks the L4's hot-prefix burst at 40
// req/s (TTFT p99 6.4 s against 0.9 s in three minutes) and 2 s breaks
// it at the scenario's full length (+20.5 %); 3 s holds both and keeps
// the Mooncake trace's gains, which 4 s gives up on the H100 8B
// (docs/adaptive.md, "The wait bound", has the whole suite).
const DefaultWaitSlackSeconds = 3.0

// maxWaitSlack bounds GuardConfig.WaitSlack (an hour) and maxWaitFactor
// GuardConfig.WaitFactor and JoinFactor.
const (
	maxWaitSlack  = 3600.0
	maxWaitFactor = 1e6
)

// DefaultGuardConfig returns the guard off, with the slack and crowd
// bound the adaptive loop's guard uses (factor 2.5 there), in requests.
func DefaultGuardConfig() GuardConfig {
	return GuardConfig{Slack: 6, CrowdFactor: 1.5, CrowdSlack: 3, Unit: GuardRequests, PrefillTokensPerSecond: 13100, WaitSlack: DefaultWaitSlackSeconds}
}

// seconds reports whether the guard counts seconds.
func (g GuardConfig) seconds() bool { return g.Unit == GuardSeconds }

// measuresWaits reports whether a guarded pick computes each candidate's
// expected wait (Scheduler.wait): for the seconds unit or the wait bound
// (WaitFactor, JoinFactor).
func (g GuardConfig) measuresWaits() bool {
	return g.seconds() || g.WaitFactor > 0 || g.JoinFactor > 0
}

// Validate checks the guard; errors name the field under scheduler.
func (g GuardConfig) Validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !(g.Factor == 0 || g.Factor >= 1) || !finite(g.Factor):
		return fmt.Errorf("guard.factor: must be 0 (off) or a finite number ≥ 1, got %v", g.Factor)
	case !(g.Slack >= 0) || !finite(g.Slack):
		return fmt.Errorf("guard.slack: must be a finite number ≥ 0, got %v", g.Slack)
	case !(g.CrowdFactor == 0 || g.CrowdFactor >= 1) || !finite(g.CrowdFactor):
		return fmt.Errorf("guard.crowd_factor: must be 0 (off) or a finite number ≥ 1, got %v", g.CrowdFactor)
	case !(g.CrowdSlack >= 0) || !finite(g.CrowdSlack):
		return fmt.Errorf("guard.crowd_slack: must be a finite number ≥ 0, got %v", g.CrowdSlack)
	case g.Unit != "" && g.Unit != GuardRequests && g.Unit != GuardSeconds:
		return fmt.Errorf("guard.unit: must be %q or %q, got %q", GuardRequests, GuardSeconds, g.Unit)
	case g.seconds() && !(g.PrefillTokensPerSecond > 0 && g.PrefillTokensPerSecond <= 1e9):
		return fmt.Errorf("guard.prefill_tokens_per_second: must be in (0, 1e9] with unit %q, got %v", GuardSeconds, g.PrefillTokensPerSecond)
	case !(g.WaitFactor == 0 || g.WaitFactor >= 1 && g.WaitFactor <= maxWaitFactor):
		return fmt.Errorf("guard.wait_factor: must be 0 (off) or a number in [1, %v], got %v", maxWaitFactor, g.WaitFactor)
	case !(g.WaitSlack >= 0 && g.WaitSlack <= maxWaitSlack):
		return fmt.Errorf("guard.wait_slack: must be a number of seconds in [0, %v], got %v", maxWaitSlack, g.WaitSlack)
	case g.WaitFactor > 0 && !(g.PrefillTokensPerSecond > 0 && g.PrefillTokensPerSecond <= 1e9):
		return fmt.Errorf("guard.prefill_tokens_per_second: must be in (0, 1e9] with wait_factor set, got %v", g.PrefillTokensPerSecond)
	case !(g.JoinFactor == 0 || g.JoinFactor >= 1 && g.JoinFactor <= maxWaitFactor):
		return fmt.Errorf("guard.join_factor: must be 0 (off) or a number in [1, %v], got %v", maxWaitFactor, g.JoinFactor)
	case g.JoinFactor > 0 && !(g.PrefillTokensPerSecond > 0 && g.PrefillTokensPerSecond <= 1e9):
		return fmt.Errorf("guard.prefill_tokens_per_second: must be in (0, 1e9] with join_factor set, got %v", g.PrefillTokensPerSecond)
	}
	return nil
}

// ValidateScorers checks the guard against the profile's scorers: a
// JoinFactor needs one that reports joins in progress (JoinReporter), or
// the bound would never act. Errors name the field under scheduler.
func (g GuardConfig) ValidateScorers(entries []ScorerEntry) error {
	if g.JoinFactor > 0 && !slices.ContainsFunc(entries, func(e ScorerEntry) bool {
		r, ok := e.Scorer.(JoinReporter)
		return ok && r.ReportsJoins()
	}) {
		return fmt.Errorf("guard.join_factor: %v needs a scorer that reports joins in progress; set learn: join_new and join_spread_fill on a prefix scorer", g.JoinFactor)
	}
	return nil
}

// Guards returns the guard and the crowd bound the config describes; both
// zero when Factor is 0, the crowd bound zero when CrowdFactor is 0.
func (g GuardConfig) Guards() (guard, crowd Guard) {
	if g.Factor <= 0 {
		return Guard{}, Guard{}
	}
	guard = Guard{Factor: g.Factor, Slack: g.Slack}
	if g.CrowdFactor > 0 {
		crowd = Guard{Factor: g.CrowdFactor, Slack: g.CrowdSlack}
	}
	return guard, crowd
}
