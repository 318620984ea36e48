package sim

import (
	"fmt"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/flow"
)

// PolicyAdaptiveFlow is configs/adaptive.yaml with flow control on: the
// default bands (interactive, standard, sheddable, with their prefill
// budgets and the sheddable band's reserve) and saturation, with a
// global TTL of flowBatchTTL so a batch job's requests may wait in the
// router for as long as a job takes; the standard band keeps the default
// 30 s, so unclassified traffic is treated as with flow.DefaultConfig.
// What the flow-control scenarios compare against adaptive.
const PolicyAdaptiveFlow = "adaptive-flow"

// flowBatchTTL bounds the wait of adaptive-flow's interactive and
// sheddable bands (a batch job's completion window in the scenarios).
const flowBatchTTL = 15 * time.Minute

func adaptiveFlowProfile() (*configs.File, error) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		return nil, fmt.Errorf("%s policy: %w", PolicyAdaptiveFlow, err)
	}
	c := *f
	c.Flow.Enabled = true
	c.Flow.TTL = flowBatchTTL
	c.Flow.Bands = flow.DefaultConfig().Bands
	c.Flow.Bands[1].TTL = flow.DefaultConfig().TTL
	return &c, nil
}
