package sim

// oracle.json: the file trimtab sim oracle writes and reads back (a
// held-back check, a re-score, the runs to start from), its checks
// against a run's configuration and its bounded parsing.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/trimtab/trimtab/scheduler"
)

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
