package scheduler

import (
	"fmt"
	"math"
)

// Picker type strings as used in profiles.
const (
	PickerMaxScore       = "max-score"
	PickerWeightedRandom = "weighted-random"
)

// MaxScore ranks candidates by total score, highest first. Ties are broken
// at random with the per-request source, so equal endpoints share load
// instead of the first one taking it all: each candidate gets a
// pseudo-random tie key, and candidates with equal totals are ordered by it.
type MaxScore struct{}

// Rank implements Picker in one pass over the candidates.
func (MaxScore) Rank(totals []float64, rnd *Rand, order []int) int {
	return topK(totals, rnd.Uint64(), order, -1)
}

// tieKey is a cheap per-candidate pseudo-random key (a multiply-xorshift
// of seed and index), uniform enough to break ties fairly.
func tieKey(seed uint64, i int) uint64 {
	x := (seed ^ uint64(i)) * 0x9e3779b97f4a7c15
	return x ^ (x >> 29)
}

// topK writes into order the indexes of the best min(len(order),
// len(totals)) candidates by (total, tie key) descending, skipping index
// skip, and returns how many it wrote.
func topK(totals []float64, seed uint64, order []int, skip int) int {
	k := min(len(order), len(totals))
	if skip >= 0 && skip < len(totals) {
		k = min(k, len(totals)-1)
	}
	if k <= 0 {
		return 0
	}
	var keyBuf [32]uint64
	keys := keyBuf[:0]
	if k > len(keyBuf) {
		keys = make([]uint64, 0, k)
	}
	n := 0
	for i, t := range totals {
		if i == skip {
			continue
		}
		key := tieKey(seed, i)
		if n == k && !better(t, key, totals[order[n-1]], keys[n-1]) {
			continue
		}
		// Insertion into the sorted top list.
		p := min(n, k-1)
		if n < k {
			n++
			keys = keys[:n]
		}
		for p > 0 && better(t, key, totals[order[p-1]], keys[p-1]) {
			order[p], keys[p] = order[p-1], keys[p-1]
			p--
		}
		order[p], keys[p] = i, key
	}
	return n
}

// better orders by total, then by tie key.
func better(t float64, key uint64, than float64, thanKey uint64) bool {
	return t > than || (t == than && key > thanKey)
}

// WeightedRandom draws the winner with probability proportional to
// exp((total − max) / Temperature) (a softmax), then ranks the fallbacks by
// score. A small temperature approaches MaxScore; a large one, uniform.
type WeightedRandom struct {
	// Temperature > 0, in units of total score.
	Temperature float64
}

// NewWeightedRandom returns a softmax picker; temperature must be > 0.
func NewWeightedRandom(temperature float64) (WeightedRandom, error) {
	if !(temperature > 0) || math.IsInf(temperature, 0) {
		return WeightedRandom{}, fmt.Errorf("weighted-random picker: temperature %v, want a finite number > 0", temperature)
	}
	return WeightedRandom{Temperature: temperature}, nil
}

// Rank implements Picker.
func (p WeightedRandom) Rank(totals []float64, rnd *Rand, order []int) int {
	k := min(len(order), len(totals))
	if k == 0 {
		return 0
	}
	maxT := math.Inf(-1)
	for _, t := range totals {
		maxT = max(maxT, t)
	}
	var sum float64
	for _, t := range totals {
		sum += math.Exp((t - maxT) / p.Temperature)
	}
	target := rnd.Float64() * sum
	winner := len(totals) - 1
	for i, t := range totals {
		target -= math.Exp((t - maxT) / p.Temperature)
		if target < 0 {
			winner = i
			break
		}
	}
	order[0] = winner
	// Fallbacks by score.
	return 1 + topK(totals, rnd.Uint64(), order[1:k], winner)
}
