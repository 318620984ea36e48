// Package scheduler is trimtab's request path: it picks the endpoint for
// each request as a weighted sum of scorer scores.
//
// A Pick runs filters (model, health, the gateway's subset hint), asks every
// scorer of the profile for a score in [0,1] per candidate, written into
// index-aligned slices the scheduler owns, sums them with the Weights in
// force and lets a Picker rank the candidates. The resulting Decision
// carries the chosen endpoint, ordered fallbacks and every score, and must
// be finished with Done so in-flight accounting cannot leak.
//
// Concurrency: Pick is safe for concurrent use and takes no lock. The pool
// (SetEndpoints) and the weights (Publish) are immutable values swapped
// through atomic pointers; a Pick loads each once. Per-decision buffers come
// from a sync.Pool, so a warm scheduler allocates nothing per request.
// Scorers may keep their own state and must be safe for concurrent use.
//
// The scheduler never imports a concrete scorer: cmd (or the simulator)
// builds scorers from a profile and hands them in as ScorerEntry values.
// It starts no goroutines.
package scheduler
