package bench

import (
	"fmt"
	"time"

	"github.com/trimtab/trimtab/sim"
)

// DemoScenario is `trimtab demo`'s load on servers servers for d: calm (a
// quarter of d, 4 clients), a burst (half, 64 clients) in which 90 % of
// requests share one 6,000-token system prompt (the rest spread over 16
// groups of 1,000-token prompts), calm again (4 clients). Every question
// is new, 150 tokens; answers are 150 tokens.
func DemoScenario(servers int, d time.Duration) (*sim.Scenario, error) {
	q := d / 4
	return sim.ParseScenario([]byte(fmt.Sprintf(`
name: demo
description: Calm, a hot-prefix burst, calm again (trimtab demo).
duration: %v
servers: %d
timeout: 60s
workload: {kind: shared-prefix, groups: 16, prompts_per_group: 1000000, system_tokens: 1000, question_tokens: 150, output_tokens: 150}
load: {mode: closed, levels: [64]}
phases:
  - {name: calm, duration: %v, level: 4}
  - {name: burst, duration: %v, workload: {hot_fraction: 0.9, hot_system_tokens: 6000}}
  - {name: calm again, duration: %v, level: 4}
`, d, servers, q, d-2*q, q)), "")
}
