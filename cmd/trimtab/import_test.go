package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/configs"
)

// config import writes a profile that config validate's loader accepts,
// and names what it could not carry over on standard error.
func TestConfigImportCommand(t *testing.T) {
	in := filepath.Join("..", "..", "configs", "testdata", "llm-d", "mixed.yaml")
	outFile := filepath.Join(t.TempDir(), "imported.yaml")
	for _, args := range [][]string{{"config", "import", in}, {"config", "import", in, "-o", outFile}} {
		root := newRootCmd()
		var stdout, stderr bytes.Buffer
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		profile := stdout.Bytes()
		if len(args) == 5 {
			if stdout.Len() != 0 {
				t.Errorf("with -o, stdout got %q", stdout.String())
			}
			var err error
			if profile, err = os.ReadFile(outFile); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := configs.Parse(profile); err != nil {
			t.Errorf("%v: profile does not validate: %v", args, err)
		}
		if !strings.Contains(stderr.String(), "not carried over: plugins[1] decode-filter: not mapped") {
			t.Errorf("%v: stderr does not name decode-filter:\n%s", args, stderr.String())
		}
	}
}

func TestConfigImportCommandBadInput(t *testing.T) {
	in := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(in, []byte("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := newRootCmd()
	root.SetOut(new(bytes.Buffer))
	root.SetErr(new(bytes.Buffer))
	root.SetArgs([]string{"config", "import", in})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "bad.yaml: plugins[0].type: required") {
		t.Errorf("error %v, want it to name the file and plugins[0].type", err)
	}
}

// TestConfigImportBoundsInput: an input over configs.MaxImportBytes is
// refused naming the file and the limit, before it is parsed (a 44 MB
// file used to take 6.4 GB).
func TestConfigImportBoundsInput(t *testing.T) {
	in := filepath.Join(t.TempDir(), "huge.yaml")
	body := []byte("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n")
	for len(body) <= configs.MaxImportBytes {
		body = append(body, "- {type: queue-scorer, name: q}\n"...)
	}
	if err := os.WriteFile(in, body, 0o644); err != nil {
		t.Fatal(err)
	}
	root := newRootCmd()
	root.SetOut(new(bytes.Buffer))
	root.SetErr(new(bytes.Buffer))
	root.SetArgs([]string{"config", "import", in})
	err := root.Execute()
	if want := in + ": larger than the 1 MiB limit for a configuration file"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}
