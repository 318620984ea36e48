package configs

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/trimtab/trimtab/control"
)

// Reloadable is the part of a profile that a running trimtab applies
// without a restart: the scorers' base weights and the adaptive: section.
// Every other setting (the scorer list, types, names and params,
// scheduler:, picker:, filters:, endpoints:, scrape:, server:) is fixed
// at start and needs a restart.
type Reloadable struct {
	// Weights are the scorers' base weights, index-aligned with
	// File.Scorers.
	Weights []float64
	// Adaptive is the control loop's configuration.
	Adaptive control.Config
}

// Reloadable returns the profile's runtime-changeable subset. The profile
// must have been validated (every weight set).
func (f *File) Reloadable() Reloadable {
	r := Reloadable{Weights: make([]float64, len(f.Scorers)), Adaptive: f.Adaptive}
	for i, sc := range f.Scorers {
		r.Weights[i] = *sc.Weight
	}
	return r
}

// ReloadOver validates f as the replacement of running, the profile a
// service started with or last reloaded, and returns the subset to apply.
// It fails when f is invalid or changes a setting that needs a restart,
// naming it; the caller then keeps running.
func (f *File) ReloadOver(running *File) (Reloadable, error) {
	if err := f.Validate(); err != nil {
		return Reloadable{}, err
	}
	if what, err := restartChange(running, f); err != nil {
		return Reloadable{}, err
	} else if what != "" {
		return Reloadable{}, fmt.Errorf("%s changed: restart trimtab to apply it", what)
	}
	return f.Reloadable(), nil
}

// restartChange names the first restart-only setting that differs between
// two profiles, or returns "". Restart-only is everything outside
// Reloadable, so a new File field is restart-only unless Reloadable
// takes it; each part is compared in its JSON encoding, named by File's
// json tags.
func restartChange(old, nw *File) (string, error) {
	if len(old.Scorers) != len(nw.Scorers) {
		return "scorers (the list)", nil
	}
	for i := range old.Scorers {
		a, b := old.Scorers[i], nw.Scorers[i]
		a.Weight, b.Weight = nil, nil
		if eq, err := sameJSON(a, b); err != nil || !eq {
			return fmt.Sprintf("scorers[%d] (type, name or params)", i), err
		}
	}
	parts := func(f *File) (map[string]json.RawMessage, error) {
		c := *f
		c.Scorers, c.Adaptive = nil, control.Config{}
		var m map[string]json.RawMessage
		data, err := json.Marshal(c)
		if err == nil {
			err = json.Unmarshal(data, &m)
		}
		return m, err
	}
	a, err := parts(old)
	if err != nil {
		return "", fmt.Errorf("comparing profiles: %w", err)
	}
	b, err := parts(nw)
	if err != nil {
		return "", fmt.Errorf("comparing profiles: %w", err)
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if string(a[k]) != string(b[k]) {
			return k, nil
		}
	}
	return "", nil
}

func sameJSON(a, b any) (bool, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return false, fmt.Errorf("comparing profiles: %w", err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		return false, fmt.Errorf("comparing profiles: %w", err)
	}
	return string(ja) == string(jb), nil
}
