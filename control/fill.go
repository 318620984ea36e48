package control

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/scheduler"
)

// FillConfig is a profile's adaptive.fill section: the law that adds
// weight to the calm weights while the pool's prefix caches are full
// (docs/adaptive.md, "The fill law"). While the caches have room a
// prefix's requests keep to the pods that hold it and any pod can take a
// new one; once they are full, every new copy evicts another prefix, the
// pods holding a prefix are the only cheap places for its requests, and
// which of them a request waits least on — seconds of prefill queued
// ahead, the time-cost scorer — decides its time to first token. The
// input is the prefix index's fill (scheduler.FillReporter): the share of
// each endpoint's cache the router's index holds, which counts the blocks
// a server keeps after their requests finished, as its scraped KV-cache
// use does not.
type FillConfig struct {
	// Enabled turns the law on; it needs adaptive.enabled and a scorer
	// that reports the index's fill (the prefix scorer). Default false.
	Enabled bool `mapstructure:"enabled"`
	// Add is scorer name → weight added to that scorer's calm weight
	// while the caches count as full (after the trade law's blend). Each
	// name is a scorer of the profile, matched without regard to case;
	// each weight is in [0, 1e6].
	Add map[string]float64 `mapstructure:"add"`
	// On is the index fill, in (0,1], at or above which the caches count
	// as full. Default 0.8: above the prefix scorer's join_spread_fill in
	// the shipped profile (0.7), below which the join bound spreads a
	// long-waiting joiner (a copy is cheap while there is room); 0.7 read
	// the same on the ladder and worse on the Mooncake trace at full length
	// (docs/adaptive.md, "The fill law").
	On float64 `mapstructure:"on"`
	// Off is the fill at or below which a full pool counts as having
	// room again, in [0, On). Default 0.7: the band keeps a fill that
	// hovers near On from flipping the weights.
	Off float64 `mapstructure:"off"`
	// Interval is the time between evaluations, 1s…1h. Default 5s: caches
	// fill over minutes.
	Interval time.Duration `mapstructure:"interval"`
}

// DefaultFillConfig returns the documented defaults (off).
func DefaultFillConfig() FillConfig {
	return FillConfig{On: 0.8, Off: 0.7, Interval: 5 * time.Second}
}

// maxFillAdds bounds the fill.add map, like trade.weights.
const maxFillAdds = 64

// Validate checks the section alone; errors name the field as
// adaptive.fill.<key>. CheckProfile checks the names against the profile.
func (c FillConfig) Validate() error {
	const p = "adaptive.fill."
	switch {
	case !c.Enabled:
		return nil
	case len(c.Add) == 0:
		return errors.New(p + "add: nothing to add; name at least one scorer and the weight to add (time-cost: 1 in the shipped profile)")
	case len(c.Add) > maxFillAdds:
		return fmt.Errorf(p+"add: %d scorers, want at most %d", len(c.Add), maxFillAdds)
	case !(c.On > 0 && c.On <= 1):
		return fmt.Errorf(p+"on: must be in (0,1], got %v", c.On)
	case !(c.Off >= 0 && c.Off < c.On):
		return fmt.Errorf(p+"off: must be in [0, on (%v)), got %v", c.On, c.Off)
	case c.Interval < time.Second || c.Interval > time.Hour:
		return fmt.Errorf(p+"interval: must be 1s…1h, got %v", c.Interval)
	}
	for _, name := range c.names() {
		if w := c.Add[name]; !(w >= 0 && w <= maxTradeWeight) || math.IsNaN(w) {
			return fmt.Errorf(p+"add.%s: must be in [0, %g], got %v", name, float64(maxTradeWeight), w)
		}
	}
	return nil
}

// weight returns the weight added to the scorer called name: its key's,
// else that of the first key (in sorted order) equal to it without regard
// to case.
func (c FillConfig) weight(name string) (float64, bool) {
	if w, ok := c.Add[name]; ok {
		return w, true
	}
	for _, k := range c.names() {
		if strings.EqualFold(k, name) {
			return c.Add[k], true
		}
	}
	return 0, false
}

// names returns the Add keys sorted, so errors are deterministic.
func (c FillConfig) names() []string {
	out := make([]string, 0, len(c.Add))
	for n := range c.Add {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// checkFill reports whether every added weight names one of the profile's
// scorers and, with the loop on, whether a scorer reports the index's
// fill (the law's input).
func (c Config) checkFill(profile []scheduler.ScorerEntry) error {
	if !c.Fill.Enabled {
		return nil
	}
	for _, name := range c.Fill.names() {
		found := false
		for _, e := range profile {
			found = found || strings.EqualFold(e.Name, name)
		}
		if !found {
			return fmt.Errorf("adaptive.fill.add.%s: no scorer of the profile has this name", name)
		}
	}
	if c.Enabled && filler(profile) == nil {
		return errors.New("adaptive.fill: no scorer of the profile reports the prefix index's fill, the law's input; add a scorer of type prefix (weight 0 keeps it out of the scores) or set adaptive.fill.enabled: false")
	}
	return nil
}

// filler returns the first of the profile's scorers that reports the
// index's fill, or nil.
func filler(profile []scheduler.ScorerEntry) scheduler.FillReporter {
	for _, e := range profile {
		if f, ok := e.Scorer.(scheduler.FillReporter); ok {
			return f
		}
	}
	return nil
}

// FillState is the law's state between evaluations.
type FillState struct {
	// Mix is 1 while the added weights are in the calm weights, else 0.
	Mix float64 `json:"mix"`
	// Full is the hysteresis state: the fill last crossed on (true) or
	// off (false, the start).
	Full bool `json:"full"`
}

// FillInput is what one evaluation reads.
type FillInput struct {
	// Fill is the index's fill over the pool; OK false when the index
	// knows no endpoint of it (the state then holds).
	Fill float64
	OK   bool
	// LoopMode is the configurator's mode; the mix changes only in calm
	// (or before the configurator's first step).
	LoopMode string
}

// Next is the fill law as a pure function: the fill's crossing on makes
// the caches full, crossing off gives them room again; the mix follows
// (0 or 1) only while the loop is calm, since a new shape restarts the
// configurator, which would end a rebalance. It returns the state
// afterwards and a reason with the numbers when the mix changed ("" when
// it did not).
func (c FillConfig) Next(s FillState, in FillInput) (FillState, string) {
	if !in.OK {
		return s, ""
	}
	switch {
	case !s.Full && in.Fill >= c.On:
		s.Full = true
	case s.Full && in.Fill <= c.Off:
		s.Full = false
	}
	target := 0.0
	if s.Full {
		target = 1
	}
	if s.Mix == target || (in.LoopMode != configurator.ModeCalm && in.LoopMode != configurator.ModeStatic) {
		return s, ""
	}
	from := s.Mix
	s.Mix = target
	why := fmt.Sprintf("index fill %.3f (caches full: crossed on %.2f)", in.Fill, c.On)
	if !s.Full {
		why = fmt.Sprintf("index fill %.3f (room again: crossed off %.2f)", in.Fill, c.Off)
	}
	return s, fmt.Sprintf("%s: mix %.3g → %.3g", why, from, s.Mix)
}
