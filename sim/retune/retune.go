// Package retune is the slow loop's Retuner for trimtab serve: it replays
// a window of the router's own traffic in the simulator, on the engine the
// calibrator learned, and searches the calm weights around the ones in
// force (sim.Replay, which simulated runs use as well). control.Retune
// decides what to do with the result; docs/retune.md describes both.
package retune

import (
	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/sim"
)

// Seed is the first seed every replay runs with: a window replays the
// same way on every run and every replica.
const Seed = sim.ReplaySeed

// CandidateCurrent names the weights in force among the candidates.
const CandidateCurrent = sim.ReplayCurrent

// Replay replays windows over a profile's scorers (sim.Replay).
type Replay = sim.Replay

// New returns a Replay over profile's scorers, picker and filters (its
// weights and adaptive section come from each window). The profile must
// be valid; it is not modified.
func New(profile *configs.File) (*Replay, error) { return sim.NewReplay(profile) }
