//go:build !race

package scorertest

const RaceEnabled = false
