// Package detector measures how unevenly load is spread over the pool and
// turns it into a Signal in [0,1]: 0 for perfectly even load, 1 when all
// load sits on one endpoint, whatever the number of endpoints.
//
// # The signal
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
// stat.PopMeanStdDev). NormalisedCV proves why that gives exactly 0 for even
// load and exactly 1 for all load on one endpoint for every N ≥ 2. With
// Config.SubtractNoise the load's value has the imbalance that chance alone
// gives that many requests removed (NoiseCorrected); the KV value is
// multiplied by the fullest endpoint's utilisation, so a spread of a few
// per cent is no hot spot. The two
// series are combined (max, min or weighted), smoothed by an EWMA, and
// reported together with every intermediate number, so a reader can
// recompute the value by hand (see Signal).
//
// Guards hold the signal at 0 and say why (Signal.Gate): fewer than
// MinEndpoints fresh endpoints, total load below MinLoad, or a mean load of
// (numerically) zero.
//
// # Concurrency
//
// Step is a deterministic function of the sequence of (now, endpoints) it
// has been called with: the only state it keeps is the EWMA. It is not
// safe for concurrent use; the control loop (package control) owns the
// Detector and steps it once per tick. The detector starts no goroutines.
package detector
