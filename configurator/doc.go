// Package configurator turns the detector's signal into scoring weights:
// affinity (prefix cache, session, LoRA) while the pool is calm, more and
// more distribution (queue, KV, in-flight, pending prefill) while affinity
// herds requests onto a few endpoints. The signal is by default the herd
// share (package detector): the share of recent picks whose calm-weights
// choice was over the load guard's bound.
//
// In adaptive mode every weights version also carries the load guard
// (GuardFactor, GuardSlack), the crowd bound (CrowdFactor, CrowdSlack) and
// the calm weights (scheduler.Weights.Guard, Crowd, Calm). The scheduler
// applies the guard on the request path — no request goes to an endpoint
// over its bound while another is within it — and counts against the calm
// weights the herd picks the herd signal is made of, so the loop's signal
// does not depend on the weights it publishes.
//
// # Budgets
//
// The signal r ∈ [0,1] sets the distribution budget D; the affinity budget
// is A = 1 − D. By mode:
//
//	calm:      D = DMin                                   (affinity wins)
//	rebalance: D = DMin + σ(r)·(DMax − DMin)·(1 − PressureCut·pressure)
//	           σ(r) = (1 + e^(−K(r − S0)))^(−1/ν)         (generalised logistic)
//	frozen:    D = the profile's share (the watchdog's safe state)
//
// and always D ≤ 1 − AffinityFloor, so affinity never drops below the
// floor. Budgets become weights keeping the profile's scale: with T the sum
// of the profile weights of the categorised scorers,
//
//	affinity scorer j:     w_j = T·A·a_j / Σa
//	distribution scorer j: w_j = T·D·d_j / Σd
//	uncategorised:         w_j = its profile weight
//
// so ratios inside a category are the profile's, the categorised weights
// always sum to T, and D is exactly the distribution share of them.
//
// # Modes
//
// calm → rebalance when r has stayed ≥ ThetaOn for OnHold, rebalance →
// calm when r ≤ ThetaOff < ThetaOn, each only after MinDwell in the current
// mode: the asymmetric thresholds give hysteresis (between them the mode
// does not change), the hold keeps an instant of chance from starting a
// rebalance, the dwell bounds the switching rate to one per MinDwell. D
// never jumps: it moves toward its target at most SlewRate per second. If
// the mode machine would make more than FlapMaxTransitions transitions
// within FlapWindow, the flap watchdog freezes it on the profile's own
// weights (the safe state) for FlapCooldown (mode "frozen"). With Enabled false the
// configurator is in static mode and publishes the profile weights
// unchanged. Step documents the exact order of these rules.
//
// # Replicas
//
// Step is a deterministic function of the sequence of (now, input) and of
// the starting weights, so replicas fed the same signals compute the same
// weights and modes without talking to each other. Each replica's herd
// signal judges its own picks; replicas that receive similar traffic see
// nearby signals and publish nearby weights, because the whole loop is
// continuous apart from the hysteresis switches.
//
// # Concurrency
//
// Step is not safe for concurrent use: the control loop (package control)
// owns the Configurator and steps it once per tick. Weights and Budget may
// be read concurrently; the latest weights sit behind an atomic pointer and
// are immutable. The configurator starts no goroutines.
package configurator
