// Package flow is flow control between the proxy and the scheduler:
// priority bands, tenant fairness, deadlines and a queue in the router
// that is used only when every candidate endpoint of a request is
// saturated.
//
// A request's Class (band, tenant, own TTL) comes from a Classifier: the
// priority header, the model (model_bands) or the default band; the
// tenant header or the API key's hash. Controller.Pick dispatches it at
// once when nothing of its band or above waits and one of its eligible
// endpoints has room (Detector.Saturated: the router's own in-flight
// tokens against the endpoint's learned or configured capacity, with the
// scraped waiting count and KV utilisation as a second opinion while they
// are fresh; stale metrics fail open). Dispatch restricts the scheduler
// to the endpoints with room. Otherwise the request waits in its band's
// Queue (earliest deadline first within a tenant, round robin across
// tenants, strict priority across bands) and is picked when it is
// dispatched, with the pool as it is then (late binding). A full queue
// sheds the sheddable band first; a TTL (the minimum of the global,
// band and request TTLs) bounds every wait; a client that goes away
// leaves the queue.
//
// Off, the proxy never calls this package: flow control adds nothing to
// the pick path.
//
// # Concurrency
//
// Controller is safe for concurrent use. One mutex guards the queue and
// the per-endpoint token ledger; with flow control on, every pick runs
// under it, so picks are serialised (a pick takes microseconds). The
// ledger's counters are atomics so Lease.Release, called when a request
// ends, does not take the mutex. Run is the one goroutine the package
// needs: the dispatcher. It wakes when a lease is released or a request
// is queued, and every poll interval while requests wait; each pass
// (Drain) expires TTLs and dispatches from the head while the head has
// room. A queued Pick blocks on a one-slot channel the dispatcher fills
// once; whoever finds the item still queued under the mutex (the
// dispatcher popping it, or the client leaving) owns its fate, so a
// decision is never lost: a decision delivered to a client that left is
// finished as cancelled. Run answers every queued request ErrStopped when
// its context ends and returns after that; Run's caller owns it.
//
// Queue, Classifier and Detector are plain values and step functions
// (no goroutines, time passed in), which the simulator drives on
// virtual time.
package flow
