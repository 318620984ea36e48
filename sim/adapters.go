package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/trimtab/trimtab/sim/scenario"
)

// adapterDraw picks a request's LoRA adapter with Zipf popularity.
type adapterDraw struct {
	cdf   []float64 // cumulative probability of adapters 1…k
	names []string  // lora-1 … lora-N
	salts []uint64  // per adapter, mixed into the block hashes
}

// newAdapterDraw returns the draw of w, or nil when w has no adapters.
func newAdapterDraw(w *scenario.Workload, seed uint64) *adapterDraw {
	if w.Adapters <= 0 {
		return nil
	}
	d := &adapterDraw{}
	sum := 0.0
	for k := 1; k <= w.Adapters; k++ {
		sum += math.Pow(float64(k), -w.AdapterZipf)
		d.cdf = append(d.cdf, sum)
		d.names = append(d.names, "lora-"+strconv.Itoa(k))
		d.salts = append(d.salts, scenario.MixKey(seed, 41, uint64(k)))
	}
	for i := range d.cdf {
		d.cdf[i] /= sum
	}
	return d
}

// draw returns the index of an adapter.
func (d *adapterDraw) draw(rng *rand.Rand) int {
	i, _ := slices.BinarySearch(d.cdf, rng.Float64())
	return min(i, len(d.cdf)-1)
}
