package scenario

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: Parse never panics on a scenario file, and a scenario it
// accepts stays valid (Validate passes again) with what a run relies on:
// a positive duration, at least one phase and one load level.
func FuzzParse(f *testing.F) {
	for _, glob := range []string{"../scenarios/*.yaml", "../scenarios/held-out/*.yaml", "../scenarios/warm/*.yaml"} {
		paths, _ := filepath.Glob(glob)
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("name: x\nduration: 1m\nworkload: {kind: uniform, question_tokens: 1, output_tokens: 1}\nload: {levels: [1]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		s, err := Parse(data, "")
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted, then invalid: %v", err)
		}
		if s.Duration <= 0 || len(s.Phases) == 0 || len(s.Load.Levels) == 0 {
			t.Fatalf("accepted duration %v, %d phases, %d levels", s.Duration, len(s.Phases), len(s.Load.Levels))
		}
	})
}
