package sim

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// LoadScenario reads a scenario file. A name without a path separator
// and without a file of that name is looked up among the shipped scenarios
// ("hot-prefix-burst" or "hot-prefix-burst.yaml").
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		abs, _ := filepath.Abs(filepath.Dir(path))
		return ParseScenario(data, abs)
	}
	if !errors.Is(err, fs.ErrNotExist) || strings.ContainsRune(path, os.PathSeparator) {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	sc, serr := ShippedScenario(strings.TrimSuffix(path, ".yaml"))
	if serr != nil {
		return nil, fmt.Errorf("scenario: %w (and no shipped scenario %q; shipped: %s)", err, path, strings.Join(Shipped(), ", "))
	}
	return sc, nil
}

// Shipped returns the names of the embedded scenarios, sorted.
func Shipped() []string { return embeddedNames(shipped, "scenarios") }

// embeddedNames returns the names of the YAML files in dir of fsys,
// without their extension, sorted.
func embeddedNames(fsys embed.FS, dir string) []string {
	ents, _ := fsys.ReadDir(dir)
	var names []string
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// ShippedScenario returns one embedded scenario by name. Its relative
// paths (a trace) resolve inside the binary, so it runs from any
// directory.
func ShippedScenario(name string) (*Scenario, error) {
	data, err := shipped.ReadFile("scenarios/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("scenario: no shipped scenario %q", name)
	}
	sc, err := ParseScenario(data, "")
	if err != nil {
		return nil, err
	}
	sc.embedded = true
	return sc, nil
}

// LoadTrace reads the trace of a trace workload — override when set, else
// the scenario's path (relative to the scenario file, or inside the
// binary for a shipped scenario; ".gz" files are decompressed) — keeping
// the entries whose timestamps fall within Duration and at most
// workload.trace_max_requests of them.
func (s *Scenario) LoadTrace(override string) ([]TraceEntry, error) {
	name := override
	var (
		r   io.ReadCloser
		err error
	)
	switch {
	case override != "":
		r, err = os.Open(override)
	case s.traceData != nil:
		r = io.NopCloser(bytes.NewReader(s.traceData))
	case s.embedded && !filepath.IsAbs(s.Workload.Trace):
		name = "scenarios/" + s.Workload.Trace
		r, err = shipped.Open(name)
	default:
		name = s.Workload.Trace
		if !filepath.IsAbs(name) && s.dir != "" {
			name = filepath.Join(s.dir, name)
		}
		r, err = os.Open(name)
	}
	if err != nil {
		return nil, fmt.Errorf("workload.trace: %w", err)
	}
	defer r.Close()
	var in io.Reader = r
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("workload.trace: %s: %w", name, err)
		}
		defer zr.Close()
		in = zr
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	entries, err := ParseTrace(sc, s.Workload.TraceMaxRequests)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	limit := s.Duration.Milliseconds()
	n := 0
	for n < len(entries) && entries[n].Timestamp < limit {
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: no entry before %v of trace time", name, s.Duration)
	}
	if s.Workload.OutputTokens < 1 {
		for i := range entries[:n] {
			if entries[i].OutputLength == 0 {
				return nil, fmt.Errorf("%s: entry %d has output_length 0 (unknown): set workload.output_tokens, the output length to replay it with", name, i+1)
			}
		}
	}
	return entries[:n], nil
}
