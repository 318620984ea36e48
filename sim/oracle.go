package sim

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/scheduler"
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

// OracleFile is oracle.json: the machine-readable result of trimtab sim
// oracle. Command, Commit and Date are stamped by the caller.
type OracleFile struct {
	Command   string   `json:"command"`
	Commit    string   `json:"commit"`
	Date      string   `json:"date"`
	Seeds     []uint64 `json:"seeds"`
	Budget    int      `json:"budget"`
	Scenarios []string `json:"scenarios"`
	// Scorers name the searched weights, index-aligned with an oracle's
	// Weights; Guard is the scheduler.guard every vector runs under.
	Scorers []string    `json:"scorers"`
	Guard   OracleGuard `json:"guard"`
	// HeldBack is the command of the run whose oracle vectors this run
	// scored instead of searching (OracleConfig.HeldBack); empty for a
	// run that searched.
	HeldBack string `json:"held_back,omitempty"`
	// StartedFrom are the commands of the earlier runs whose oracle
	// vectors the search also started from (OracleConfig.StartFrom).
	StartedFrom []string `json:"started_from,omitempty"`
	// Duration is --duration, each scenario's simulated time ("" for the
	// scenarios' own lengths).
	Duration string `json:"duration,omitempty"`
	// RescoreOf is the command of the search run whose policies this run
	// re-scored (OracleConfig.Rescore); its search fields (budget, the
	// vectors, the starting points, the bests) are that run's.
	RescoreOf    string              `json:"rescore_of,omitempty"`
	Calibrations []OracleCalibration `json:"calibrations"`
}

// OracleGuard is the profile's scheduler.guard (factor 0: none).
type OracleGuard struct {
	Factor      float64 `json:"factor"`
	Slack       float64 `json:"slack"`
	CrowdFactor float64 `json:"crowd_factor"`
	CrowdSlack  float64 `json:"crowd_slack"`
	Unit        string  `json:"unit,omitempty"`
	// WaitFactor and WaitSlack are the guard's wait bound (factor 0: off).
	WaitFactor float64 `json:"wait_factor,omitempty"`
	WaitSlack  float64 `json:"wait_slack,omitempty"`
	// JoinFactor is the wait bound's factor for a request joining a
	// prefill in progress (0: off).
	JoinFactor float64 `json:"join_factor,omitempty"`
}

// OracleCalibration is one engine calibration's column.
type OracleCalibration struct {
	Engine string `json:"engine"`
	Cells  []Cell `json:"cells"`
	// Vectors is how many weight vectors the search evaluated (Invalid
	// more were refused by validation).
	Vectors int `json:"vectors"`
	Invalid int `json:"invalid"`
	// Oracle is the searched vector with the highest score against the
	// final per-cell bests; Policies in the order they were given.
	Oracle   OracleEntry   `json:"oracle"`
	Policies []OracleEntry `json:"policies"`
	// SearchBests are the per-cell bests over the searched vectors
	// alone (over the held-back run's oracle vector in a held-back
	// check), so the policies can be re-scored later without searching
	// again (OracleConfig.Rescore).
	SearchBests []CellBest `json:"search_bests,omitempty"`
}

// CellBest is one cell's best TTFT p99 (ms; 0 where none measured) and
// tok/s, the two the tune objective reads.
type CellBest struct {
	TTFTP99   float64 `json:"ttft_p99_ms"`
	TokPerSec float64 `json:"output_tokens_per_s"`
}

// OracleEntry is one vector or policy on one calibration. Score, Worst
// and Mean are the tune objective (Evaluated) against the per-cell bests
// over every searched vector and every policy of the calibration; Ratio
// is Score ÷ the oracle's Score.
type OracleEntry struct {
	Name    string      `json:"name"`
	Weights []float64   `json:"weights,omitempty"`
	Score   float64     `json:"score"`
	Ratio   float64     `json:"ratio"`
	Worst   float64     `json:"worst"`
	Mean    float64     `json:"mean"`
	Cells   []CellStats `json:"cells"`
}

