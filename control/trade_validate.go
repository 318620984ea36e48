package control

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// The trade section's checks on its own and against a profile's scorers.

// Validate checks the section alone; errors name the field as
// adaptive.trade.<key>. CheckProfile checks the weights against the
// profile.
func (c TradeConfig) Validate() error {
	const p = "adaptive.trade."
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !c.Enabled:
		return nil
	case len(c.Weights) == 0:
		return errors.New(p + "weights: the second shape is empty; name at least one scorer and its weight")
	case len(c.Weights) > maxTradeWeights:
		return fmt.Errorf(p+"weights: %d scorers, want at most %d", len(c.Weights), maxTradeWeights)
	case !(c.DMax == 0 || (c.DMax > 0 && c.DMax <= 1)):
		return fmt.Errorf(p+"d_max: must be 0 (the profile's) or in (0,1], got %v", c.DMax)
	case !(c.AffinityFloor == 0 || (c.AffinityFloor > 0 && c.AffinityFloor < 1)):
		return fmt.Errorf(p+"affinity_floor: must be 0 (the profile's) or in (0,1), got %v", c.AffinityFloor)
	case !(c.SpreadOff >= 1) || !finite(c.SpreadOff):
		return fmt.Errorf(p+"spread_off: must be a finite number ≥ 1, got %v", c.SpreadOff)
	case !(c.SpreadOn > c.SpreadOff) || !finite(c.SpreadOn):
		return fmt.Errorf(p+"spread_on: must be a finite number > spread_off (%v), got %v", c.SpreadOff, c.SpreadOn)
	case !(c.BatchOn == 0 || (c.BatchOn > 0 && c.BatchOn <= 100)):
		return fmt.Errorf(p+"batch_on: must be 0 (off) or in (0, 100], got %v", c.BatchOn)
	case c.BatchOn > 0 && !(c.BatchOff >= 0 && c.BatchOff < c.BatchOn):
		return fmt.Errorf(p+"batch_off: must be in [0, batch_on (%v)), got %v", c.BatchOn, c.BatchOff)
	case c.BatchOn > 0 && len(c.DecodeWeights) == 0:
		return errors.New(p + "decode_weights: batch_on is set but the decode-bound shape is empty; name at least one scorer and its weight, or set batch_on to 0")
	case !(c.SlotsOn == 0 || (c.SlotsOn > 0 && c.SlotsOn <= 1e4)):
		return fmt.Errorf(p+"slots_on: must be 0 (off) or in (0, 10000], got %v", c.SlotsOn)
	case c.SlotsOn > 0 && !(c.SlotsOff > c.SlotsOn && c.SlotsOff <= 1e4):
		return fmt.Errorf(p+"slots_off: must be in (slots_on (%v), 10000], got %v", c.SlotsOn, c.SlotsOff)
	case c.SlotsOn > 0 && len(c.DecodeWeights) == 0 && len(c.SlotWeights) == 0:
		return errors.New(p + "slot_weights: slots_on is set but the slot-bound shape is empty (and so is decode_weights); name at least one scorer and its weight, or set slots_on to 0")
	case !(c.PromptOn == 0 || (c.PromptOn > 0 && c.PromptOn <= 1e6)):
		return fmt.Errorf(p+"prompt_on: must be 0 (off) or in (0, 1000000], got %v", c.PromptOn)
	case c.PromptOn > 0 && !(c.PromptOff >= 0 && c.PromptOff < c.PromptOn):
		return fmt.Errorf(p+"prompt_off: must be in [0, prompt_on (%v)), got %v", c.PromptOn, c.PromptOff)
	case len(c.SlotWeights) > maxTradeWeights:
		return fmt.Errorf(p+"slot_weights: %d scorers, want at most %d", len(c.SlotWeights), maxTradeWeights)
	case len(c.DecodeWeights) > maxTradeWeights:
		return fmt.Errorf(p+"decode_weights: %d scorers, want at most %d", len(c.DecodeWeights), maxTradeWeights)
	case !(c.Step > 0 && c.Step <= 1):
		return fmt.Errorf(p+"step: must be in (0,1], got %v", c.Step)
	case c.Interval < time.Second || c.Interval > time.Hour:
		return fmt.Errorf(p+"interval: must be 1s…1h, got %v", c.Interval)
	case c.MinSamples < 1 || c.MinSamples > 4096:
		return fmt.Errorf(p+"min_samples: must be 1…4096, got %d", c.MinSamples)
	}
	if err := checkWeights(c.Weights, p+"weights.", nil); err != nil {
		return err
	}
	if err := checkWeights(c.DecodeWeights, p+"decode_weights.", nil); err != nil {
		return err
	}
	return checkWeights(c.SlotWeights, p+"slot_weights.", nil)
}

// Weight returns the trade weight for the scorer called name (byName).
func (c TradeConfig) Weight(name string) (float64, bool) { return byName(c.Weights, name) }

// byName returns m's weight for the scorer called name: its key's, else
// that of the first key (in sorted order) equal to it without regard to
// case (the config loader lowercases map keys).
func byName(m map[string]float64, name string) (float64, bool) {
	if w, ok := m[name]; ok {
		return w, true
	}
	for _, k := range sortedNames(m) {
		if strings.EqualFold(k, name) {
			return m[k], true
		}
	}
	return 0, false
}

// sortedNames returns m's keys sorted, so errors are deterministic.
func sortedNames(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// checkWeights reports whether every key of m, a section's weights by
// scorer name, is in [0, 1e6] and, with profile set, names one of its
// scorers; errors name the key under prefix (adaptive.trade.weights.).
func checkWeights(m map[string]float64, prefix string, profile []scheduler.ScorerEntry) error {
	for _, name := range sortedNames(m) {
		if w := m[name]; !(w >= 0 && w <= maxTradeWeight) {
			return fmt.Errorf("%s%s: must be in [0, %g], got %v", prefix, name, float64(maxTradeWeight), w)
		}
		if profile == nil {
			continue
		}
		found := false
		for _, e := range profile {
			found = found || strings.EqualFold(e.Name, name)
		}
		if !found {
			return fmt.Errorf("%s%s: no scorer of the profile has this name; add one (weight 0 keeps it out of the profile's own weights) or remove the key", prefix, name)
		}
	}
	return nil
}
