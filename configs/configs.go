// Package configs is trimtab's profile schema: the typed YAML file that says
// which scorers run with which weights, how picks are made, and how the
// adaptive loop, discovery, scraping and servers are set up. It reads files
// with viper, applies each component's DefaultConfig, rejects unknown
// fields and validates every section, naming the file and field at fault.
// Durations are written with a unit ("15s"); a bare number other than 0 is
// refused, naming the key.
// Viper does not leave this package and cmd. ImportEndpointPicker
// (import.go) translates an llm-d-router / Gateway API Inference Extension
// EndpointPickerConfig into a profile.
package configs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/viper"

	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/proxy/settings"
	"github.com/trimtab/trimtab/replica"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

// File is one trimtab profile as read from YAML.
type File struct {
	// Scheduler holds the scheduler's own settings (seed, fallbacks).
	Scheduler scheduler.Config `mapstructure:"scheduler" json:"scheduler"`
	// Picker chooses among scored candidates.
	Picker PickerConfig `mapstructure:"picker" json:"picker"`
	// Filters run before scoring, in order: "model", "healthy",
	// "prefix-affinity".
	Filters []string `mapstructure:"filters" json:"filters"`
	// PrefixAffinity configures the prefix-affinity filter (used when
	// Filters lists it).
	PrefixAffinity scorers.PrefixAffinityConfig `mapstructure:"prefix_affinity" json:"prefix_affinity"`
	// Scorers with their weights; weights are index-aligned with this list.
	Scorers []ScorerConfig `mapstructure:"scorers" json:"scorers"`
	// Adaptive is the control loop: detector and configurator.
	Adaptive control.Config `mapstructure:"adaptive" json:"adaptive"`
	// Fleet is discovery (endpoints:) and metrics scraping (scrape:). The
	// endpoints: section is optional in a profile used only offline (the
	// simulator); serve requires it.
	Fleet fleet.Config `mapstructure:",squash" json:"endpoints/scrape"`
	// Server configures the data path's servers (HTTP proxy, ext_proc,
	// admin). After Load or Parse, Admin.TokenFile has been read into
	// Admin.Token and cleared.
	Server settings.Config `mapstructure:"server" json:"server"`
	// Tracing exports OpenTelemetry traces (off by default).
	Tracing TracingConfig `mapstructure:"tracing" json:"tracing"`
	// Replicas is replica sync between router replicas (off by default).
	Replicas replica.Config `mapstructure:"replicas" json:"replicas"`
	// Flow is flow control: bands, tenants, deadlines and the router's
	// queue (off by default; docs/flow-control.md).
	Flow flow.Config `mapstructure:"flow" json:"flow"`
	// Retune is the slow loop that re-tunes the calm weights on the
	// router's own recorded traffic (docs/retune.md); advisory by default.
	Retune control.RetuneConfig `mapstructure:"retune" json:"retune"`

	// HasEndpoints reports whether the file has an endpoints: section.
	HasEndpoints bool `mapstructure:"-" json:"endpoints"`

	// Path is the file the profile was read from ("" when parsed from bytes).
	Path string `mapstructure:"-" json:"-"`
}

// PickerConfig selects the picker.
type PickerConfig struct {
	// Type is "max-score" (default) or "weighted-random".
	Type string `mapstructure:"type"`
	// Temperature of the weighted-random softmax, in units of total score.
	Temperature float64 `mapstructure:"temperature"`
}

// ScorerConfig is one scorer of a profile.
type ScorerConfig struct {
	// Type is the scorer's kebab-case type ("prefix", "queue", …).
	Type string `mapstructure:"type"`
	// Name identifies the scorer in weights and metrics; defaults to Type.
	Name string `mapstructure:"name"`
	// Weight is the static weight, in [0, MaxWeight]. Required.
	Weight *float64 `mapstructure:"weight"`
	// Params are the scorer's own settings, decoded into its Config.
	Params map[string]any `mapstructure:"params"`
}

// MaxWeight bounds a scorer's weight. Weights are relative (only their
// ratios matter), and the bound keeps everything derived from them finite:
// their sum, the adaptive weights sum·D·w/category-sum, and the weighted
// score sum of a pick (scores are in [0,1]).
const MaxWeight = 1e6

