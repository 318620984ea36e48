//go:build race

package scorertest

// RaceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are only meaningful without it.
const RaceEnabled = true
