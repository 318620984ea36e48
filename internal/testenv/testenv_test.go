package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	found := func(string) (string, error) { return "/usr/bin/tool", nil }
	missing := func(string) (string, error) { return "", exec.ErrNotFound }
	for _, tt := range []struct {
		name      string
		e2e       bool
		look      func(string) (string, error)
		wantPath  string
		wantFatal bool
		wantMsg   []string // substrings of the message; none when found
	}{
		{"found, e2e off", false, found, "/usr/bin/tool", false, nil},
		{"found, e2e on", true, found, "/usr/bin/tool", false, nil},
		{"missing, e2e off: skip with the hint", false, missing, "", false, []string{"tool is not installed", "apt-get install tool", "skipping", E2E + "=1"}},
		{"missing, e2e on: fail", true, missing, "", true, []string{"tool is not installed", "apt-get install tool", E2E + "=1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path, msg, fatal := find("tool", "apt-get install tool", tt.e2e, tt.look)
			if path != tt.wantPath || fatal != tt.wantFatal || (msg == "") != (tt.wantMsg == nil) {
				t.Fatalf("find = %q, %q, fatal %v; want %q, fatal %v", path, msg, fatal, tt.wantPath, tt.wantFatal)
			}
			for _, s := range tt.wantMsg {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q lacks %q", msg, s)
				}
			}
		})
	}
}

// TestProgram drives Program through a real testing.T in a subtest: a
// program that cannot exist skips without E2E and fails with it.
func TestProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("Program skips every caller under -short; this test needs the full run")
	}
	const name = "trimtab-testenv-no-such-program"
	t.Setenv(E2E, "")
	var ran bool
	t.Run("skip", func(t *testing.T) {
		Program(t, name, "nothing to install")
		ran = true
	})
	if ran {
		t.Error("Program returned for a missing program instead of skipping")
	}
	t.Setenv(E2E, "1")
	// A failing subtest would fail this test too, so the fatal branch is
	// checked through find (TestFind); here only the found path is: the
	// test binary itself, named by its path.
	if got := Program(t, os.Args[0], "nothing to install"); got != os.Args[0] {
		t.Errorf("Program(%q) = %q", os.Args[0], got)
	}
}
