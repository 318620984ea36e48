package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runValidate runs `trimtab config validate files...` and returns its
// output and whether it exited 1.
func runValidate(t *testing.T, files ...string) (string, bool) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"config", "validate"}, files...))
	err := root.Execute()
	var ee exitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("config validate: %v", err)
	}
	return out.String(), err != nil
}

func writeTestFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigValidateChecksEndpointsFile: a profile naming a missing or bad
// static endpoints file fails validation (serve would fail at start), and
// an endpoints file given on its own is validated as one.
func TestConfigValidateChecksEndpointsFile(t *testing.T) {
	dir := t.TempDir()
	good := writeTestFile(t, dir, "good-eps.yaml", "endpoints:\n  - {address: 127.0.0.1:8000}\n  - {address: 127.0.0.1:8001}\n")
	bad := writeTestFile(t, dir, "bad-eps.yaml", "endpoints:\n  - {address: 127.0.0.1:8000}\n  - {address: 127.0.0.1}\n")
	profile := func(name, eps string) string {
		return writeTestFile(t, dir, name, "scorers:\n  - {type: queue, weight: 1}\nendpoints: {mode: static, file: "+eps+"}\n")
	}
	for _, tt := range []struct {
		name, file string
		fail       bool
		want       []string
	}{
		{"profile with good endpoints", profile("p-good.yaml", good), false, []string{"OK   " + dir + "/p-good.yaml"}},
		{"profile naming a missing file", profile("p-missing.yaml", filepath.Join(dir, "nope.yaml")), true,
			[]string{"FAIL " + dir + "/p-missing.yaml: endpoints.file: open " + dir + "/nope.yaml: no such file or directory"}},
		{"profile naming a bad file", profile("p-bad.yaml", bad), true,
			[]string{"FAIL " + dir + "/p-bad.yaml: endpoints.file: " + bad + ": line 3: endpoints[1].address: address 127.0.0.1: missing port in address"}},
		{"endpoints file on its own", good, false, []string{"OK   " + good + " (endpoints file: 2 endpoints)"}},
		{"bad endpoints file on its own", bad, true, []string{"FAIL " + bad + ": line 3: endpoints[1].address: address 127.0.0.1: missing port in address"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, failed := runValidate(t, tt.file)
			if failed != tt.fail {
				t.Errorf("exit 1 = %v, want %v; output:\n%s", failed, tt.fail, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output\n%s\ndoes not contain\n%s", out, w)
				}
			}
			if strings.Contains(out, "expected a map or struct") {
				t.Errorf("output speaks of mapstructure types:\n%s", out)
			}
		})
	}
}
