package sim

import (
	"fmt"
	"sort"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/prefix"
	"github.com/trimtab/trimtab/sim/scenario"
)

// Policy is one routing policy: it builds a real scheduler (and, when
// adaptive, a control loop) for a run.
type Policy struct {
	// Name identifies the policy in reports and --policies.
	Name string
	// Description is one line for the report.
	Description string
	// Build returns a fresh scheduler seeded with seed, and its control
	// loop, or nil for a static policy (whose loop would never change the
	// weights). For a policy that is a profile it is derived from Profile
	// (the profile's scheduler, and its loop when adaptive.enabled).
	Build func(seed uint64, sc *scenario.Scenario) (*scheduler.Scheduler, *control.Loop, error)
	// Profile returns the trimtab profile the policy is, for running it
	// through a real `trimtab serve` (trimtab bench); nil for the
	// simulator-only baselines that are not profiles (round-robin,
	// sglang-switch, smg-least-load, dynamo-kv-cost).
	Profile func() (*configs.File, error)
}

// Policy names.
const (
	PolicyRoundRobin = "round-robin"
	PolicyLeastQueue = "least-queue"
	PolicyPrefixOnly = "prefix-only"
	PolicyStatic322  = "static-3-2-2"
	PolicySGLang     = "sglang-switch"
	PolicyAdaptive   = "adaptive"
	// PolicyAdaptiveOff is the shipped adaptive profile with the loop off:
	// the same scorers at the profile's weights. What adaptive must beat.
	PolicyAdaptiveOff = "adaptive-off"
	// PolicyGuardOnly is the shipped adaptive profile with the loop off
	// and its guard kept (scheduler.guard): the calm weights under the
	// load guard, with herd accounting but no weight changes. What the
	// loop must add to.
	PolicyGuardOnly = "guard-only"
	// The field's current policies (docs/field-policies.md).
	PolicyLLMDTokenLoad = "llmd-token-load"
	PolicySMGLeastLoad  = "smg-least-load"
	PolicyDynamoKVCost  = "dynamo-kv-cost"
	// PolicyTunedStatic is configs/tuned-static.yaml: the best single
	// static weight vector over the adaptive profile's scorers for the
	// shipped suite, found by trimtab sim tune. What a careful operator
	// would ship after tuning by hand.
	PolicyTunedStatic = "tuned-static"
)

func profilePolicy(name, desc, yaml string) Policy {
	return profiled(name, desc, func() (*configs.File, error) { return configs.Parse([]byte(yaml)) })
}

// The field's prefix-aware policies (prefix-only, static-3-2-2,
// sglang-switch) learn a prompt at the pick, as the Gateway API Inference
// Extension's and llm-d's approximate prefix scorers (PreRequest) and
// SGLang's router (its radix tree insert at routing) do; trimtab's own
// policies use the prefix scorer's default, the first response byte.
func builtinPolicies() []Policy {
	return []Policy{
		{Name: PolicyRoundRobin, Description: "a plain Kubernetes Service: every pod in turn", Build: buildRoundRobin},
		profilePolicy(PolicyLeastQueue, "queue scorer alone (fewest waiting requests)", `
scorers:
  - type: queue
    weight: 1
`),
		profilePolicy(PolicyPrefixOnly, "prefix scorer alone (longest routed prefix, learned at the pick)", `
scorers:
  - type: prefix
    weight: 1
    params: {learn: pick}
`),
		profilePolicy(PolicyStatic322, "static prefix 3 : queue 2 : kvcache 2 (the GIE default, learning at the pick)", `
scorers:
  - type: prefix
    weight: 3
    params: {learn: pick}
  - type: queue
    weight: 2
  - type: kvcache
    weight: 2
`),
		{Name: PolicySGLang, Description: "SGLang cache-aware switch: least-loaded when max−min > 64 and max > 1.5·min, else longest prefix if match > 0.3, else least-loaded", Build: buildSGLang},
		profiled(PolicyLLMDTokenLoad, "llm-d optimized-baseline: prefix-affinity filter (τ 0.80, gate 286,720 tokens) + token-load, learning at the pick (configs/llmd-token-load.yaml)", shippedProfile(PolicyLLMDTokenLoad, false)),
		{Name: PolicySMGLeastLoad, Description: "SMG cache-aware with least_load misses and spills: expected wait (queued + dispatched tokens)/2000 tok/s + 0.15 s·k/(1−k)", Build: buildSMGLeastLoad},
		{Name: PolicyDynamoKVCost, Description: "Dynamo KV router: argmin of uncached prefill blocks + active decode blocks (overlap weight 1, temperature 0)", Build: buildDynamoKVCost},
		profiled(PolicyAdaptive, "trimtab: configs/adaptive.yaml, the control loop on", shippedProfile("adaptive", false)),
		profiled(PolicyAdaptiveOff, "configs/adaptive.yaml with the loop and the guard off: the same scorers at the profile weights", shippedProfile("adaptive", true)),
		profiled(PolicyGuardOnly, "configs/adaptive.yaml with adaptive.enabled false: the calm weights under the load guard, no loop", guardOnlyProfile),
		profiled(PolicyTunedStatic, "configs/tuned-static.yaml: the best single static vector for the suite (trimtab sim tune)", shippedProfile(PolicyTunedStatic, false)),
	}
}

// PolicyNames lists the built-in policies in report order.
func PolicyNames() []string {
	var out []string
	for _, p := range builtinPolicies() {
		out = append(out, p.Name)
	}
	return out
}

func builtinPolicy(name string) (Policy, bool) {
	for _, p := range append(builtinPolicies(), optionalPolicies()...) {
		if p.Name == name {
			return p, true
		}
	}
	return Policy{}, false
}

// Policies resolves names (empty: all built-ins) in report order.
func Policies(names []string) ([]Policy, error) {
	if len(names) == 0 {
		return builtinPolicies(), nil
	}
	out := make([]Policy, 0, len(names))
	seen := map[string]bool{}
	for _, n := range names {
		p, ok := builtinPolicy(n)
		if !ok {
			known := PolicyNames()
			sort.Strings(known)
			return nil, fmt.Errorf("unknown policy %q (known: %v)", n, known)
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// loopOff returns a copy of f with the control loop off and, unless
// keepGuard, the scheduler's load guard and its wait and join bounds off
// too.
func loopOff(f *configs.File, keepGuard bool) *configs.File {
	off := *f
	off.Adaptive.Enabled = false
	if !keepGuard {
		off.Scheduler.Guard.Factor = 0
		off.Scheduler.Guard.WaitFactor = 0 // the wait bound runs only under a guard
		off.Scheduler.Guard.JoinFactor = 0
	}
	return &off
}

// guardOnlyProfile is configs/adaptive.yaml with adaptive.enabled: false,
// the roll-back an operator makes: its scheduler.guard stays.
func guardOnlyProfile() (*configs.File, error) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		return nil, fmt.Errorf("guard-only policy: %w", err)
	}
	if f.Scheduler.Guard.Factor == 0 {
		return nil, fmt.Errorf("guard-only policy: configs/adaptive.yaml has no scheduler.guard")
	}
	return loopOff(f, true), nil
}

// newPrefixScorer builds the in-tree prefix scorer with its defaults but
// learning at the pick, as the field's routers do (see builtinPolicies).
func newPrefixScorer(name string) (scheduler.Scorer, error) {
	cfg := prefix.DefaultConfig()
	cfg.Learn = prefix.LearnPick
	return prefix.New(name, cfg, prefix.Deps{})
}
