package sim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/scorers"
)

// OracleSuite is the default scenario suite of trimtab sim oracle: one
// shipped scenario per mechanism the suite tests, the cheaper variant
// where two test the same (hot-prefix-burst-open for the herd, whose
// open-loop arrivals are the guard's case; small-pool-burst for a burst
// on a small pool; shared-prefix-ladder-control, the outside anchor's
// zero-reuse control, for load balance alone), without heterogeneous (a
// mixed pool is a calibration here), rotating-hot-prefix and scale-up
// (hot-prefix bursts pod-loss and mixed-day cover). It costs about two
// thirds of the whole shipped suite's CPU time (docs/benchmarks.md,
// Reproduction).
var OracleSuite = []string{
	"chat", "shared-prefix", "hot-prefix-burst-open", "mixed-day", "pod-loss", "small-pool",
	"small-pool-burst", "shared-prefix-ladder", "shared-prefix-ladder-control", "mooncake-trace",
}

// OracleConfig is a per-fleet oracle run: for each engine calibration, the
// best static vector over Profile's scorers (Tune), then every policy on
// the same cells and seeds, all scored with the tune objective against
// the same per-cell bests.
type OracleConfig struct {
	// Scenarios are scenario names or files (LoadScenarios), loaded
	// afresh for each calibration; Duration, when > 0, scales each.
	Scenarios []string
	Duration  time.Duration
	// Engines are calibration names or files (LoadEngine), in column order.
	Engines []string
	// Policies are evaluated beside the oracle, in row order.
	Policies []Policy
	// Profile supplies the searched scorers, its guard and its picker
	// (OracleProfile); the loop is off for every vector.
	Profile *configs.File
	Seed    uint64
	Seeds   int
	// Budget is the vectors Tune evaluates per calibration (default 40).
	Budget   int
	Parallel int
	// HeldBack, when set, is an earlier run (oracle.json) whose oracle
	// vectors are scored instead of searching: each calibration runs its
	// oracle vector from HeldBack and the policies, nothing else — the
	// held-back check of oracles chosen on other seeds. Every engine must
	// have a column in it and its scorers must be the profile's.
	HeldBack *OracleFile
	// StartFrom are earlier runs (oracle.json) whose oracle vectors the
	// search also starts from, after the baselines, each mapped onto the
	// profile's scorers by name (a scorer the earlier run did not search
	// at 0): a search whose own starting points moved (a new trade shape,
	// a new scorer) then cannot end weaker than an oracle found before on
	// the same calibration for want of starting near it. A calibration an
	// earlier run has no column for starts from the baselines alone. Not
	// with HeldBack, which does not search.
	StartFrom []*OracleFile
	// Rescore, when set, is an earlier search run (oracle.json with its
	// search's per-cell bests) whose policies are run again on its seeds,
	// scenarios and duration and scored against the per-cell bests over
	// its searched vectors (SearchBests) and the policies: the search's
	// own scoring without searching again, for a profile or policy that
	// changed since. Its oracle vector runs again beside the policies.
	// Not with HeldBack or StartFrom.
	Rescore *OracleFile
	// Progress, when set, is called after each vector and each policy.
	Progress func(OracleProgress)
}

// OracleProgress is where an oracle run is: calibration Calibration of
// Calibrations (from 1), step Step of at most Steps in it (the tune's
// vectors, then the policies; a search that converges early skips the
// rest of its budget), named Name.
type OracleProgress struct {
	Calibration, Calibrations int
	Engine                    string
	Step, Steps               int
	Name                      string
}

