package bench

import (
	"os"
	"path/filepath"

	"github.com/trimtab/trimtab/sim"
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
	if err := writeAtomic(filepath.Join(dir, rep.Scenario.Name+".md"), func(f *os.File) error {
		return rep.WriteMarkdown(f, img, command, setup)
	}); err != nil {
		return err
	}
	sf := sim.SummaryFile{Runs: rep.Summaries()}
	return writeAtomic(filepath.Join(dir, "summary.json"), func(f *os.File) error { return sf.Write(f) })
}

func writeAtomic(path string, fn func(*os.File) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	werr := fn(f)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return werr
	}
	return os.Rename(tmp, path)
}