// CellStats is one cell's seed means (latencies in ms, goodput in
// requests/s within SLO, misses in requests; 0 where nothing was
// measured).
type CellStats struct {
	TTFTP99   float64 `json:"ttft_p99_ms"`
	E2EP99    float64 `json:"e2e_p99_ms"`
	TokPerSec float64 `json:"output_tokens_per_s"`
	Goodput   float64 `json:"goodput"`
	Misses    float64 `json:"misses"`
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

// rescoreOf checks that r is a search run cfg can re-score (same
// scorers, guard, seeds and duration; RunOracle checks the scenarios) and carries its search
// fields into o.
func (o *OracleFile) rescoreOf(r *OracleFile, cfg OracleConfig) error {
	switch {
	case cfg.HeldBack != nil || len(cfg.StartFrom) > 0:
		return fmt.Errorf("oracle: a re-score neither searches nor checks held-back seeds: drop the held-back run and the runs to start from")
	case r.HeldBack != "":
		return fmt.Errorf("oracle: the run to re-score is a held-back check (of %q); re-score its search run", r.HeldBack)
	case !slices.Equal(r.Scorers, o.Scorers):
		return fmt.Errorf("oracle: the re-scored run's scorers %v are not the profile's %v: run the search again", r.Scorers, o.Scorers)
	case r.Guard != o.Guard:
		return fmt.Errorf("oracle: the re-scored run's guard %+v is not the profile's %+v: its vectors ran under another scheduler.guard; run the search again", r.Guard, o.Guard)
	}
	for _, c := range r.Calibrations {
		if len(c.SearchBests) != len(c.Cells) {
			return fmt.Errorf("oracle: the run to re-score has no search bests for calibration %s (written before they were stored): run the search again", c.Engine)
		}
	}
	switch {
	case !slices.Equal(r.Seeds, o.Seeds):
		return fmt.Errorf("oracle: the re-scored run's seeds are %v, not %v: a re-score runs on the search's seeds", r.Seeds, o.Seeds)
	case r.Duration != o.Duration:
		return fmt.Errorf("oracle: the re-scored run's duration is %q, not %q (\"\": the scenarios' own)", r.Duration, o.Duration)
	}
	o.Budget, o.StartedFrom, o.RescoreOf = r.Budget, r.StartedFrom, r.Command
	return nil
}

// oracleOf returns the oracle vector of engine's column (n weights).
func (o *OracleFile) oracleOf(engine string, n int) ([]float64, error) {
	for _, c := range o.Calibrations {
		if c.Engine == engine {
			if len(c.Oracle.Weights) != n {
				return nil, fmt.Errorf("oracle: the earlier run's oracle for %s has %d weights, want %d", engine, len(c.Oracle.Weights), n)
			}
			return slices.Clone(c.Oracle.Weights), nil
		}
	}
	return nil, fmt.Errorf("oracle: the earlier run has no column for calibration %s", engine)
}

// startOf returns the oracle vector of engine's column as a starting
// point over scorers, matched by name (a scorer o did not search at 0),
// named after o's commit; false when o has no column for engine or its
// vector has no weight on any of scorers.
func (o *OracleFile) startOf(engine string, scorers []string) (Candidate, bool) {
	for _, c := range o.Calibrations {
		if c.Engine != engine || len(c.Oracle.Weights) != len(o.Scorers) {
			continue
		}
		w, any := make([]float64, len(scorers)), false
		for i, name := range scorers {
			if j := slices.Index(o.Scorers, name); j >= 0 {
				w[i] = c.Oracle.Weights[j]
				any = any || w[i] != 0
			}
		}
		name := "earlier-oracle"
		if o.Commit != "" {
			name += "-" + o.Commit
		}
		return Candidate{Name: name, Weights: w}, any
	}
	return Candidate{}, false
}

// scoreOracle scores the search's vectors and the policies against the
// per-cell bests over all of them and, with searched (a re-score), over
// searched's SearchBests and the stored cells of its policies not among
// pols, so the table scored is the search's; the oracle is the
// best-scoring vector.
func scoreOracle(engine string, res *TuneResult, pols []*Evaluated, searched *OracleCalibration) OracleCalibration {
	bests := searchBests(res)
	if searched != nil {
		for i := range min(len(bests), len(searched.SearchBests)) {
			b, c := &bests[i], searched.SearchBests[i]
			if c.TTFTP99 > 0 && (b.TTFTP99 == 0 || c.TTFTP99 < b.TTFTP99) {
				b.TTFTP99 = c.TTFTP99
			}
			b.TokPerSec = max(b.TokPerSec, c.TokPerSec)
		}
	}
	all := &TuneResult{Cells: res.Cells, Vectors: append(slices.Clone(res.Vectors), pols...)}
	if searched != nil {
		sb := &Evaluated{Candidate: Candidate{Name: "search-bests"}}
		for _, b := range bests {
			sb.TTFTP99, sb.TokPerSec = append(sb.TTFTP99, b.TTFTP99), append(sb.TokPerSec, b.TokPerSec)
		}
		all.Vectors = append(all.Vectors, sb)
		for _, p := range searched.Policies {
			if slices.ContainsFunc(pols, func(ev *Evaluated) bool { return ev.Name == p.Name }) || len(p.Cells) != len(res.Cells) {
				continue
			}
			st := &Evaluated{Candidate: Candidate{Name: p.Name}}
			for _, c := range p.Cells {
				st.TTFTP99, st.TokPerSec = append(st.TTFTP99, c.TTFTP99), append(st.TokPerSec, c.TokPerSec)
			}
			all.Vectors = append(all.Vectors, st)
		}
	}
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

// searchBests returns the per-cell bests over res's vectors.
func searchBests(res *TuneResult) []CellBest {
	bests := make([]CellBest, len(res.Cells))
	for i := range bests {
		for _, ev := range res.Vectors {
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

// WriteJSON writes o as indented JSON.
func (o *OracleFile) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(o)
}

// maxOracleFile bounds an oracle.json read back.
const maxOracleFile = 64 << 20

// ReadOracleFile reads an oracle.json written by WriteJSON; unknown
// fields are errors.
func ReadOracleFile(path string) (*OracleFile, error) {
	data, err := readBoundedN(path, maxOracleFile)
	if err != nil {
		return nil, err
	}
	return ParseOracleFile(data)
}

// ParseOracleFile decodes oracle.json and checks that every entry has a
// value per cell.
func ParseOracleFile(data []byte) (*OracleFile, error) {
	var o OracleFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return nil, fmt.Errorf("oracle.json: %w", err)
	}
	for _, c := range o.Calibrations {
		for _, e := range append([]OracleEntry{c.Oracle}, c.Policies...) {
			if len(e.Cells) != len(c.Cells) {
				return nil, fmt.Errorf("oracle.json: calibrations[%s].%s: %d cells, want %d", c.Engine, e.Name, len(e.Cells), len(c.Cells))
			}
		}
		if len(c.SearchBests) != 0 && len(c.SearchBests) != len(c.Cells) {
			return nil, fmt.Errorf("oracle.json: calibrations[%s].search_bests: %d cells, want %d", c.Engine, len(c.SearchBests), len(c.Cells))
		}
	}
	return &o, nil
}

func readBoundedN(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes", path, limit)
	}
	return data, nil
}

func oracleGuard(g scheduler.GuardConfig) OracleGuard {
	o := OracleGuard{Factor: g.Factor, Slack: g.Slack, CrowdFactor: g.CrowdFactor, CrowdSlack: g.CrowdSlack, Unit: g.Unit}
	if g.WaitFactor > 0 {
		o.WaitFactor, o.WaitSlack = g.WaitFactor, g.WaitSlack
	}
	o.JoinFactor = g.JoinFactor
	return o
}