// Default returns a File with every component's defaults and no scorers.
func Default() *File {
	return &File{
		Scheduler: scheduler.DefaultConfig(),
		Picker:    PickerConfig{Type: scheduler.PickerMaxScore, Temperature: 0.1},
		Filters:   []string{scheduler.FilterModel, scheduler.FilterHealthy},
		Adaptive:  control.DefaultConfig(),

		PrefixAffinity: scorers.DefaultPrefixAffinityConfig(),
		Fleet:          fleet.DefaultConfig(),
		Server:         settings.DefaultConfig(),
		Tracing:        DefaultTracingConfig(),
		Replicas:       replica.DefaultConfig(),
		Flow:           flow.DefaultConfig(),
		Retune:         control.DefaultRetuneConfig(),
	}
}

// Load reads and validates the profile at path (at most MaxFileBytes). It
// does not read the files the profile names: see CheckFiles.
func Load(path string) (*File, error) {
	data, err := ReadFile(context.Background(), path, MaxFileBytes)
	if err != nil {
		return nil, err
	}
	f, err := Parse(data)
	if err != nil {
		if IsEndpointsFile(data) {
			return nil, fmt.Errorf("%s: %w", path, errNotProfile)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Path = path
	return f, nil
}

// Parse reads and validates a profile from YAML bytes.
func Parse(data []byte) (*File, error) {
	f, err := decode(data)
	if err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := f.readTokenFile(); err != nil {
		return nil, err
	}
	return f, nil
}

// decode reads a profile from YAML bytes over the defaults, without
// validating it.
func decode(data []byte) (*File, error) {
	// "::" as key delimiter: metric names and addresses may contain dots.
	v := viper.NewWithOptions(viper.KeyDelimiter("::"))
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	f := Default()
	if err := v.Unmarshal(f, func(dc *mapstructure.DecoderConfig) {
		dc.ErrorUnused = true
		dc.DecodeHook = decodeHook
	}); err != nil {
		return nil, cleanDecodeError(err)
	}
	f.HasEndpoints = v.IsSet("endpoints")
	if err := f.resolveGuard(v.IsSet); err != nil {
		return nil, err
	}
	return f, nil
}

// guardKeys pairs each scheduler.guard key with the adaptive section's
// older spelling of the same setting.
var guardKeys = []struct {
	sched, adaptive string
	s               func(*scheduler.GuardConfig) *float64
	a               func(*control.Config) *float64
}{
	{"factor", "guard_factor", func(g *scheduler.GuardConfig) *float64 { return &g.Factor }, func(c *control.Config) *float64 { return &c.GuardFactor }},
	{"slack", "guard_slack", func(g *scheduler.GuardConfig) *float64 { return &g.Slack }, func(c *control.Config) *float64 { return &c.GuardSlack }},
	{"crowd_factor", "crowd_factor", func(g *scheduler.GuardConfig) *float64 { return &g.CrowdFactor }, func(c *control.Config) *float64 { return &c.CrowdFactor }},
	{"crowd_slack", "crowd_slack", func(g *scheduler.GuardConfig) *float64 { return &g.CrowdSlack }, func(c *control.Config) *float64 { return &c.CrowdSlack }},
}

// resolveGuard makes scheduler.guard and the adaptive section's guard keys
// one setting. scheduler.guard is the guard's home: a key written there
// is the guard of both modes. The adaptive section's guard_factor,
// guard_slack, crowd_factor and crowd_slack still work: written without
// its scheduler.guard twin, such a key sets scheduler.guard too, so
// adaptive.enabled: false keeps the guard it configures. Both written
// with different values is an error naming both keys. A profile that
// writes neither keeps the defaults: no guard in static mode, the adaptive
// loop's guard (factor 2.5) in adaptive mode.
func (f *File) resolveGuard(isSet func(key string) bool) error {
	for _, k := range guardKeys {
		sk, ak := "scheduler::guard::"+k.sched, "adaptive::"+k.adaptive
		sv, av := k.s(&f.Scheduler.Guard), k.a(&f.Adaptive)
		switch sSet, aSet := isSet(sk), isSet(ak); {
		case sSet && aSet && *sv != *av:
			return fmt.Errorf("scheduler.guard.%s (%v) and adaptive.%s (%v) disagree: they are one setting; write it once, under scheduler.guard", k.sched, *sv, k.adaptive, *av)
		case sSet:
			*av = *sv
		case aSet:
			*sv = *av
		}
	}
	// In seconds, a slack not written in either spelling takes the
	// seconds unit's default: the requests defaults mean nothing there.
	if f.Scheduler.Guard.Unit == scheduler.GuardSeconds {
		for _, k := range guardKeys {
			def, ok := map[string]float64{"slack": scheduler.DefaultGuardSlackSeconds, "crowd_slack": scheduler.DefaultCrowdSlackSeconds}[k.sched]
			if ok && !isSet("scheduler::guard::"+k.sched) && !isSet("adaptive::"+k.adaptive) {
				*k.s(&f.Scheduler.Guard), *k.a(&f.Adaptive) = def, def
			}
		}
	}
	// A guard configured by its factor alone takes the adaptive loop's
	// slack and crowd bound when those were not written either, so both
	// modes run the same bound.
	if f.Scheduler.Guard.Factor > 0 {
		for _, k := range guardKeys[1:] {
			if !isSet("scheduler::guard::"+k.sched) && !isSet("adaptive::"+k.adaptive) {
				*k.s(&f.Scheduler.Guard) = *k.a(&f.Adaptive)
			}
		}
	}
	return nil
}

// readTokenFile reads server.admin.token_file into server.admin.token
// (white space trimmed) and clears token_file.
func (f *File) readTokenFile() error {
	path := f.Server.Admin.TokenFile
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("server.admin.token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return fmt.Errorf("server.admin.token_file: %s is empty", path)
	}
	f.Server.Admin.Token, f.Server.Admin.TokenFile = tok, ""
	if err := f.Server.Validate(); err != nil {
		return fmt.Errorf("server (token from %s): %w", path, err)
	}
	return nil
}

// Validate checks every section. It does not build anything with side
// effects, but it does run each scorer's factory on a throwaway registry so
// bad params are caught here.
func (f *File) Validate() error {
	if err := f.Scheduler.Validate(); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if g := f.Scheduler.Guard; g.WaitFactor > 0 && g.Factor <= 0 && !f.Adaptive.Enabled {
		return fmt.Errorf("scheduler.guard.wait_factor: %v has no guard to run under; set scheduler.guard.factor (2.5 is the adaptive loop's) or adaptive.enabled: true", g.WaitFactor)
	}
	if g := f.Scheduler.Guard; g.JoinFactor > 0 && g.Factor <= 0 && !f.Adaptive.Enabled {
		return fmt.Errorf("scheduler.guard.join_factor: %v has no guard to run under; set scheduler.guard.factor (2.5 is the adaptive loop's) or adaptive.enabled: true", g.JoinFactor)
	}
	if _, err := f.Picker.build(); err != nil {
		return err
	}
	for i, name := range f.Filters {
		if _, err := f.buildFilter(name, nil); err != nil {
			return fmt.Errorf("filters[%d]: %w", i, err)
		}
	}
	entries, err := f.buildScorers(scorers.InTree(), scorers.Deps{})
	if err != nil {
		return err
	}
	if err := f.Scheduler.Guard.ValidateScorers(entries); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if slices.Contains(f.Filters, scorers.FilterPrefixAffinity) && !slices.ContainsFunc(f.Scorers, func(sc ScorerConfig) bool { return sc.Type == scorers.TypePrefix }) {
		return fmt.Errorf("filters: %s reads the prefix scorer's index; add a scorer of type %s (weight 0 keeps it out of the scores)", scorers.FilterPrefixAffinity, scorers.TypePrefix)
	}
	if err := f.Adaptive.CheckProfile(entries); err != nil {
		return err
	}
	if f.HasEndpoints {
		if err := f.Fleet.Validate(); err != nil {
			return err
		}
	} else if err := f.Fleet.Scrape.Validate(); err != nil {
		return err
	}
	if err := f.Server.Validate(); err != nil {
		return err
	}
	if err := f.Replicas.Validate(); err != nil {
		return err
	}
	if err := f.Flow.Validate(); err != nil {
		return err
	}
	if err := f.validateRetune(); err != nil {
		return err
	}
	return f.Tracing.Validate()
}

// validateRetune checks the retune: section and what apply mode needs:
// the traffic window it replays, and one router, since each replica
// records only its own share of the traffic and would move its weights
// apart from the others'.
func (f *File) validateRetune() error {
	if err := f.Retune.Validate(); err != nil {
		return err
	}
	if f.Retune.Mode != control.RetuneApply {
		return nil
	}
	if f.Replicas.Enabled {
		return errors.New("retune.mode: apply is for a single router, and replicas.enabled is true: each replica would re-tune on its own share of the traffic and their weights would drift apart; use advisory and apply a proposal by reloading the same profile on every replica")
	}
	if !f.Server.Admin.Record.Enabled {
		return errors.New("retune.mode: apply replays the recorded traffic window; set server.admin.record.enabled: true")
	}
	return nil
}

func (p PickerConfig) build() (scheduler.Picker, error) {
	switch p.Type {
	case scheduler.PickerMaxScore, "":
		return scheduler.MaxScore{}, nil
	case scheduler.PickerWeightedRandom:
		w, err := scheduler.NewWeightedRandom(p.Temperature)
		if err != nil {
			return nil, fmt.Errorf("picker.temperature: %w", err)
		}
		return w, nil
	}
	return nil, fmt.Errorf("picker.type: unknown picker %q (want %s or %s)", p.Type, scheduler.PickerMaxScore, scheduler.PickerWeightedRandom)
}

func (f *File) buildFilter(name string, reg prometheus.Registerer) (scheduler.Filter, error) {
	switch name {
	case scheduler.FilterModel:
		return scheduler.ModelFilter{}, nil
	case scheduler.FilterHealthy:
		return scheduler.HealthyFilter{}, nil
	case scorers.FilterPrefixAffinity:
		return scorers.NewPrefixAffinity(f.PrefixAffinity, reg)
	}
	return nil, fmt.Errorf("unknown filter %q (want %s, %s or %s)", name, scheduler.FilterModel, scheduler.FilterHealthy, scorers.FilterPrefixAffinity)
}

// buildScorers builds every scorer of the profile from the registry.
func (f *File) buildScorers(reg map[string]scorers.Factory, deps scorers.Deps) ([]scheduler.ScorerEntry, error) {
	if len(f.Scorers) == 0 {
		return nil, errors.New("scorers: a profile needs at least one scorer")
	}
	entries := make([]scheduler.ScorerEntry, 0, len(f.Scorers))
	names := map[string]int{}
	var sum float64
	for i, sc := range f.Scorers {
		field := fmt.Sprintf("scorers[%d]", i)
		factory, ok := reg[sc.Type]
		if !ok {
			return nil, fmt.Errorf("%s.type: unknown scorer type %q (known: %s)", field, sc.Type, strings.Join(slices.Sorted(maps.Keys(reg)), ", "))
		}
		name := sc.Name
		if name == "" {
			name = sc.Type
		}
		if j, dup := names[name]; dup {
			return nil, fmt.Errorf("%s.name: %q is already used by scorers[%d]; give one of them another name", field, name, j)
		}
		names[name] = i
		if sc.Weight == nil {
			return nil, fmt.Errorf("%s (%s).weight: required", field, name)
		}
		w := *sc.Weight
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			return nil, fmt.Errorf("%s (%s).weight: must be a finite number ≥ 0, got %v", field, name, w)
		}
		if w > MaxWeight {
			return nil, fmt.Errorf("%s (%s).weight: %g is above the maximum %g; weights are relative, so scale them all down", field, name, w, MaxWeight)
		}
		sum += w
		params := sc.Params
		s, err := factory(name, func(into any) error { return Decode(params, into) }, deps)
		if err != nil {
			return nil, fmt.Errorf("%s (%s).params: %w", field, name, err)
		}
		entries = append(entries, scheduler.ScorerEntry{Name: name, Type: sc.Type, Scorer: s, Weight: w})
	}
	if sum == 0 {
		return nil, errors.New("scorers: all weights are zero; at least one scorer needs a weight > 0")
	}
	return entries, nil
}

// ScorerCategories returns the category of each of the profile's scorers
// (in-tree types), in profile order, building them as Validate does.
func (f *File) ScorerCategories() ([]scheduler.Category, error) {
	entries, err := f.buildScorers(scorers.InTree(), scorers.Deps{})
	if err != nil {
		return nil, err
	}
	cats := make([]scheduler.Category, len(entries))
	for i, e := range entries {
		cats[i] = e.Scorer.Category()
	}
	return cats, nil
}

// BuildScheduler builds the profile's scorers from reg (scorers.InTree()
// plus any out-of-tree factories) and a scheduler around them.
func (f *File) BuildScheduler(reg map[string]scorers.Factory, deps scheduler.Deps) (*scheduler.Scheduler, error) {
	entries, err := f.buildScorers(reg, scorers.Deps{Registerer: deps.Registerer, Logger: deps.Logger})
	if err != nil {
		return nil, err
	}
	picker, err := f.Picker.build()
	if err != nil {
		return nil, err
	}
	filters := make([]scheduler.Filter, 0, len(f.Filters))
	for i, name := range f.Filters {
		flt, err := f.buildFilter(name, deps.Registerer)
		if err != nil {
			return nil, fmt.Errorf("filters[%d]: %w", i, err)
		}
		filters = append(filters, flt)
	}
	return scheduler.New(f.Scheduler, entries, filters, picker, deps)
}
