// Package configs is trimtab's profile schema: the typed YAML file that says
// which scorers run with which weights, how picks are made, and how the
// adaptive loop, discovery, scraping and servers are set up. It reads files
// with viper, applies each component's DefaultConfig, rejects unknown
// fields and validates every section, naming the file and field at fault.
// Viper does not leave this package and cmd. ImportEndpointPicker
// (import.go) translates an llm-d-router / Gateway API Inference Extension
// EndpointPickerConfig into a profile.
package configs

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/fleet"
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
	// Filters run before scoring, in order: "model", "healthy".
	Filters []string `mapstructure:"filters" json:"filters"`
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
		Fleet:     fleet.DefaultConfig(),
		Server:    settings.DefaultConfig(),
		Tracing:   DefaultTracingConfig(),
		Replicas:  replica.DefaultConfig(),
	}
}

// Load reads and validates the profile at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Path = path
	return f, nil
}

// Parse reads and validates a profile from YAML bytes.
func Parse(data []byte) (*File, error) {
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
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := f.readTokenFile(); err != nil {
		return nil, err
	}
	return f, nil
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

// invalidKeys matches mapstructure's "'path' has invalid keys: " prefix.
var invalidKeys = regexp.MustCompile(`'([^']*)' has invalid keys: `)

// goTypeName matches the Go type name ("scorers.PrefixConfig") that
// mapstructure puts where the path is empty (the top level being
// decoded); YAML keys are lower case.
var goTypeName = regexp.MustCompile(`^\*?[A-Za-z0-9_]+\.[A-Z][A-Za-z0-9_]*$`)

var decodeHook = mapstructure.ComposeDecodeHookFunc(
	mapstructure.StringToTimeDurationHookFunc(),
	mapstructure.StringToSliceHookFunc(","),
)

// Decode fills into (a component's Config, already holding its defaults)
// from raw YAML params, rejecting unknown fields. It is the decode function
// handed to scorer factories.
func Decode(raw map[string]any, into any) error {
	if len(raw) == 0 {
		return nil
	}
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		ErrorUnused: true,
		DecodeHook:  decodeHook,
		Result:      into,
	})
	if err != nil {
		return err
	}
	return cleanDecodeError(dec.Decode(raw))
}

// cleanDecodeError strips mapstructure's preamble so the message names
// the field first.
func cleanDecodeError(err error) error {
	if err == nil {
		return nil
	}
	msg := inUserWords(err).Error()
	msg = strings.TrimPrefix(msg, "decoding failed due to the following error(s):\n\n")
	msg = strings.ReplaceAll(msg, "\n", "; ")
	msg = invalidKeys.ReplaceAllStringFunc(msg, func(m string) string {
		sub := invalidKeys.FindStringSubmatch(m)
		if sub[1] == "" || goTypeName.MatchString(sub[1]) {
			return "unknown field: "
		}
		return sub[1] + ": unknown field: "
	})
	return errors.New(msg)
}

// Validate checks every section. It does not build anything with side
// effects, but it does run each scorer's factory on a throwaway registry so
// bad params are caught here.
func (f *File) Validate() error {
	if err := f.Scheduler.Validate(); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if _, err := f.Picker.build(); err != nil {
		return err
	}
	for i, name := range f.Filters {
		if _, err := buildFilter(name); err != nil {
			return fmt.Errorf("filters[%d]: %w", i, err)
		}
	}
	entries, err := f.buildScorers(scorers.InTree(), scorers.Deps{})
	if err != nil {
		return err
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
	return f.Tracing.Validate()
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

func buildFilter(name string) (scheduler.Filter, error) {
	switch name {
	case scheduler.FilterModel:
		return scheduler.ModelFilter{}, nil
	case scheduler.FilterHealthy:
		return scheduler.HealthyFilter{}, nil
	}
	return nil, fmt.Errorf("unknown filter %q (want %s or %s)", name, scheduler.FilterModel, scheduler.FilterHealthy)
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
		flt, err := buildFilter(name)
		if err != nil {
			return nil, fmt.Errorf("filters[%d]: %w", i, err)
		}
		filters = append(filters, flt)
	}
	return scheduler.New(f.Scheduler, entries, filters, picker, deps)
}
