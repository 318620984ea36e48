package scheduler

// Rand is a tiny deterministic random source (SplitMix64). A Scheduler
// seeds one per decision from its seed and the request, so decisions are
// reproducible and picks share no lock. The zero value is usable.
type Rand struct{ state uint64 }

// NewRand returns a Rand seeded with seed.
func NewRand(seed uint64) Rand { return Rand{state: seed} }

// Uint64 returns the next pseudo-random 64-bit value.
func (r *Rand) Uint64() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Float64 returns a pseudo-random number in [0,1).
func (r *Rand) Float64() float64 {
	return float64(r.Uint64()>>11) / (1 << 53)
}

// mix folds v into a seed; used to derive per-request seeds.
func mix(seed, v uint64) uint64 {
	r := Rand{state: seed ^ (v * 0xff51afd7ed558ccd)}
	return r.Uint64()
}
