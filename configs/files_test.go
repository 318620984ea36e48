package configs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckFilesEndpointsFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "endpoints:\n  - {address: 10.0.0.1:8000}\n")
	bad := write("bad.yaml", "endpoints:\n  - {address: 10.0.0.1:8000}\n  - {address: 10.0.0.2:0}\n")
	for _, tt := range []struct {
		name, section, want string
	}{
		{"good", "endpoints: {mode: static, file: " + good + "}\n", ""},
		{"missing", "endpoints: {mode: static, file: " + dir + "/gone.yaml}\n", "endpoints.file: open " + dir + "/gone.yaml: no such file or directory"},
		{"bad entry", "endpoints: {mode: static, file: " + bad + "}\n", "endpoints.file: " + bad + `: line 3: endpoints[1].address: "10.0.0.2:0": port must be 1…65535`},
		{"no endpoints section", "", ""},
		// Kubernetes modes name no file.
		{"pods", "endpoints: {mode: pods, namespace: x, selector: app=x, target_port: 8000}\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse([]byte("scorers:\n  - {type: queue, weight: 1}\n" + tt.section))
			if err != nil {
				t.Fatal(err)
			}
			err = f.CheckFiles()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckFiles: %v", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Errorf("CheckFiles: %v\nwant %s", err, tt.want)
			}
		})
	}
}

func TestLoadRecognisesAnEndpointsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "eps.yaml")
	if err := os.WriteFile(p, []byte("endpoints:\n  - {address: 10.0.0.1:8000}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p+": this is a static endpoints file") || strings.Contains(err.Error(), "expected a map") {
		t.Errorf("Load(endpoints file) = %v, want it to say it is an endpoints file", err)
	}
	if !IsEndpointsFile([]byte("endpoints: []\n")) || IsEndpointsFile([]byte("endpoints: {mode: static}\n")) || IsEndpointsFile([]byte("{")) {
		t.Error("IsEndpointsFile: a list is an endpoints file, a map is a profile section, bad YAML neither")
	}
}

// TestReadFileBounded: a file over the limit is refused naming the file
// and the limit, without reading it whole; a cancelled context stops a
// read before it starts (files_unix_test.go: one on a pipe that never ends).
func TestReadFileBounded(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(context.Background(), big, MaxFileBytes); err == nil || err.Error() != big+": larger than the 4 MiB limit for a configuration file" {
		t.Errorf("ReadFile(4 MiB + 1) = %v", err)
	}
	small := filepath.Join(dir, "small.yaml")
	if err := os.WriteFile(small, []byte("x: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(context.Background(), small, MaxFileBytes); err != nil || string(b) != "x: 1\n" {
		t.Errorf("ReadFile(small) = %q, %v", b, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ReadFile(ctx, small, MaxFileBytes); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadFile(cancelled) = %v, want context.Canceled", err)
	}
}
