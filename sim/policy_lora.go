package sim

import (
	"fmt"

	"github.com/trimtab/trimtab/configs"
)

// PolicyAdaptiveLoRA is configs/adaptive.yaml with a lora scorer: requests
// go where their adapter is resident, or can be loaded cheapest, within
// the guard's bound. What the adapter scenarios compare with least-queue.
const PolicyAdaptiveLoRA = "adaptive-lora"

// loraWeight is the lora scorer's weight in adaptive-lora.
const loraWeight = 32

func loraPolicy() Policy {
	return profiled(PolicyAdaptiveLoRA, fmt.Sprintf("configs/adaptive.yaml plus a lora scorer (weight %d): adapter residency tiers, within the guard's bound", loraWeight), adaptiveLoRAProfile)
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
