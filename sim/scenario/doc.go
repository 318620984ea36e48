// Package scenario is the simulator's scenario kit, shared by `trimtab sim`
// and `trimtab bench`: the YAML schema (Scenario and every key under it),
// parsing with defaults and validation that names the key, trace
// scenarios, and the workload generators that turn a scenario into
// requests.
//
// A scenario (sim/scenarios/*.yaml, embedded by package sim; see Scenario
// for every key) names the fleet (servers, engine overrides, scrape
// interval, client timeout), the workload (shared-prefix groups with an
// optional hot prefix, multi-turn chat sessions with session ids, agent
// sessions, unique uniform prompts, or a Mooncake-format JSONL trace
// replayed with prompts synthesised from its block hash ids; FromTrace
// builds a scenario around a trace file alone, such as one trimtab serve
// recorded) and the load (closed-loop concurrencies, open-loop Poisson
// rates or trace speed-ups, optionally shaped as a burst).
//
// Prompt bytes are synthesised deterministically from segment keys
// (Segment, AppendSegment), four bytes per token, so shared segments are
// shared leading bytes for the router's prefix hashing and shared KV
// blocks for the engine's prefix cache. A Generator draws a workload's
// requests as segments; the simulator's runner and the Renderer (which
// bench uses to send the same requests to real servers) both draw from
// NewGenerator with the run's seed, so both see the same workload.
//
// The package imports no simulator code: the names of the built-in
// policies a scenario's policies: key lists are checked by package sim.
// Nothing here starts goroutines; a Generator, a Renderer and a SegCache
// are not safe for concurrent use.
package scenario