// OracleSearch is the oracle's search space, its own list rather than
// the shipped profile's scorers, so the shipped profile can gain or lose
// a scorer without moving every oracle: the shipped adaptive profile's
// load and affinity scorers, token-load (the load signal of the field's
// current llm-d baseline) and time-cost with cache_credit 1 (the trade
// law's shape, and a cache-aware cost in seconds as Dynamo and SMG
// weigh), so the oracle is not weaker than any policy it is compared
// with for want of a scorer — and trade-cost, time-cost that also prices
// a twentieth of the decode a pod adds (decode_credit 0.05), the trade
// law's cost on a pool of two GPU generations (docs/adaptive.md, "The
// decode a pod adds"). Entries are matched to
// the shipped profile's scorers by name (the type where no name is set);
// a shipped scorer that matches none, or matches one of another type, is
// an error (TestOracleSearchCoversShipped).
var OracleSearch = []configs.ScorerConfig{
	{Type: scorers.TypePrefix},
	{Type: scorers.TypeQueue},
	{Type: scorers.TypeKVCache},
	{Type: scorers.TypeInFlight},
	{Type: scorers.TypePendingPrefill},
	{Type: scorers.TypeTokenLoad},
	{Type: scorers.TypeTimeCost, Params: map[string]any{"cache_credit": 1.0}},
	{Type: scorers.TypeTimeCost, Name: tradeCost, Params: map[string]any{"cache_credit": 1.0, "decode_credit": 0.05}},
}

// tradeCost is the name of the shipped profile's second time-cost, the
// trade law's cost (configs/adaptive.yaml), and the oracle's
// (OracleSearch).
const tradeCost = "trade-cost"

// OracleProfile returns the profile the oracle searches: the scorers of
// OracleSearch, each starting at the shipped adaptive profile's calm
// weight (0 where it has none) and with its params where it has the
// scorer, under the shipped scheduler.guard and picker, the loop off.
func OracleProfile() (*configs.File, error) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		return nil, fmt.Errorf("oracle profile: %w", err)
	}
	return oracleProfileOf(f)
}

// oracleProfileOf is OracleProfile of the profile f.
func oracleProfileOf(f *configs.File) (*configs.File, error) {
	f = loopOff(f, true)
	f.Adaptive.Trade.Enabled = false
	shipped := f.Scorers
	f.Scorers = nil
	for _, s := range OracleSearch {
		s.Name = scorerName(s)
		zero := 0.0
		s.Weight = &zero
		if i := slices.IndexFunc(shipped, func(c configs.ScorerConfig) bool { return scorerName(c) == s.Name && c.Type == s.Type }); i >= 0 {
			s = shipped[i]
		}
		f.Scorers = append(f.Scorers, s)
	}
	for _, s := range shipped {
		if !slices.ContainsFunc(OracleSearch, func(c configs.ScorerConfig) bool { return scorerName(c) == scorerName(s) && c.Type == s.Type }) {
			return nil, fmt.Errorf("oracle profile: the shipped profile's scorer %q (type %s) is not in the oracle's search space (sim.OracleSearch)", scorerName(s), s.Type)
		}
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("oracle profile: %w", err)
	}
	return f, nil
}

// OracleBaselines are the candidates the oracle's search starts from:
// Baselines of the profile (its own vector, named guard-only since it
// runs with the profile's guard, the load shares and the built-in static
// vectors, each under the guard), then each cost scorer the profile has
// alone (token-load, time-cost, trade-cost) and the trade law's shape when the
// profile has one: adaptive.trade.weights alone, the other scorers at 0
// (configs/adaptive.yaml's: prefix 0.5 : kvcache 3 : trade-cost 16).
func OracleBaselines(f *configs.File) []Candidate {
	base, _ := Baselines(f, PolicyGuardOnly, false)
	for _, name := range []string{scorers.TypeTokenLoad, scorers.TypeTimeCost, tradeCost} {
		if i := slices.IndexFunc(f.Scorers, func(s configs.ScorerConfig) bool { return scorerName(s) == name }); i >= 0 {
			w := make([]float64, len(f.Scorers))
			w[i] = 1
			base = append(base, Candidate{name, w})
		}
	}
	if len(f.Adaptive.Trade.Weights) > 0 {
		w := make([]float64, len(f.Scorers))
		for i, s := range f.Scorers {
			w[i], _ = f.Adaptive.Trade.Weight(scorerName(s))
		}
		base = append(base, Candidate{"trade-shape", w})
	}
	return base
}

