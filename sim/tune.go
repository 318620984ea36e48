package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
	"github.com/trimtab/trimtab/sim/scenario"
)

// TuneConfig is a search for the best single static weight vector over a
// profile's scorers, for a whole scenario suite.
type TuneConfig struct {
	Scenarios []*scenario.Scenario
	// Profile supplies the scorers (types, names, params), picker and
	// filters; its own weights are one candidate. Unless Loop is set its
	// adaptive section is ignored: every candidate runs with the loop off.
	Profile *configs.File
	// Loop keeps the profile's adaptive section: each candidate is a
	// vector of calm weights run with the control loop on. Candidates the
	// loop refuses (a category at weight 0, a calm budget at or above
	// d_max) are skipped and counted in TuneResult.Invalid.
	Loop  bool
	Seed  uint64
	Seeds int
	// Budget is the number of weight vectors evaluated in all, baselines
	// included (default 40).
	Budget   int
	Parallel int
	// Progress, when set, is called after each vector with the number
	// evaluated, the budget and the best so far.
	Progress func(done, budget int, best *Evaluated)
}

// Candidate is a named weight vector, index-aligned with the profile's
// scorers.
type Candidate struct {
	Name    string
	Weights []float64
}

// Cell is one (scenario, level) of the suite.
type Cell struct {
	Scenario string  `json:"scenario"`
	Level    float64 `json:"level"`
}

// Evaluated is a candidate's results per cell, means over the seeds:
// TTFT p99 and output tokens/s (the objective's metrics), and beside them
// E2E p99, goodput (requests/s within SLO) and misses (failed or timed
// out requests, counted in the percentiles at the timeout). Latencies
// are in milliseconds.
type Evaluated struct {
	Candidate
	TTFTP99, TokPerSec      []float64
	E2EP99, Goodput, Misses []float64
	// Worst and Mean are the lowest and the mean ratio to the per-cell
	// best over every cell and both metrics (best TTFT p99 ÷ this one's,
	// this tok/s ÷ the best), given every vector evaluated; Score is their
	// mean, the objective.
	Worst, Mean, Score float64
}

// TuneResult is a finished search.
type TuneResult struct {
	Scorers []string
	Cells   []Cell
	// Vectors in evaluation order; the first are the baselines.
	Vectors []*Evaluated
	// Best is the index in Vectors of the suite's best vector.
	Best int
	// ScenarioBest maps a scenario to the index of its own best vector
	// (the objective over that scenario's cells alone).
	ScenarioBest map[string]int
	// Skipped names built-in policies whose scorers the profile lacks.
	Skipped []string
	// Loop: the vectors are calm weights run with the loop on.
	Loop bool
	// Invalid counts candidates skipped because the profile with them
	// does not validate (with Loop: the loop cannot run on them).
	Invalid int
}

// builtinVectors are the built-in static policies' weights by scorer type
// (configs/load-only.yaml's among them): the baselines every search
// starts from.
var builtinVectors = []struct {
	name string
	w    map[string]float64
}{
	{PolicyStatic322, map[string]float64{scorers.TypePrefix: 3, scorers.TypeQueue: 2, scorers.TypeKVCache: 2}},
	{PolicyPrefixOnly, map[string]float64{scorers.TypePrefix: 1}},
	{PolicyLeastQueue, map[string]float64{scorers.TypeQueue: 1}},
	{"load-only", map[string]float64{scorers.TypeQueue: 2, scorers.TypeKVCache: 2, scorers.TypeInFlight: 2}},
}

// loadShares are the distribution shares of the total weight at which a
// search also starts from the profile's own vector (shareVector): the
// static points on the path the control loop moves the weights along.
var loadShares = []float64{0.25, 0.5, 0.75}

// Baselines returns the candidates a search starts from: the profile's own
// weights (named profileName, "adaptive-off" for the shipped adaptive
// profile), the same vector moved to each of loadShares (named
// "load-share-25%" …; only when the profile builds and has scorers of both
// categories), and every built-in static policy the profile's scorers can
// express; the others are returned as skipped. With loop set (a search of
// calm weights) the shipped tuned-static vector is a baseline too, and the
// load shares are not (calm weights that load-heavy leave the loop no room).
func Baselines(f *configs.File, profileName string, loop bool) (out []Candidate, skipped []string) {
	own := make([]float64, len(f.Scorers))
	for i, s := range f.Scorers {
		own[i] = *s.Weight
	}
	out = append(out, Candidate{profileName, own})
	if cats, err := f.ScorerCategories(); !loop && err == nil {
		for _, d := range loadShares {
			if w := shareVector(own, cats, d); w != nil {
				out = append(out, Candidate{fmt.Sprintf("load-share-%.0f%%", 100*d), w})
			}
		}
	}
	vectors := builtinVectors
	if loop {
		ts, err := configs.LoadShipped(PolicyTunedStatic)
		if err != nil {
			panic(fmt.Sprintf("shipped profile %s: %v", PolicyTunedStatic, err)) // embedded and tested
		}
		w := map[string]float64{}
		for _, s := range ts.Scorers {
			w[s.Type] += *s.Weight
		}
		vectors = append(slices.Clip(vectors), struct {
			name string
			w    map[string]float64
		}{PolicyTunedStatic, w})
	}
next:
	for _, b := range vectors {
		w := make([]float64, len(f.Scorers))
		for typ, v := range b.w {
			i := slices.IndexFunc(f.Scorers, func(s configs.ScorerConfig) bool { return s.Type == typ })
			if i < 0 {
				skipped = append(skipped, b.name)
				continue next
			}
			w[i] = v
		}
		out = append(out, Candidate{b.name, w})
	}
	return out, skipped
}

