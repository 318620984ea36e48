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
// uniformly at random with the per-request source (reservoir sampling), so
// equal endpoints share load instead of the first one taking it all.
type MaxScore struct{}

// Rank implements Picker.
func (m MaxScore) Rank(totals []float64, rnd *Rand, order []int) int {
	k := min(len(order), len(totals))
	for r := 0; r < k; r++ {
		m.rankFrom(totals, rnd, order, r)
	}
	return k
}

func taken(order []int, i int) bool {
	for _, o := range order {
		if o == i {
			return true
		}
	}
	return false
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
	if k > 1 {
		// Fallbacks by score; a throwaway Rand keeps the winner's draw
		// independent of how many fallbacks were asked for.
		rest := *rnd
		var ms MaxScore
		for r := 1; r < k; r++ {
			ms.rankFrom(totals, &rest, order, r)
		}
	}
	return k
}

// rankFrom fills order[r] with the best candidate not in order[:r].
func (MaxScore) rankFrom(totals []float64, rnd *Rand, order []int, r int) {
	best, ties := -1, 0
	for i, t := range totals {
		if taken(order[:r], i) {
			continue
		}
		switch {
		case best < 0 || t > totals[best]:
			best, ties = i, 1
		case t == totals[best]:
			ties++
			if rnd.Intn(ties) == 0 {
				best = i
			}
		}
	}
	order[r] = best
}
