// Package scorers holds trimtab's in-tree scorers: session (sticky
// sessions), lora (adapter affinity), the distribution scorers queue,
// kvcache, inflight, pending-prefill, token-load and time-cost, and the
// registry of them all (InTree), which includes the prefix scorer of
// package scorers/prefix (approximate prefix-cache affinity). The
// sub-packages never import this one.
//
// Each scorer answers one question for the scheduler — how good is each
// candidate for this request, in [0,1] — and documents its formula,
// category, what 1 and 0 mean, and its neutral score (README.md has the
// table). Weights live in the scheduler; a scorer never sees its weight.
// Scorers never fail on the request path: missing or stale data yields the
// documented neutral score and bumps trimtab_scorer_neutral_scores_total.
//
// Scorers are built from profile config through the explicit registry
// returned by InTree (no init side effects): cmd and the simulator look up
// a Factory by type string and hand it a decode function for the YAML
// params.
//
// Concurrency: every scorer is safe for concurrent use by many Picks. The
// session table is sharded, each shard behind its own mutex, so concurrent
// picks do not serialise on one lock. No scorer starts a goroutine.
// Per-request scratch lives in the scheduler's CycleState slot, so a warm
// scorer allocates nothing per request.
package scorers