// RunOracle runs the oracle for every calibration in turn. It is
// deterministic for given seeds: runs are, and the search's order does
// not depend on timing.
func RunOracle(ctx context.Context, cfg OracleConfig) (*OracleFile, error) {
	if len(cfg.Engines) == 0 {
		return nil, fmt.Errorf("oracle: no engine calibrations")
	}
	if cfg.Profile == nil {
		return nil, fmt.Errorf("oracle: no profile")
	}
	seeds := max(cfg.Seeds, 1)
	out := &OracleFile{Budget: cfg.Budget, Guard: oracleGuard(cfg.Profile.Scheduler.Guard)}
	if out.Budget <= 0 {
		out.Budget = 40
	}
	for k := range seeds {
		out.Seeds = append(out.Seeds, cfg.Seed+uint64(k))
	}
	for _, s := range cfg.Profile.Scorers {
		out.Scorers = append(out.Scorers, scorerName(s))
	}
	base := OracleBaselines(cfg.Profile)
	if cfg.HeldBack != nil {
		if !slices.Equal(cfg.HeldBack.Scorers, out.Scorers) {
			return nil, fmt.Errorf("oracle: the held-back run's scorers %v are not the profile's %v: run the search (without --held-back) with this profile first", cfg.HeldBack.Scorers, out.Scorers)
		}
		if cfg.HeldBack.Guard != out.Guard {
			return nil, fmt.Errorf("oracle: the held-back run's guard %+v is not the profile's %+v: its vectors were searched under another scheduler.guard; run the search again", cfg.HeldBack.Guard, out.Guard)
		}
		if len(cfg.StartFrom) > 0 {
			return nil, fmt.Errorf("oracle: a held-back check does not search, so it has no starting points: drop the earlier runs to start from")
		}
		out.Budget, out.HeldBack, base = 1, cfg.HeldBack.Command, base[:1]
	}
	for _, o := range cfg.StartFrom {
		out.StartedFrom = append(out.StartedFrom, o.Command)
	}
	if cfg.Duration > 0 {
		out.Duration = cfg.Duration.String()
	}
	if r := cfg.Rescore; r != nil {
		if err := out.rescoreOf(r, cfg); err != nil {
			return nil, err
		}
		base = base[:1]
	}
	budget := out.Budget
	if cfg.Rescore != nil {
		budget = 1 // the oracle vector alone; out.Budget is the search's
	}
	steps := max(budget, len(base)+len(cfg.StartFrom)) + len(cfg.Policies)
	for ci, eng := range cfg.Engines {
		scs, err := LoadScenarios(cfg.Scenarios, cfg.Duration)
		if err != nil {
			return nil, err
		}
		if err := ApplyEngine(scs, eng); err != nil {
			return nil, err
		}
		if ci == 0 {
			for _, sc := range scs {
				out.Scenarios = append(out.Scenarios, sc.Name)
			}
			if r := cfg.Rescore; r != nil && !slices.Equal(r.Scenarios, out.Scenarios) {
				return nil, fmt.Errorf("oracle: the re-scored run's scenarios are %v, not %v", r.Scenarios, out.Scenarios)
			}
		}
		engine := scs[0].EngineName
		var searched *OracleCalibration
		if held := cmp.Or(cfg.HeldBack, cfg.Rescore); held != nil {
			w, err := held.oracleOf(engine, len(out.Scorers))
			if err != nil {
				return nil, err
			}
			base = []Candidate{{Name: "oracle", Weights: w}}
		}
		if cfg.Rescore != nil {
			searched = cfg.Rescore.calibration(engine) // oracleOf found the column
		}
		starts := slices.Clip(base)
		for _, o := range cfg.StartFrom {
			if c, ok := o.startOf(engine, out.Scorers); ok {
				starts = append(starts, c)
			}
		}
		report := func(step int, name string) {
			if cfg.Progress != nil {
				cfg.Progress(OracleProgress{Calibration: ci + 1, Calibrations: len(cfg.Engines), Engine: engine, Step: step, Steps: steps, Name: name})
			}
		}
		tc := TuneConfig{Scenarios: scs, Profile: cfg.Profile, Seed: cfg.Seed, Seeds: seeds, Budget: budget, Parallel: cfg.Parallel,
			Progress: func(done, _ int, _ *Evaluated) { report(done, "vector") }}
		res, err := Tune(ctx, tc, starts)
		if err != nil {
			return nil, fmt.Errorf("oracle on %s: %w", engine, err)
		}
		var pevs []*Evaluated
		for i, p := range cfg.Policies {
			evs, err := evaluatePolicies(ctx, tc, []Policy{p})
			if err != nil {
				return nil, fmt.Errorf("oracle on %s: %w", engine, err)
			}
			pevs = append(pevs, evs[0])
			report(len(res.Vectors)+i+1, p.Name)
		}
		oc := scoreOracle(engine, res, pevs, searched)
		if searched != nil {
			if !slices.Equal(oc.Cells, searched.Cells) {
				return nil, fmt.Errorf("oracle: calibration %s: the cells %v are not the re-scored run's %v", engine, oc.Cells, searched.Cells)
			}
			oc.Vectors, oc.Invalid = searched.Vectors, searched.Invalid
		}
		out.Calibrations = append(out.Calibrations, oc)
	}
	return out, nil
}

