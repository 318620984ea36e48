package sim

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
	"github.com/trimtab/trimtab/sim/scenario"
)

// ProfilePolicy turns a trimtab profile into a policy: its scorers,
// picker and filters in a real scheduler, plus the control loop serve
// runs (control.Loop) when adaptive.enabled.
func ProfilePolicy(name, desc string, f *configs.File) Policy {
	return Policy{Name: name, Description: desc, Profile: func() (*configs.File, error) { return f, nil }, Build: func(seed uint64, _ *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
		fc := *f
		fc.Scheduler.Seed = seed
		s, err := fc.BuildScheduler(scorers.InTree(), scheduler.Deps{})
		if err != nil {
			return nil, nil, err
		}
		if !f.Adaptive.Enabled {
			return s, nil, nil
		}
		loop, err := control.New(f.Adaptive, s, control.Deps{})
		if err != nil {
			return nil, nil, err
		}
		return s, loop, nil
	}}
}

// LoadProfilePolicy reads a profile file (configs schema) as an extra
// policy named after the file ("my-profile.yaml" → "my-profile").
func LoadProfilePolicy(path string) (Policy, error) {
	f, err := configs.Load(path)
	if err != nil {
		return Policy{}, err
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	mode := "static"
	if f.Adaptive.Enabled {
		mode = "adaptive"
	}
	return ProfilePolicy(name, mode+" profile "+path, f), nil
}

// buildAdaptiveOff is the "adaptive-off" policy: configs/adaptive.yaml
// with the loop off.
func buildAdaptiveOff(seed uint64, sc *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		return nil, nil, fmt.Errorf("adaptive-off policy: %w", err)
	}
	return ProfilePolicy(PolicyAdaptiveOff, "", loopOff(f, false)).Build(seed, sc)
}

// buildShipped builds policy name from the shipped profile profile.
func buildShipped(name, profile string) func(uint64, *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
	return func(seed uint64, sc *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
		f, err := configs.LoadShipped(profile)
		if err != nil {
			return nil, nil, fmt.Errorf("%s policy: %w", name, err)
		}
		return ProfilePolicy(name, "", f).Build(seed, sc)
	}
}

// buildAdaptive is the "adaptive" policy: the shipped configs/adaptive.yaml
// profile (default scorers plus pending-prefill, adaptive on, package
// defaults for the loop).
func buildAdaptive(seed uint64, sc *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		return nil, nil, fmt.Errorf("adaptive policy: %w", err)
	}
	return ProfilePolicy(PolicyAdaptive, "", f).Build(seed, sc)
}

// shippedProfile returns a Policy.Profile reading a shipped profile; with
// off the control loop and the guard are switched off (adaptive-off).
func shippedProfile(name string, off bool) func() (*configs.File, error) {
	return func() (*configs.File, error) {
		f, err := configs.LoadShipped(name)
		if err != nil {
			return nil, err
		}
		if off {
			f = loopOff(f, false)
		}
		return f, nil
	}
}
