package control

import (
	"errors"
	"fmt"
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
// which of them has the least prefill queued ahead decides a request's
// time to first token (configs/adaptive.yaml adds pending-prefill). The
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
	// Window is how far back the churn is read: the blocks the index
	// evicted for capacity in the last Window over its capacity, in
	// [Interval, 1h]. Default 1m.
	Window time.Duration `mapstructure:"window"`
	// ChurnOff is the churn below which caches that have counted as full
	// for a whole Window count as stale rather than full, and the weights
	// go: an index fills once and then only evicts, so its fill stays
	// high on a long-running router after the traffic that filled it has
	// gone. In [0, ChurnOn). Default 0.01: while full in the suite the
	// index evicted 3 % of its capacity a minute or more (docs/adaptive.md,
	// "The fill law").
	ChurnOff float64 `mapstructure:"churn_off"`
	// ChurnOn is the churn at or above which stale caches count as full
	// again (the fill is still above On), in (ChurnOff, 100]. Default 0.05.
	ChurnOn float64 `mapstructure:"churn_on"`
}

// DefaultFillConfig returns the documented defaults (off).
func DefaultFillConfig() FillConfig {
	return FillConfig{On: 0.8, Off: 0.7, Interval: 5 * time.Second, Window: time.Minute, ChurnOff: 0.01, ChurnOn: 0.05}
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
	case c.Window < c.Interval || c.Window > time.Hour:
		return fmt.Errorf(p+"window: must be interval (%v)…1h, got %v", c.Interval, c.Window)
	case !(c.ChurnOff >= 0 && c.ChurnOff < c.ChurnOn):
		return fmt.Errorf(p+"churn_off: must be in [0, churn_on (%v)), got %v", c.ChurnOn, c.ChurnOff)
	case !(c.ChurnOn <= 100):
		return fmt.Errorf(p+"churn_on: must be at most 100, got %v", c.ChurnOn)
	}
	return checkWeights(c.Add, p+"add.", nil)
}

// checkFill reports whether every added weight names one of the profile's
// scorers and, with the loop on, whether a scorer reports the index's
// fill (the law's input).
func (c Config) checkFill(profile []scheduler.ScorerEntry) error {
	if !c.Fill.Enabled {
		return nil
	}
	if err := checkWeights(c.Fill.Add, "adaptive.fill.add.", profile); err != nil {
		return err
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
	// Full is the hysteresis state: the caches last counted as full
	// (true) or not (false, the start).
	Full bool `json:"full"`
	// Stale is set when full caches stopped churning (ChurnOff): the fill
	// is still high, and only churn (ChurnOn) makes them full again.
	// Cleared when the fill falls to Off.
	Stale bool `json:"stale"`
	// Since is when the caches last began to count as full.
	Since time.Time `json:"since"`
}

// FillInput is what one evaluation reads.
type FillInput struct {
	// At is the evaluation's time.
	At time.Time
	// Fill is the index's fill over the pool; OK false when the index
	// knows no endpoint of it (the state then holds).
	Fill float64
	OK   bool
	// Churn is the blocks the index evicted for capacity over the last
	// Window over its capacity; ChurnOK false until the loop has read the
	// index a Window ago (or the index has no capacity).
	Churn   float64
	ChurnOK bool
	// LoopMode is the configurator's mode at the start of the tick; the
	// mix changes only in calm (or before the configurator's first step).
	LoopMode string
}

// Next is the fill law as a pure function. The caches count as full when
// the fill reaches On — or, once stale, when it is still there and the
// churn reaches ChurnOn; they stop counting as full when the fill falls
// to Off, or when they have counted as full for a whole Window and the
// churn is under ChurnOff (stale). The mix follows (0 or 1) only while
// the loop is calm, since a new shape restarts the configurator, which
// would end a rebalance. It returns the state afterwards and a reason
// with the numbers when the mix changed ("" when it did not).
func (c FillConfig) Next(s FillState, in FillInput) (FillState, string) {
	if !in.OK {
		return s, ""
	}
	why := ""
	switch {
	case s.Full && in.Fill <= c.Off:
		s.Full, s.Stale = false, false
		why = fmt.Sprintf("index fill %.3f (room again: crossed off %.2f)", in.Fill, c.Off)
	case s.Full && in.ChurnOK && in.At.Sub(s.Since) >= c.Window && in.Churn < c.ChurnOff:
		s.Full, s.Stale = false, true
		why = fmt.Sprintf("index fill %.3f, %.3g of it evicted in the last %v (stale: under churn_off %.3g)", in.Fill, in.Churn, c.Window, c.ChurnOff)
	case !s.Full && s.Stale && in.Fill <= c.Off:
		s.Stale = false
	case !s.Full && !s.Stale && in.Fill >= c.On:
		s.Full, s.Since = true, in.At
		why = fmt.Sprintf("index fill %.3f (caches full: crossed on %.2f)", in.Fill, c.On)
	case !s.Full && s.Stale && in.Fill >= c.On && in.ChurnOK && in.Churn >= c.ChurnOn:
		s.Full, s.Stale, s.Since = true, false, in.At
		why = fmt.Sprintf("index fill %.3f, %.3g of it evicted in the last %v (caches full again: churn_on %.3g)", in.Fill, in.Churn, c.Window, c.ChurnOn)
	}
	target := 0.0
	if s.Full {
		target = 1
	}
	if s.Mix == target || (in.LoopMode != configurator.ModeCalm && in.LoopMode != configurator.ModeStatic) {
		return s, ""
	}
	if why == "" { // the state changed out of calm; the mix follows now
		why = fmt.Sprintf("index fill %.3f (caches full: %v)", in.Fill, s.Full)
	}
	from := s.Mix
	s.Mix = target
	return s, fmt.Sprintf("%s: mix %.3g → %.3g", why, from, s.Mix)
}

// churnWindow keeps the loop's recent reads of the index's eviction
// count, so the law can read the churn over its window.
type churnWindow struct {
	at  []time.Time
	ev  []uint64
	cap int
}

// add records a read and returns the churn since the oldest read at least
// window ago (dropping older ones), and whether there is one.
func (w *churnWindow) add(now time.Time, evicted uint64, capacity int, window time.Duration) (float64, bool) {
	w.at, w.ev, w.cap = append(w.at, now), append(w.ev, evicted), capacity
	// Keep one read at or before now − window: the churn's start.
	for len(w.at) > 1 && !w.at[1].After(now.Add(-window)) {
		w.at, w.ev = w.at[1:], w.ev[1:]
	}
	if capacity <= 0 || now.Sub(w.at[0]) < window || evicted < w.ev[0] {
		return 0, false
	}
	return float64(evicted-w.ev[0]) / float64(capacity), true
}
