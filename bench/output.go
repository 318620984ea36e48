package bench

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"

	"github.com/trimtab/trimtab/sim/report"
)

// WriteDir writes dir/<scenario>.md, dir/img/bench-real-*.png (unless
// noPlots) and dir/summary.json (every run, sim's schema; written to a
// temporary file and renamed, so a reader never sees half of it).
func (rep *Report) WriteDir(dir, command, setup string, noPlots bool) error {
	img := "img/"
	if noPlots {
		img = "-"
	} else {
		if err := os.MkdirAll(filepath.Join(dir, "img"), 0o755); err != nil {
			return err
		}
		if err := rep.WriteImages(filepath.Join(dir, "img")); err != nil {
			return err
		}
	}
	if err := report.WriteFile(filepath.Join(dir, rep.Scenario.Name+".md"), func(w io.Writer) error {
		return rep.WriteMarkdown(w, img, command, setup)
	}); err != nil {
		return err
	}
	sf := report.SummaryFile{Runs: rep.Summaries()}
	if err := sf.WriteFile(filepath.Join(dir, "summary.json")); err != nil {
		return err
	}
	return report.WriteFile(filepath.Join(dir, "timeline-"+rep.Scenario.Name+".json"), rep.writeTimeline)
}

// timelineRun is one run's router timeline in timeline-<scenario>.json.
type timelineRun struct {
	Policy  string         `json:"policy"`
	Level   float64        `json:"level"`
	Repeat  int            `json:"repeat"`
	Order   int            `json:"order"`
	Samples []timelinePt   `json:"samples"`
	Changes []timelineMode `json:"mode_changes"`
	Served  map[string]int `json:"served_by_pod"`
}

type timelinePt struct {
	T       float64            `json:"t_s"`
	Mode    string             `json:"mode"`
	Signal  float64            `json:"signal"`
	Weights map[string]float64 `json:"weights"`
}

type timelineMode struct {
	T    float64 `json:"t_s"`
	From string  `json:"from"`
	To   string  `json:"to"`
}

// writeTimeline writes every run's router mode and weights timeline (from
// its admin server, seconds from the run's start) and the requests each
// pod served.
func (rep *Report) writeTimeline(f io.Writer) error {
	var out []timelineRun
	for _, r := range rep.Runs {
		tr := timelineRun{Policy: r.Policy, Level: r.Level, Repeat: r.Repeat, Order: r.Order, Samples: []timelinePt{}, Changes: []timelineMode{},
			Served: r.stats(r.Requests, 0).ByEndpoint}
		for _, m := range r.Modes {
			tr.Samples = append(tr.Samples, timelinePt{m.T.Seconds(), m.Mode, m.Signal, m.Weights})
		}
		for _, c := range r.ModeChanges {
			tr.Changes = append(tr.Changes, timelineMode{c.T.Seconds(), c.From, c.To})
		}
		out = append(out, tr)
	}
	enc := json.NewEncoder(f)
	enc.SetIndent("", " ")
	return enc.Encode(map[string]any{"scenario": rep.Scenario.Name, "runs": out})
}
