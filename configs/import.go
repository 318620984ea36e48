package configs

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/trimtab/trimtab/scheduler"
)

// EndpointPickerConfig API versions the importer reads: the Gateway API
// Inference Extension's and llm-d-router's.
var importAPIVersions = []string{
	"inference.networking.x-k8s.io/v1alpha1",
	"llm-d.ai/v1alpha1",
	"llm-d.ai/v1",
}

// defaultImportWeight is the weight an EndpointPickerConfig gives a scorer
// referenced without one (the endpoint picker's DefaultScorerWeight).
const defaultImportWeight = 1.0

// Imported is a trimtab profile translated from an EndpointPickerConfig.
type Imported struct {
	// Profile is the trimtab profile as YAML. It has no endpoints:
	// section (an EndpointPickerConfig does not name the pool); it opens
	// with comments naming everything in Unmapped. It passes Parse.
	Profile []byte
	// Unmapped names, one line each, every plugin,
	// parameter or section that has no trimtab equivalent or is carried
	// over only approximately, and why.
	Unmapped []string
}

// ImportEndpointPicker translates an llm-d-router / Gateway API Inference
// Extension EndpointPickerConfig (YAML) into a trimtab profile. Scorers,
// pickers and their parameters with a trimtab equivalent are carried over
// with the weights of the scheduling profile (the one named "default", or
// the only one); the rest is listed in Imported.Unmapped. Input that is
// not an EndpointPickerConfig, or that the endpoint picker itself would
// refuse (a reference to an unknown plugin, a bad weight), is an error
// naming the field.
func ImportEndpointPicker(data []byte) (*Imported, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if doc == nil {
		return nil, errors.New("empty document: want an EndpointPickerConfig")
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("top level: want a mapping (an EndpointPickerConfig), got %s", kindOf(doc))
	}
	im := &importer{}
	if err := im.header(top); err != nil {
		return nil, err
	}
	if err := im.readPlugins(top["plugins"]); err != nil {
		return nil, err
	}
	profile, err := im.chooseProfile(top["schedulingProfiles"])
	if err != nil {
		return nil, err
	}
	for _, key := range slices.Sorted(maps.Keys(top)) {
		switch key {
		case "apiVersion", "kind", "plugins", "schedulingProfiles":
		default:
			im.note("%s: not mapped (%s)", key, sectionReason(key))
		}
	}
	if err := im.translate(profile); err != nil {
		return nil, err
	}
	out, err := im.render()
	if err != nil {
		return nil, err
	}
	if _, err := Parse(out); err != nil {
		// The translation checks every value it writes; reaching this is
		// a bug in the importer, reported as such.
		return nil, fmt.Errorf("imported profile does not validate (importer bug): %w", err)
	}
	return &Imported{Profile: out, Unmapped: im.unmapped}, nil
}

// sectionReason says why a top-level section is not carried over.
func sectionReason(key string) string {
	switch key {
	case "featureGates":
		return "trimtab has no feature gates"
	case "saturationDetector", "flowControl":
		return "trimtab admits with server.http.max_in_flight and server.ext_proc.max_in_flight"
	case "data", "dataLayer":
		return "trimtab scrapes endpoint metrics itself: see the scrape: section"
	case "parser":
		return "trimtab parses OpenAI request bodies itself"
	}
	return "no trimtab equivalent"
}

// eppPlugin is one entry of plugins:.
type eppPlugin struct {
	index      int
	typ, name  string
	params     map[string]any
	referenced bool
}

func (p *eppPlugin) field() string { return fmt.Sprintf("plugins[%d]", p.index) }

func (p *eppPlugin) label() string {
	if p.name == p.typ {
		return fmt.Sprintf("plugins[%d] %s", p.index, p.typ)
	}
	return fmt.Sprintf("plugins[%d] %s (%s)", p.index, p.name, p.typ)
}

// profileRef is one plugin reference of the chosen scheduling profile.
type profileRef struct {
	field  string
	plugin *eppPlugin
	weight float64
}

type importer struct {
	plugins  []*eppPlugin
	byName   map[string]*eppPlugin
	unmapped []string
	out      importedProfile
	from     []string // per output scorer: the plugin it came from
}

func (im *importer) note(format string, args ...any) {
	im.unmapped = append(im.unmapped, fmt.Sprintf(format, args...))
}

func (im *importer) header(top map[string]any) error {
	api, err := stringField(top, "apiVersion", "apiVersion", true)
	if err != nil {
		return err
	}
	if !slices.Contains(importAPIVersions, api) {
		return fmt.Errorf("apiVersion: %q is not an EndpointPickerConfig version (want one of %s)", api, strings.Join(importAPIVersions, ", "))
	}
	kind, err := stringField(top, "kind", "kind", true)
	if err != nil {
		return err
	}
	if kind != "EndpointPickerConfig" {
		return fmt.Errorf("kind: %q, want EndpointPickerConfig", kind)
	}
	return nil
}

