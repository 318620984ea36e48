// Package detector turns the pool into the signal the configurator acts
// on: a number in [0,1] (Signal.Value) with every number it was computed
// from, and the reason when it is held at 0 (Signal.Gate). Config.Signal
// chooses what the number measures.
//
// # The herd signal (default)
//
// In adaptive mode the scheduler's load guard (scheduler.Guard, published
// with the weights) counts on the request path, per endpoint, every pick
// (Endpoint.Picks) and every herd pick (Endpoint.HerdPicks): a pick whose
// choice under the calm weights would have gone to an endpoint over the
// guard's bound — more than max(factor × μ, μ + slack) router-local
// in-flight requests per unit of capacity, μ the candidates' mean — or,
// for a prefix already held by two or more endpoints, over the tighter
// crowd bound (scheduler.Weights.Crowd). The detector takes the increments
// of both counters over the pool since its last step, averages each with
// an exponential decay of time constant Config.HerdWindow, and reports
//
//	herd = herd picks / picks   (both averaged over HerdWindow)
//
// the share of recent traffic that affinity alone would pile onto
// endpoints already carrying more than their share. It is exact and
// router-local (no scraped metric enters it), and it does not depend on
// the weights in force, so a rebalance that spreads load does not talk it
// down. Gates hold it at 0 with fewer than MinEndpoints fresh endpoints
// or fewer than MinPicks picks in the window (Signal.Picks, scaled to the
// pool's picks when replica sync reports other routers' in-flight
// requests).
//
// # The CV signal (signal: cv)
//
// For each fresh endpoint i (State == scheduler.StateFresh; stale and
// unhealthy endpoints are left out) the detector takes
//
//	load_i = (running_i + waiting_i [+ in-flight_i]) / capacity_i
//	kv_i   = KV-cache utilisation in [0,1]
//
// and computes for each series the normalised coefficient of variation
//
//	r = CV / sqrt(N − 1),   CV = σ / μ,
//
// with σ the POPULATION standard deviation (divide by N, gonum
// stat.PopMeanStdDev): 0 for even load and 1 for all load on one
// endpoint, for every N ≥ 2 (NormalisedCV proves it). With
// Config.SubtractNoise the load's value has the imbalance that chance alone
// gives that many requests removed (NoiseCorrected); the KV value is
// multiplied by the fullest endpoint's utilisation, so a spread of a few
// per cent is no hot spot. The two series are combined (max, min or
// weighted) and smoothed by an EWMA. Gates hold it at 0 with fewer than
// MinEndpoints fresh endpoints, total load below MinLoad, or a mean load of
// (numerically) zero.
//
// Both signals' components are reported whichever one is in force (the CV
// components on every step the gates let through), so logs, metrics and
// the status page show both and a reader can recompute the value by hand
// (see Signal.Components).
//
// # Concurrency
//
// Step is a deterministic function of the sequence of (now, endpoints) it
// has been called with: the state it keeps is the EWMA, the herd averages
// and the counters' previous totals. It is not safe for concurrent use;
// the control loop (package control) owns the Detector and steps it once
// per tick. The detector starts no goroutines.
package detector
