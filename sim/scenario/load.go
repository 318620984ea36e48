package scenario

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

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
	case s.fsys != nil && !filepath.IsAbs(s.Workload.Trace):
		name = path.Join(s.dir, s.Workload.Trace)
		r, err = s.fsys.Open(name)
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
