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
	return profiled(name, desc, func() (*configs.File, error) { return f, nil })
}

// profiled returns the policy that is the profile profile returns: its
// Profile is profile, and its Build builds that profile's scheduler,
// seeded with the run's seed, and, when the profile has adaptive.enabled,
// its control loop. Every policy that is a profile is built this way, so
// what the simulator runs is what bench serves.
func profiled(name, desc string, profile func() (*configs.File, error)) Policy {
	return Policy{Name: name, Description: desc, Profile: profile, Build: func(seed uint64, _ *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
		f, err := profile()
		if err != nil {
			return nil, nil, err
		}
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

// shippedProfile returns a Policy.Profile reading a shipped profile; with
// off the control loop and the guard are switched off (adaptive-off).
func shippedProfile(name string, off bool) func() (*configs.File, error) {
	return func() (*configs.File, error) {
		f, err := configs.LoadShipped(name)
		if err != nil {
			return nil, fmt.Errorf("shipped profile %s: %w", name, err)
		}
		if off {
			f = loopOff(f, false)
		}
		return f, nil
	}
}
