package report

import (
	"fmt"
	"os"
	"path/filepath"
)

// Image is one figure of a report: its title, its file's base name, and
// how to draw it.
type Image struct {
	Title string
	File  string // base name, e.g. "bench-<scenario>-….png"
	// Draw renders the figure to the file at path.
	Draw func(path string) error
}

// WriteImages draws every figure of imgs into dir, creating dir when it
// is missing; an error names the figure's file.
func WriteImages(dir string, imgs []Image) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, img := range imgs {
		if err := img.Draw(filepath.Join(dir, img.File)); err != nil {
			return fmt.Errorf("%s: %w", img.File, err)
		}
	}
	return nil
}
