package sim

import (
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

// adaptiveLoop runs the real detector and configurator on virtual time.
type adaptiveLoop struct {
	det *detector.Detector
}

func (a *adaptiveLoop) Interval() time.Duration { return a.det.Config().Interval }

func (a *adaptiveLoop) Step(now time.Time, eps []*scheduler.Endpoint) (*scheduler.Weights, ControlState) {
	sig := a.det.Step(now, eps)
	return nil, ControlState{Signal: sig.Value}
}

func buildAdaptive(seed uint64, _ *Scenario) (*scheduler.Scheduler, Controller, error) {
	f, err := configs.Parse([]byte(defaultProfile))
	if err != nil {
		return nil, nil, err
	}
	f.Scheduler.Seed = seed
	s, err := f.BuildScheduler(scorers.InTree(), scheduler.Deps{})
	if err != nil {
		return nil, nil, err
	}
	det, err := detector.New(detector.DefaultConfig(), detector.Deps{})
	if err != nil {
		return nil, nil, err
	}
	return s, &adaptiveLoop{det: det}, nil
}

// defaultProfile mirrors configs/default.yaml.
const defaultProfile = `
scorers:
  - type: prefix
    weight: 3` + prefixParams + `
  - type: queue
    weight: 2
  - type: kvcache
    weight: 2
  - type: inflight
    weight: 1
`