// MaxImportBytes bounds the EndpointPickerConfig config import reads: the
// endpoint picker's own are a few KiB, and parsing costs about 50 bytes of
// memory per byte of YAML.
const MaxImportBytes = 1 << 20

// MaxImportPlugins bounds the plugins of an imported EndpointPickerConfig;
// the endpoint picker's own configurations list a handful.
const MaxImportPlugins = 256

func (im *importer) readPlugins(raw any) error {
	list, ok := raw.([]any)
	if raw == nil || (ok && len(list) == 0) {
		return errors.New("plugins: required, and at least one plugin")
	}
	if !ok {
		return fmt.Errorf("plugins: want a list, got %s", kindOf(raw))
	}
	if len(list) > MaxImportPlugins {
		return fmt.Errorf("plugins: %d plugins, at most %d", len(list), MaxImportPlugins)
	}
	im.byName = map[string]*eppPlugin{}
	for i, item := range list {
		field := fmt.Sprintf("plugins[%d]", i)
		m, ok := item.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want a mapping with type, name and parameters, got %s", field, kindOf(item))
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if k != "type" && k != "name" && k != "parameters" {
				return fmt.Errorf("%s: unknown field %q (want type, name, parameters)", field, k)
			}
		}
		p := &eppPlugin{index: i}
		var err error
		if p.typ, err = stringField(m, "type", field+".type", true); err != nil {
			return err
		}
		if p.name, err = stringField(m, "name", field+".name", false); err != nil {
			return err
		}
		if p.name == "" {
			p.name = p.typ
		}
		if prev, dup := im.byName[p.name]; dup {
			return fmt.Errorf("%s.name: %q is already the name of %s; give one of them another name", field, p.name, prev.field())
		}
		if raw, set := m["parameters"]; set && raw != nil {
			if p.params, ok = raw.(map[string]any); !ok {
				return fmt.Errorf("%s.parameters: want a mapping, got %s", field, kindOf(raw))
			}
		}
		im.plugins = append(im.plugins, p)
		im.byName[p.name] = p
	}
	return nil
}

// chooseProfile returns the references of the scheduling profile to
// import: the one named "default", else the first. Without profiles, the
// endpoint picker builds one from every plugin, and so does this.
func (im *importer) chooseProfile(raw any) ([]profileRef, error) {
	if raw == nil {
		refs := make([]profileRef, len(im.plugins))
		for i, p := range im.plugins {
			refs[i] = profileRef{field: "no schedulingProfiles: weight 1", plugin: p, weight: defaultImportWeight}
		}
		return refs, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("schedulingProfiles: want a list, got %s", kindOf(raw))
	}
	if len(list) == 0 {
		return nil, errors.New("schedulingProfiles: empty; leave it out or name at least one profile")
	}
	chosen := 0
	names := make([]string, len(list))
	for i, item := range list {
		field := fmt.Sprintf("schedulingProfiles[%d]", i)
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: want a mapping with name and plugins, got %s", field, kindOf(item))
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if k != "name" && k != "plugins" {
				return nil, fmt.Errorf("%s: unknown field %q (want name, plugins)", field, k)
			}
		}
		name, err := stringField(m, "name", field+".name", true)
		if err != nil {
			return nil, err
		}
		names[i] = name
		if name == "default" {
			chosen = i
		}
	}
	for i, name := range names {
		if i != chosen {
			im.note("schedulingProfiles[%d] %s: not mapped (trimtab runs one scheduling profile; schedulingProfiles[%d] %s was imported)", i, name, chosen, names[chosen])
		}
	}
	return im.profileRefs(list[chosen].(map[string]any), fmt.Sprintf("schedulingProfiles[%d]", chosen))
}