// shareVector returns w with its distribution weights scaled so that they
// carry share d of the affinity and distribution weight together; the
// affinity weights (and uncategorised ones) stay. It returns nil when w has
// no weight in one of the two categories.
func shareVector(w []float64, cats []scheduler.Category, d float64) []float64 {
	var aff, dist float64
	for i, v := range w {
		switch cats[i] {
		case scheduler.CategoryAffinity:
			aff += v
		case scheduler.CategoryDistribution:
			dist += v
		}
	}
	if aff <= 0 || dist <= 0 {
		return nil
	}
	out := slices.Clone(w)
	for i := range out {
		if cats[i] == scheduler.CategoryDistribution {
			out[i] *= d / (1 - d) * aff / dist
		}
	}
	return out
}

// Tune evaluates the baselines, then runs a coordinate search from the
// best vector so far: for each scorer in turn it tries the weight × f,
// ÷ f and 0 (or, at 0, the mean of the others), keeps a move that raises
// the objective, and when a full pass finds none shrinks f (4, 2, √2)
// until the budget is spent or f can shrink no more. Each vector runs the
// whole suite over every seed; the per-cell best, and so every score, is
// recomputed over all vectors evaluated.
func Tune(ctx context.Context, cfg TuneConfig, baselines []Candidate) (*TuneResult, error) {
	if len(cfg.Scenarios) == 0 {
		return nil, fmt.Errorf("tune: no scenarios")
	}
	if len(baselines) == 0 {
		return nil, fmt.Errorf("tune: no baselines")
	}
	budget := cfg.Budget
	if budget <= 0 {
		budget = 40
	}
	budget = max(budget, len(baselines))
	res := &TuneResult{ScenarioBest: map[string]int{}, Loop: cfg.Loop}
	for _, s := range cfg.Profile.Scorers {
		res.Scorers = append(res.Scorers, scorerName(s))
	}
	for _, sc := range cfg.Scenarios {
		for _, l := range sc.Load.Levels {
			res.Cells = append(res.Cells, Cell{sc.Name, l})
		}
	}
	seen := map[string]bool{}
	eval := func(c Candidate) (*Evaluated, error) {
		key := vectorKey(c.Weights)
		if seen[key] {
			return nil, nil
		}
		seen[key] = true
		if err := withWeights(cfg.Profile, c.Weights, cfg.Loop).Validate(); err != nil {
			res.Invalid++
			return nil, nil
		}
		ev, err := evaluate(ctx, cfg, c)
		if err != nil {
			return nil, err
		}
		res.Vectors = append(res.Vectors, ev)
		res.score()
		if cfg.Progress != nil {
			cfg.Progress(len(res.Vectors), budget, res.Vectors[res.Best])
		}
		return ev, nil
	}
	for _, b := range baselines {
		if _, err := eval(b); err != nil {
			return nil, err
		}
	}
	if len(res.Vectors) == 0 {
		return nil, fmt.Errorf("tune: no baseline is a valid profile (%d refused)", res.Invalid)
	}
	inc := res.Vectors[res.Best]
	for _, f := range []float64{4, 2, math.Sqrt2} {
		for improved := true; improved && len(res.Vectors) < budget; {
			improved = false
			for i := range inc.Weights {
				for _, w := range moves(inc.Weights, i, f) {
					if len(res.Vectors) >= budget {
						break
					}
					ev, err := eval(Candidate{fmt.Sprintf("search-%d", len(res.Vectors)+1), w})
					if err != nil {
						return nil, err
					}
					if ev != nil && ev.Score > inc.Score {
						inc, improved = ev, true
					}
				}
			}
			inc = res.Vectors[res.Best] // scores move as the per-cell bests do
		}
	}
	return res, nil
}

// moves returns the weight vectors one step from w on scorer i.
func moves(w []float64, i int, f float64) [][]float64 {
	with := func(v float64) []float64 {
		out := slices.Clone(w)
		out[i] = v
		return out
	}
	var out [][]float64
	if w[i] > 0 {
		out = append(out, with(w[i]*f), with(w[i]/f))
		if f == 4 {
			out = append(out, with(0))
		}
	} else {
		var sum float64
		var n int
		for _, v := range w {
			if v > 0 {
				sum += v
				n++
			}
		}
		if n > 0 {
			out = append(out, with(sum/float64(n)))
		}
	}
	var valid [][]float64
	for _, v := range out {
		if slices.ContainsFunc(v, func(x float64) bool { return x > 0 }) {
			valid = append(valid, v)
		}
	}
	return valid
}

