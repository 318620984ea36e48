// Package control is trimtab's adaptive loop, once: a Loop composes the
// detector (how unevenly is load spread?), the configurator (which weights
// does that call for?) and the publication of each new weights version to
// the scheduler. `trimtab serve` runs it with Run on the real clock; the
// simulator calls Tick on virtual time; both go through the same code, so
// the simulator exercises exactly the production wiring.
//
// # One tick
//
//  1. A pending Reload is applied: detector and configurator are rebuilt
//     from the new config and base weights, continuing the weight versions
//     from those in force.
//  2. detector.Step(now, pool) gives a Signal with every component.
//  3. configurator.Step(now, Input{Value, Pressure}) gives the weights in
//     force afterwards; a new pointer is a new version.
//  4. A new version is published to the Target. A refused version is
//     logged and counted; the previous weights stay in force.
//  5. Metrics are updated, the "weights" line is logged for a new version,
//     and Deps.Observe sees the Tick.
//
// # The trade law
//
// With adaptive.trade on (trade.go), every trade.interval from the first
// tick that sees a pool, a tick first reads the pool's declared
// capacities, published calibrations and recent picks: the speed spread,
// fastest ÷ slowest endpoint, classifies the pool as heterogeneous or
// homogeneous with hysteresis (spread_on, spread_off); the batch cost
// (batch_on), the KV slots (slots_on) and the picks' uncached prompt
// (prompt_on) as decode-bound, slot-bound and prefill-heavy; and, in calm
// mode (or before the configurator's first step) only, the law moves the
// mix between the profile's shape (0) and the shape they call for (1:
// the trade shape, the decode-bound or the slot-bound one), by at most
// trade.step on a learned spread and at once on a declared one (and on
// the readings TradeConfig.Next names); before the first step, or
// before a tick has seen a pool, the new shape is in force without the
// slew limit (PoolInstalled wakes Run on the first pool, so in serve the
// first list does not wait for the next tick). A new mix rebuilds the
// configurator over the blended profile (continuing the weight versions;
// the detector keeps its state), is logged ("trade", with its reason) and
// counted. Its learned inputs are router-local: each replica's
// calibrator learns from the requests that replica routed, and its picks
// are its own, so replicas agree on the shape when their readings fall
// on the same side of each hysteresis band.
// Calm and ReloadCalm work on the profile's shape; the mix is applied on
// top of whatever profile is in force.
//
// # The fill law
//
// With adaptive.fill on (fill.go), every fill.interval a tick reads the
// prefix index through the profile's scheduler.FillReporter (the prefix
// scorer; called on the loop's goroutine, concurrently with picks): its
// fill over the pool and its evictions, whose growth over fill.window ÷
// the index's capacity is the churn. The caches count as full when the
// fill reaches fill.on and stop when it falls to fill.off or, after a
// whole window, when the churn is under fill.churn_off (an index fills
// once and then only evicts: a stale one reads full); stale caches count
// as full again at fill.churn_on. While full, fill.add is added to the
// calm weights after the trade law's blend. Like the trade law it moves
// in calm (or before the first step) only, rebuilds the configurator, and
// is logged ("fill") and counted. Both laws read the mode as the tick
// found it, so two laws moving at one tick both go through the slew
// limit. With adaptive.enabled false both laws' states are cleared: the
// roll-back publishes the profile's own weights.
//
// # The slow loop
//
// Retune (retune.go, retune_run.go) re-tunes the calm weights on the
// router's own recent traffic: every retune.interval it takes the traffic
// recorder's window (RetuneSource), hands it with the calibrated engine
// and the calm weights to a Retuner (sim/retune replays it in the
// simulator: a bounded search around the calm weights), and Decide keeps,
// proposes (advisory) or, in apply mode, steps toward the best vector by
// at most retune.max_step through ReloadCalm, the path a profile reload
// takes. ReloadCalm refuses a step computed from a profile an operator
// has since reloaded (Calm's generation). See docs/retune.md.
//
// # Concurrency
//
// Tick and Run are not safe for concurrent use: one goroutine (Run, or the
// simulator's event loop) owns the Loop. Run starts no goroutine: it owns
// one ticker on the injected clock and returns when its context is done.
// Retune's Run and Step belong to one goroutine too (`serve` gives it its
// own, so a replay never delays a tick); they start none. Reload,
// ReloadCalm, Calm, Config, Interval, Last and PoolInstalled may be called
// from any goroutine: a reload is handed over through an atomic pointer and
// applied by the next tick; PoolInstalled sends, without blocking, on a
// channel of one that Run reads; Last returns the latest Tick, which is
// never modified afterwards.
package control
