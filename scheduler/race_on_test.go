//go:build race

package scheduler

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are only meaningful without it. CI runs the
// allocation tests in a separate pass without -race.
const raceEnabled = true