// vectorKey identifies a weight vector up to scale: a max-score pick is
// the same for w and c·w.
func vectorKey(w []float64) string {
	var sum float64
	for _, v := range w {
		sum += v
	}
	var b strings.Builder
	for _, v := range w {
		fmt.Fprintf(&b, "%.4f,", v/sum)
	}
	return b.String()
}

// evaluate runs candidate c over the suite, keeping only the cell means.
func evaluate(ctx context.Context, cfg TuneConfig, c Candidate) (*Evaluated, error) {
	f := withWeights(cfg.Profile, c.Weights, cfg.Loop)
	evs, err := evaluatePolicies(ctx, cfg, []Policy{ProfilePolicy(c.Name, "", f)})
	if err != nil {
		return nil, err
	}
	evs[0].Candidate = c
	return evs[0], nil
}

// evaluatePolicies runs every policy over cfg's suite (one sweep per
// scenario, all policies in it), keeping only the cell means.
func evaluatePolicies(ctx context.Context, cfg TuneConfig, pols []Policy) ([]*Evaluated, error) {
	evs := make([]*Evaluated, len(pols))
	for i, p := range pols {
		evs[i] = &Evaluated{Candidate: Candidate{Name: p.Name}}
	}
	for _, sc := range cfg.Scenarios {
		sw, err := RunSweep(ctx, SweepConfig{Scenario: sc, Policies: pols, Seed: cfg.Seed, Seeds: cfg.Seeds, Parallel: cfg.Parallel})
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		for l := range sw.Levels {
			for i, ev := range evs {
				s := Summarise(sw.Runs[l][i])
				ev.TTFTP99 = append(ev.TTFTP99, s.TTFTP99)
				ev.TokPerSec = append(ev.TokPerSec, s.OutputTokensPerSec)
				ev.E2EP99 = append(ev.E2EP99, s.E2EP99)
				ev.Goodput = append(ev.Goodput, s.Goodput)
				ev.Misses = append(ev.Misses, s.Misses)
			}
		}
	}
	return evs, nil
}

// withWeights returns a copy of profile f with weights w, the loop on
// as the profile has it when loop is set and off otherwise.
func withWeights(f *configs.File, w []float64, loop bool) *configs.File {
	out := *f
	out.Scorers = slices.Clone(f.Scorers)
	for i := range out.Scorers {
		v := w[i]
		out.Scorers[i].Weight = &v
	}
	out.Adaptive.Enabled = loop && f.Adaptive.Enabled
	return &out
}

// score recomputes every vector's ratios and the bests.
func (r *TuneResult) score() {
	cells := make([]int, len(r.Cells))
	for i := range cells {
		cells[i] = i
	}
	r.Best = r.argmax(cells, func(ev *Evaluated, s, worst, mean float64) { ev.Score, ev.Worst, ev.Mean = s, worst, mean })
	byScenario := map[string][]int{}
	for i, c := range r.Cells {
		byScenario[c.Scenario] = append(byScenario[c.Scenario], i)
	}
	for name, idx := range byScenario {
		r.ScenarioBest[name] = r.argmax(idx, nil)
	}
}

// ScenarioScore is vector v's objective over scenario name's cells alone.
func (r *TuneResult) ScenarioScore(v int, name string) float64 {
	var idx []int
	for i, c := range r.Cells {
		if c.Scenario == name {
			idx = append(idx, i)
		}
	}
	s, _, _ := r.objective(r.Vectors[v], idx)
	return s
}

func (r *TuneResult) argmax(cells []int, set func(ev *Evaluated, s, worst, mean float64)) int {
	best, bestS := 0, math.Inf(-1)
	for i, ev := range r.Vectors {
		s, worst, mean := r.objective(ev, cells)
		if set != nil {
			set(ev, s, worst, mean)
		}
		if s > bestS {
			best, bestS = i, s
		}
	}
	return best
}

// objective: the mean of the worst and the mean ratio to the per-cell
// best, over the given cells and both metrics. A cell where a metric has
// no value (no request measured) counts as ratio 0 for a vector lacking
// it.
func (r *TuneResult) objective(ev *Evaluated, cells []int) (score, worst, mean float64) {
	worst = math.Inf(1)
	n := 0
	for _, c := range cells {
		bt, bk := math.Inf(1), 0.0
		for _, o := range r.Vectors {
			if o.TTFTP99[c] > 0 {
				bt = min(bt, o.TTFTP99[c])
			}
			bk = max(bk, o.TokPerSec[c])
		}
		rt, rk := 0.0, 0.0
		if ev.TTFTP99[c] > 0 {
			rt = bt / ev.TTFTP99[c]
		}
		if bk > 0 {
			rk = ev.TokPerSec[c] / bk
		}
		worst = min(worst, rt, rk)
		mean += rt + rk
		n += 2
	}
	mean /= float64(max(n, 1))
	return (worst + mean) / 2, worst, mean
}
