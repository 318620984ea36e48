package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/scenario"
)

// Target is one model server behind the router.
type Target struct {
	// Address is host:port.
	Address string
	// Name labels the pod in reports (default: Address).
	Name string
	// Model is the model it serves; Capacity its relative size (0: 1).
	Model    string
	Capacity float64
}

// Router is a running router in front of the targets.
type Router struct {
	// ProxyURL is the OpenAI-compatible base URL ("http://127.0.0.1:8080").
	ProxyURL string
	// AdminURL is the admin server's base URL ("" when there is none:
	// no mode timeline is recorded).
	AdminURL string
	// Stop stops the router and waits for it (nil: nothing to stop).
	Stop func() error
}

// RouterSpec is what a router runs for one run.
type RouterSpec struct {
	// Policy names the policy.
	Policy string
	// Profile is the router's profile, its scheduler seed set to the
	// run's.
	Profile *configs.File
	// Baseline, when set, replaces the profile's scorers: the router
	// routes with the scheduler Baseline.Build(Seed, Scenario) makes.
	Baseline *sim.Policy
	Seed     uint64
	Scenario *scenario.Scenario
}

// StartRouterFunc starts a router running spec in front of targets;
// bench then waits for its admin server's /readyz to report every target
// fresh. `trimtab bench` wires it to an in-process `trimtab serve`.
type StartRouterFunc func(ctx context.Context, spec RouterSpec, targets []Target) (*Router, error)

// Policy is one routing policy to measure.
type Policy struct {
	// Name labels the policy in reports.
	Name string
	// Profile is the router's profile; nil measures Config.RouterURL as it
	// is.
	Profile *configs.File
	// Baseline, when set, is a simulator baseline that is not a profile
	// (round-robin, sglang-switch): the router routes with the scheduler
	// Baseline.Build makes and takes its other settings from Profile.
	Baseline *sim.Policy
}

// Config is one bench: a scenario under every policy at every level,
// Repeat times, interleaved.
type Config struct {
	// Scenario is played in wall-clock time, its durations multiplied by
	// TimeScale.
	Scenario *scenario.Scenario
	// TimeScale scales scenario time (0.1 plays ten minutes in one); > 0.
	TimeScale float64
	// Policies are run in this order in the first repeat; repeat k (from
	// 0) starts at policy k mod len(Policies) and goes round.
	Policies []Policy
	// Levels are the load levels to run (default: the scenario's headline).
	Levels []float64
	// Repeat is how many times each (level, policy) runs; ≥ 1.
	Repeat int
	// Seed is the workload seed of the first repeat; repeat k uses Seed+k,
	// the same for every policy, so a repeat compares like with like.
	Seed uint64
	// TracePath overrides a trace scenario's file.
	TracePath string
	// Targets are the servers behind the router; their /metrics are
	// scraped for load and prefix-cache hits. May be empty with RouterURL.
	Targets []Target
	// RouterURL and RouterAdminURL name an external router to measure
	// (policies then need no profile).
	RouterURL, RouterAdminURL string
	// ScrapeEvery is how often the targets' /metrics are read (default
	// 500ms).
	ScrapeEvery time.Duration
	// ProgressEvery is how often Deps.Progress is called (default 1s).
	ProgressEvery time.Duration
	// CompareSim also runs the scenario through the simulator with
	// FleetEngine (see CompareSim).
	CompareSim bool
	// FleetSpeed is the targets' speed-up over the scenario's engine
	// model (the fakeserver time scale), used by CompareSim; default 1.
	FleetSpeed float64
}

// Deps are the bench's collaborators.
type Deps struct {
	// LaunchRouter starts a router for a policy with a profile. Required
	// unless RouterURL is set.
	LaunchRouter StartRouterFunc
	// Salt returns a fresh per-run prompt salt, never 0; required. It must
	// differ between bench invocations (cmd draws it from a random source).
	Salt func() uint64
	// Clock times everything; nil means the real clock.
	Clock clock.WithTicker
	// Client sends the requests; nil means a client with enough idle
	// connections for the scenario.
	Client *http.Client
	// CPU returns this process's CPU time so far (user + system); nil
	// leaves generator CPU unreported.
	CPU func() time.Duration
	// Progress receives a snapshot every ProgressEvery during a run.
	Progress func(Live)
	// Logger receives warnings and each router's addresses; nil discards.
	Logger *slog.Logger
}

// DefaultScrapeEvery is how often the targets' metrics are read.
const DefaultScrapeEvery = 500 * time.Millisecond

// Validate checks the config against its dependencies.
func (c *Config) Validate(d *Deps) error {
	switch {
	case c.Scenario == nil:
		return errors.New("bench: no scenario")
	case !(c.TimeScale > 0):
		return fmt.Errorf("bench: time scale %v, want > 0", c.TimeScale)
	case c.Repeat < 1:
		return fmt.Errorf("bench: repeat %d, want ≥ 1", c.Repeat)
	case len(c.Policies) == 0:
		return errors.New("bench: no policy")
	case d.Salt == nil:
		return errors.New("bench: Deps.Salt is required")
	case c.ScrapeEvery < 0 || c.ProgressEvery < 0:
		return errors.New("bench: scrape and progress intervals must be ≥ 0")
	}
	for _, p := range c.Policies {
		if p.Profile == nil && c.RouterURL == "" {
			return fmt.Errorf("bench: policy %q has no profile and no router URL is given", p.Name)
		}
		if p.Profile != nil && d.LaunchRouter == nil {
			return fmt.Errorf("bench: policy %q needs Deps.LaunchRouter", p.Name)
		}
	}
	for _, l := range c.Levels {
		if !(l > 0) {
			return fmt.Errorf("bench: level %v, want > 0", l)
		}
	}
	return nil
}
