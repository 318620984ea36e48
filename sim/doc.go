// Package sim is trimtab's fleet simulator: a discrete-event model of
// vLLM-like servers (package sim/engine) on virtual time, driven by
// workloads from YAML scenarios and routed by the real scheduler, scorers,
// detector and configurator, so a profile can be tried, and policies
// compared, before anything touches production.
//
// # A run
//
// Run simulates one scenario at one load level under one policy with one
// seed. Its event loop orders events by (virtual time, insertion order):
// request arrivals (closed-loop clients, Poisson arrivals or trace
// timestamps), engine step ends, scrape ticks (scheduler.SetEndpoints with
// the servers' waiting / running / KV utilisation as of that instant — the
// router sees nothing fresher), control ticks (detector.Step then
// configurator.Step, new weights through scheduler.Publish), sampling
// ticks for the timelines, and client timeouts. Every request is picked by
// scheduler.Pick with Request.Arrival set to the virtual time, and its
// Decision.Done is called exactly once: on completion, on timeout
// (cancelled) or when the engine rejects it (error). All randomness comes
// from seeded generators, so a RunConfig always produces the same Result.
//
// # Scenarios
//
// A scenario (sim/scenarios/*.yaml, embedded; the schema, parsing and
// workload generators are package sim/scenario) names the fleet, the
// workload and the load; LoadScenario and ShippedScenario read one and
// check that its policies are built-in ones. The held-out scenarios
// (sim/scenarios/held-out, not embedded and not in --scenario all) are
// workloads for checking a profile on traffic it was not tuned on; they
// load by path.
//
// # Flow control, classes and streams
//
// When the policy's profile has flow.enabled, every router replica runs
// the real flow.Controller on the run's virtual clock: arrivals go
// through Controller.Offer, and the run calls Controller.Drain where
// serve's dispatcher goroutine would run (after a request ends, and every
// flow.poll while requests wait); see sim/flow.go. A workload's class
// (band, tenant, TTL) reaches the controller as the headers the proxy
// would pass it. Streams (Scenario.Streams) add further sources of
// requests, each with its own class, workload, arrivals and deadline, and
// Result.Classes reports each class: latencies of its measured requests
// (misses at its timeout) and how many of all its requests completed,
// were dropped by flow control, timed out or failed.
//
// # Concurrency model
//
// A run is single-threaded and owns everything it builds (scheduler,
// scorers, control loop, engines); runs share nothing. RunSweep executes
// independent runs on SweepConfig.Parallel worker goroutines that it
// starts and waits for before returning; results do not depend on the
// parallelism. Cancelling RunSweep's context stops new runs from starting.
package sim
