package control

import (
	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/scheduler"
)

// Config is a profile's adaptive: section. The configurator's settings
// sit directly under it (adaptive.enabled, adaptive.d_min, …) and the
// detector's under adaptive.detector; docs/configuration.md lists every
// key with its default and docs/adaptive.md gives the reason for each.
type Config struct {
	configurator.Config `mapstructure:",squash"`
	Detector            detector.Config `mapstructure:"detector"`
	// Trade is the trade law: the calm weights move between the profile's
	// shape and a second one as the pool's speeds spread apart, its engine
	// reads decode-bound, its pods' KV caches hold a few requests or its
	// traffic brings long uncached prompts (docs/adaptive.md, "The trade
	// law").
	Trade TradeConfig `mapstructure:"trade"`
	// Fill is the fill law: weight added to the calm weights while the
	// pool's prefix caches are full (docs/adaptive.md, "The fill law").
	Fill FillConfig `mapstructure:"fill"`
}

// DefaultConfig returns the documented defaults (adaptive mode off).
func DefaultConfig() Config {
	return Config{Config: configurator.DefaultConfig(), Detector: detector.DefaultConfig(), Trade: DefaultTradeConfig(), Fill: DefaultFillConfig()}
}

// Validate checks both parts; errors name the field by its YAML path.
func (c Config) Validate() error {
	if err := c.Detector.Validate(); err != nil {
		return err
	}
	if err := c.Trade.Validate(); err != nil {
		return err
	}
	if err := c.Fill.Validate(); err != nil {
		return err
	}
	return c.Config.Validate()
}

// CheckProfile reports whether the loop can run over the profile's
// scorers: the config is valid and, in adaptive mode, the profile has
// weight in both the affinity and the distribution category, at every
// mix the trade law can reach, with and without the fill law's weights.
func (c Config) CheckProfile(profile []scheduler.ScorerEntry) error {
	if err := c.Detector.Validate(); err != nil {
		return err
	}
	if err := c.Trade.Validate(); err != nil {
		return err
	}
	if err := c.Fill.Validate(); err != nil {
		return err
	}
	if _, err := configurator.New(c.Config, profile, nil); err != nil {
		return err
	}
	if err := c.checkFill(profile); err != nil {
		return err
	}
	return c.checkTrade(profile)
}
