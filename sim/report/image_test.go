package report

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteImages: WriteImages creates the directory, draws every figure
// at dir/File in order, and stops at the first failure with an error that
// names the figure's file.
func TestWriteImages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "img")
	var drawn []string
	write := func(path string) error {
		drawn = append(drawn, path)
		return os.WriteFile(path, []byte("png"), 0o644)
	}
	boom := errors.New("boom")
	imgs := []Image{
		{Title: "a", File: "a.png", Draw: write},
		{Title: "b", File: "b.png", Draw: func(string) error { return boom }},
		{Title: "c", File: "c.png", Draw: write},
	}
	err := WriteImages(dir, imgs)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "b.png") {
		t.Fatalf("error %v, want boom naming b.png", err)
	}
	if len(drawn) != 1 || drawn[0] != filepath.Join(dir, "a.png") {
		t.Errorf("drawn %v, want only %s", drawn, filepath.Join(dir, "a.png"))
	}
	if _, err := os.Stat(filepath.Join(dir, "a.png")); err != nil {
		t.Error(err)
	}
	if err := WriteImages(dir, imgs[:1]); err != nil {
		t.Errorf("rewriting into an existing directory: %v", err)
	}
}

// TestColor: ten distinct colours, then the palette repeats (policy 10
// shares policy 0's colour: 10 mod 10 = 0).
func TestColor(t *testing.T) {
	seen := map[any]int{}
	for i := range 10 {
		if j, ok := seen[Color(i)]; ok {
			t.Errorf("colours %d and %d are the same", j, i)
		}
		seen[Color(i)] = i
	}
	if Color(10) != Color(0) {
		t.Errorf("Color(10) = %v, want Color(0) = %v", Color(10), Color(0))
	}
}
