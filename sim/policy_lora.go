package sim

import (
	"fmt"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim/scenario"
)

// PolicyAdaptiveLoRA is configs/adaptive.yaml with a lora scorer: requests
// go where their adapter is resident, or can be loaded cheapest, within
// the guard's bound. What the adapter scenarios compare with least-queue.
const PolicyAdaptiveLoRA = "adaptive-lora"

// loraWeight is the lora scorer's weight in adaptive-lora.
const loraWeight = 32

func loraPolicy() Policy {
	return Policy{Name: PolicyAdaptiveLoRA, Description: fmt.Sprintf("configs/adaptive.yaml plus a lora scorer (weight %d): adapter residency tiers, within the guard's bound", loraWeight),
		Build: buildAdaptiveLoRA, Profile: adaptiveLoRAProfile}
}

func adaptiveLoRAProfile() (*configs.File, error) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		return nil, fmt.Errorf("%s policy: %w", PolicyAdaptiveLoRA, err)
	}
	c := *f
	w := float64(loraWeight)
	c.Scorers = append(append([]configs.ScorerConfig(nil), f.Scorers...), configs.ScorerConfig{Type: "lora", Weight: &w})
	return &c, nil
}

func buildAdaptiveLoRA(seed uint64, sc *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error) {
	f, err := adaptiveLoRAProfile()
	if err != nil {
		return nil, nil, err
	}
	return ProfilePolicy(PolicyAdaptiveLoRA, "", f).Build(seed, sc)
}
