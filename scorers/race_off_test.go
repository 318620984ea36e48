//go:build !race

package scorers

const raceEnabled = false
