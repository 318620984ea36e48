//go:build race

package proxy

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are only meaningful without it.
const raceEnabled = true