func (im *importer) profileRefs(m map[string]any, field string) ([]profileRef, error) {
	raw := m["plugins"]
	list, ok := raw.([]any)
	if raw == nil || (ok && len(list) == 0) {
		return nil, fmt.Errorf("%s.plugins: required, and at least one plugin reference", field)
	}
	if !ok {
		return nil, fmt.Errorf("%s.plugins: want a list, got %s", field, kindOf(raw))
	}
	refs := make([]profileRef, 0, len(list))
	for j, item := range list {
		rf := fmt.Sprintf("%s.plugins[%d]", field, j)
		r, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: want a mapping with pluginRef and weight, got %s", rf, kindOf(item))
		}
		for _, k := range slices.Sorted(maps.Keys(r)) {
			if k != "pluginRef" && k != "weight" {
				return nil, fmt.Errorf("%s: unknown field %q (want pluginRef, weight)", rf, k)
			}
		}
		ref, err := stringField(r, "pluginRef", rf+".pluginRef", true)
		if err != nil {
			return nil, err
		}
		p, found := im.byName[ref]
		if !found {
			return nil, fmt.Errorf("%s.pluginRef: no plugin named %q in plugins", rf, ref)
		}
		w := defaultImportWeight
		if raw, set := r["weight"]; set && raw != nil {
			f, ok := asFloat(raw)
			if !ok {
				return nil, fmt.Errorf("%s.weight: want a number, got %s", rf, kindOf(raw))
			}
			if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > MaxWeight {
				return nil, fmt.Errorf("%s.weight: %v, want a number in 0…%g", rf, f, float64(MaxWeight))
			}
			w = f
		}
		p.referenced = true
		refs = append(refs, profileRef{field: rf, plugin: p, weight: w})
	}
	return refs, nil
}

// importedProfile is the trimtab profile written out.
type importedProfile struct {
	Scheduler *importedScheduler `yaml:"scheduler,omitempty"`
	Picker    importedPicker     `yaml:"picker"`
	Filters   []string           `yaml:"filters"`
	// PrefixAffinity is the prefix-affinity filter's section, when the
	// imported profile has llm-d's prefix-cache-affinity-filter.
	PrefixAffinity *importedAffinity `yaml:"prefix_affinity,omitempty"`
	Scorers        []importedScorer  `yaml:"scorers"`
}

type importedAffinity struct {
	Threshold                float64 `yaml:"threshold"`
	MaxTokensInFlightPenalty int64   `yaml:"max_tokens_in_flight_penalty"`
}

type importedScheduler struct {
	MaxFallbacks int `yaml:"max_fallbacks"`
}

type importedPicker struct {
	Type        string  `yaml:"type"`
	Temperature float64 `yaml:"temperature,omitempty"`
}

type importedScorer struct {
	Type   string         `yaml:"type"`
	Name   string         `yaml:"name,omitempty"`
	Weight float64        `yaml:"weight"`
	Params map[string]any `yaml:"params,omitempty"`
}

// render writes the profile with its header and a comment above each
// scorer naming the plugin it came from.
func (im *importer) render() ([]byte, error) {
	var n yaml.Node
	if err := n.Encode(&im.out); err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "scorers" {
			for j, item := range n.Content[i+1].Content {
				item.HeadComment = "from " + im.from[j]
			}
		}
	}
	var b strings.Builder
	b.WriteString("# trimtab profile imported from an EndpointPickerConfig by `trimtab config import`.\n")
	b.WriteString("# Add an endpoints: section (docs/fleet.md) before running serve with it.\n")
	b.WriteString("# The weights are static, as in the input. To let trimtab move weight between\n")
	b.WriteString("# affinity and load scorers while it runs, add (docs/operating-adaptive-mode.md):\n")
	b.WriteString("#   adaptive:\n#     enabled: true\n")
	if len(im.unmapped) == 0 {
		b.WriteString("# Everything in the input was carried over.\n")
	} else {
		b.WriteString("# Not carried over, or only approximately:\n")
		for _, u := range im.unmapped {
			b.WriteString("#   - " + strings.ReplaceAll(u, "\n", " ") + "\n")
		}
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// validPicker checks the picker and scheduler settings written out.
func (im *importer) validPicker() error {
	if _, err := (PickerConfig{Type: im.out.Picker.Type, Temperature: im.out.Picker.Temperature}).build(); err != nil {
		return err
	}
	if s := im.out.Scheduler; s != nil {
		cfg := scheduler.DefaultConfig()
		cfg.MaxFallbacks = s.MaxFallbacks
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("max-score-picker maxNumOfEndpoints: %w", err)
		}
	}
	return nil
}

func stringField(m map[string]any, key, field string, required bool) (string, error) {
	raw, set := m[key]
	if !set || raw == nil {
		if required {
			return "", fmt.Errorf("%s: required", field)
		}
		return "", nil
	}
	s, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("%s: want a string, got %s", field, kindOf(raw))
	}
	if required && s == "" {
		return "", fmt.Errorf("%s: required, got an empty string", field)
	}
	return s, nil
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// asInt reads a whole number; floats with no fraction count.
func asInt(v any) (int, bool) {
	f, ok := asFloat(v)
	if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<40 {
		return 0, false
	}
	return int(f), true
}

func kindOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		return fmt.Sprintf("the string %q", x)
	case bool:
		return fmt.Sprintf("the boolean %v", x)
	case int, int64, uint64, float64:
		return fmt.Sprintf("the number %v", x)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("a %T", v)
}
