package sim

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

//go:embed profiles/*.yaml
var profiles embed.FS

// adaptiveLoop runs the real detector and configurator on virtual time.
type adaptiveLoop struct {
	det  *detector.Detector
	conf *configurator.Configurator
}

func (a *adaptiveLoop) Interval() time.Duration { return a.det.Config().Interval }

func (a *adaptiveLoop) Step(now time.Time, eps []*scheduler.Endpoint) (*scheduler.Weights, ControlState) {
	sig := a.det.Step(now, eps)
	w := a.conf.Step(now, sig)
	return w, ControlState{Signal: sig.Value}
}

// Profile is a trimtab profile as the simulator reads it: the configs
// schema (scorers, picker, filters, scheduler) plus an optional adaptive
// section — adaptive.* are configurator.Config keys, adaptive.detector.*
// detector.Config keys.
type Profile struct {
	File         *configs.File
	Detector     detector.Config
	Configurator configurator.Config
}

// ParseProfile reads a profile. The adaptive section is taken out before
// the rest is handed to configs.Parse.
func ParseProfile(data []byte) (*Profile, error) {
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("profile: not valid YAML: %w", err)
	}
	p := &Profile{Detector: detector.DefaultConfig(), Configurator: configurator.DefaultConfig()}
	if a, ok := raw["adaptive"]; ok {
		delete(raw, "adaptive")
		am, ok := a.(map[string]any)
		if !ok && a != nil {
			return nil, fmt.Errorf("adaptive: want a mapping")
		}
		if d, ok := am["detector"]; ok {
			delete(am, "detector")
			dm, ok := d.(map[string]any)
			if !ok && d != nil {
				return nil, fmt.Errorf("adaptive.detector: want a mapping")
			}
			if err := configs.Decode(dm, &p.Detector); err != nil {
				return nil, fmt.Errorf("adaptive.detector: %w", err)
			}
		}
		if err := configs.Decode(am, &p.Configurator); err != nil {
			return nil, fmt.Errorf("adaptive: %w", err)
		}
	}
	if err := p.Detector.Validate(); err != nil {
		return nil, err
	}
	if err := p.Configurator.Validate(); err != nil {
		return nil, err
	}
	rest, err := yaml.Marshal(raw)
	if err != nil {
		return nil, err
	}
	if p.File, err = configs.Parse(rest); err != nil {
		return nil, err
	}
	return p, nil
}

// Policy turns the profile into a policy: static weights, or the real
// detector and configurator when adaptive.enabled.
func (p *Profile) Policy(name, desc string) Policy {
	return Policy{Name: name, Description: desc, Build: func(seed uint64, _ *Scenario) (*scheduler.Scheduler, Controller, error) {
		f := *p.File
		f.Scheduler.Seed = seed
		s, err := f.BuildScheduler(scorers.InTree(), scheduler.Deps{})
		if err != nil {
			return nil, nil, err
		}
		if !p.Configurator.Enabled {
			return s, nil, nil
		}
		det, err := detector.New(p.Detector, detector.Deps{})
		if err != nil {
			return nil, nil, err
		}
		conf, err := configurator.New(p.Configurator, s.Scorers(), configurator.Deps{Start: s.Weights()})
		if err != nil {
			return nil, nil, err
		}
		return s, &adaptiveLoop{det: det, conf: conf}, nil
	}}
}

// ProfilePolicy reads a profile file as an extra policy named after the
// file ("my-profile.yaml" → "my-profile").
func ProfilePolicy(path string) (Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Policy{}, err
	}
	p, err := ParseProfile(data)
	if err != nil {
		return Policy{}, fmt.Errorf("%s: %w", path, err)
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	mode := "static"
	if p.Configurator.Enabled {
		mode = "adaptive"
	}
	return p.Policy(name, mode+" profile "+path), nil
}

func buildAdaptive(seed uint64, sc *Scenario) (*scheduler.Scheduler, Controller, error) {
	data, err := profiles.ReadFile("profiles/adaptive.yaml")
	if err != nil {
		return nil, nil, err
	}
	p, err := ParseProfile(data)
	if err != nil {
		return nil, nil, fmt.Errorf("sim/profiles/adaptive.yaml: %w", err)
	}
	return p.Policy(PolicyAdaptive, "").Build(seed, sc)
}