// scoreOracle scores the search's vectors and the policies against the
// per-cell bests over all of them and, with searched (a re-score), over
// searched's SearchBests and the stored cells of its policies not among
// pols, so the table scored is the search's; the oracle is the
// best-scoring vector.
func scoreOracle(engine string, res *TuneResult, pols []*Evaluated, searched *OracleCalibration) OracleCalibration {
	vecs, stored := res.Vectors, []*Evaluated(nil)
	if searched != nil {
		sb := &Evaluated{Candidate: Candidate{Name: "search-bests"}}
		for _, b := range searched.SearchBests {
			sb.TTFTP99, sb.TokPerSec = append(sb.TTFTP99, b.TTFTP99), append(sb.TokPerSec, b.TokPerSec)
		}
		vecs = append(slices.Clone(res.Vectors), sb)
		for _, p := range searched.Policies {
			if slices.ContainsFunc(pols, func(ev *Evaluated) bool { return ev.Name == p.Name }) || len(p.Cells) != len(res.Cells) {
				continue
			}
			st := &Evaluated{Candidate: Candidate{Name: p.Name}}
			for _, c := range p.Cells {
				st.TTFTP99, st.TokPerSec = append(st.TTFTP99, c.TTFTP99), append(st.TokPerSec, c.TokPerSec)
			}
			stored = append(stored, st)
		}
	}
	bests := searchBests(vecs, len(res.Cells))
	all := &TuneResult{Cells: res.Cells, Vectors: slices.Concat(vecs, pols, stored)}
	cells := make([]int, len(res.Cells))
	for i := range cells {
		cells[i] = i
	}
	entry := func(ev *Evaluated) OracleEntry {
		e := OracleEntry{Name: ev.Name}
		e.Score, e.Worst, e.Mean = all.objective(ev, cells)
		for c := range res.Cells {
			e.Cells = append(e.Cells, CellStats{TTFTP99: ev.TTFTP99[c], E2EP99: at(ev.E2EP99, c), TokPerSec: ev.TokPerSec[c], Goodput: at(ev.Goodput, c), Misses: at(ev.Misses, c)})
		}
		return e
	}
	oc := OracleCalibration{Engine: engine, Cells: res.Cells, Vectors: len(res.Vectors), Invalid: res.Invalid, SearchBests: bests}
	best := math.Inf(-1)
	for _, ev := range res.Vectors {
		if e := entry(ev); e.Score > best {
			best, oc.Oracle = e.Score, e
			oc.Oracle.Weights = slices.Clone(ev.Weights)
		}
	}
	ratio := func(s float64) float64 {
		if best <= 0 {
			return 0
		}
		return s / best
	}
	oc.Oracle.Ratio = ratio(oc.Oracle.Score)
	for _, ev := range pols {
		e := entry(ev)
		e.Ratio = ratio(e.Score)
		oc.Policies = append(oc.Policies, e)
	}
	return oc
}

// searchBests returns the per-cell bests over vecs (n cells each).
func searchBests(vecs []*Evaluated, n int) []CellBest {
	bests := make([]CellBest, n)
	for i := range bests {
		for _, ev := range vecs {
			if t := ev.TTFTP99[i]; t > 0 && (bests[i].TTFTP99 == 0 || t < bests[i].TTFTP99) {
				bests[i].TTFTP99 = t
			}
			bests[i].TokPerSec = max(bests[i].TokPerSec, ev.TokPerSec[i])
		}
	}
	return bests
}

func at(v []float64, i int) float64 {
	if i < len(v) {
		return v[i]
	}
	return 0
}
