package report

import (
	"fmt"
	"image/color"
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

// palette has ten distinguishable colours (Tableau 10).
var palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
	{188, 189, 34, 255}, {23, 190, 207, 255},
}

// Color returns the report palette's colour i (modulo ten, Tableau 10's
// order): the colour of the i-th policy of a figure, so up to ten
// policies never share one.
func Color(i int) color.Color { return palette[i%len(palette)] }
