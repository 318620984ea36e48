package sim

import (
	"fmt"

	"github.com/trimtab/trimtab/configs"
)

// PolicyAdaptiveSession is configs/adaptive.yaml with a session scorer at
// the prefix scorer's weight: a session's endpoint (chosen by consistent
// hashing with bounded loads) outweighs a scaffold other pods also hold,
// so new sessions on a shared scaffold spread while each session's turns
// stay on its endpoint. What the agentic scenarios compare keys with.
const PolicyAdaptiveSession = "adaptive-session"

// sessionWeight is the session scorer's weight in adaptive-session: the
// prefix scorer's in configs/adaptive.yaml.
const sessionWeight = 32

// optionalPolicies are built-in policies run only when named (a
// scenario's policies, --policies), not in the default set.
func optionalPolicies() []Policy {
	return []Policy{
		profiled(PolicyAdaptiveSession, "configs/adaptive.yaml plus a session scorer at the prefix weight (32): new sessions spread by bounded-load hashing, each session's turns stay", adaptiveSessionProfile),
		loraPolicy(),
		profiled(PolicyAdaptiveFlow, "configs/adaptive.yaml with flow control on at its defaults (flow.enabled: true)", adaptiveFlowProfile),
	}
}

func adaptiveSessionProfile() (*configs.File, error) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		return nil, fmt.Errorf("%s policy: %w", PolicyAdaptiveSession, err)
	}
	c := *f
	w := float64(sessionWeight)
	c.Scorers = append(append([]configs.ScorerConfig(nil), f.Scorers...), configs.ScorerConfig{Type: "session", Weight: &w})
	return &c, nil
}
