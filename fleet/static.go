package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.yaml.in/yaml/v3"
	"k8s.io/utils/clock"
)

// Static discovers endpoints from a YAML file:
//
//	endpoints:
//	  - address: 10.0.0.7:8000     # required, host:port
//	    name: vllm-0               # optional
//	    models: [llama-3.1-8b]     # optional; empty serves any model
//	    labels: {zone: a}          # optional
//	    capacity: 2                # optional relative weight, default 1
//	    engine: sglang             # optional, default scrape.engine
//
// The file is watched (fsnotify on its directory, so editors' rename-over
// and ConfigMap symlink swaps are seen) and re-read every reload interval
// as a fallback. A bad edit keeps the previous list and is reported to the
// sink's Error with the file, line and field.
type Static struct {
	path           string
	interval       time.Duration
	clock          clock.WithTicker
	log            *slog.Logger
	noWatch        bool   // tests: rely on the periodic re-read alone
	afterFirstRead func() // tests: called after the first list is sent
}

// NewStatic returns a static-file discoverer. clk and log may be nil.
func NewStatic(path string, reload time.Duration, clk clock.WithTicker, log *slog.Logger) *Static {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Static{path: path, interval: reload, clock: clk, log: log}
}

// Run implements Discoverer. A file that cannot be read or parsed at start
// is an error; later bad edits are reported through sink.Error.
func (s *Static) Run(ctx context.Context, sink Sink) error {
	// Watch before the first read, so an edit made just after it is an
	// event, not an edit missed until the next periodic re-read.
	var events <-chan fsnotify.Event
	var errs <-chan error
	w, werr := fsnotify.NewWatcher()
	if s.noWatch && werr == nil {
		w.Close()
		w, werr = nil, errors.New("disabled")
	}
	if werr == nil {
		defer w.Close()
		werr = w.Add(filepath.Dir(s.path))
		events, errs = w.Events, w.Errors
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return fmt.Errorf("endpoints file: %w", err)
	}
	targets, err := ParseStatic(data, s.path)
	if err != nil {
		return err
	}
	last := hashBytes(data)
	sink.Update(targets)
	if s.afterFirstRead != nil {
		s.afterFirstRead()
	}
	if werr != nil {
		sink.Error(fmt.Errorf("endpoints file %s: watch: %w (falling back to re-reading every %v)", s.path, werr, s.interval))
	}
	tick := s.clock.NewTicker(s.interval)
	defer tick.Stop()
	base := filepath.Base(s.path)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			// Any change in the directory may be a ConfigMap's ..data
			// swap; unchanged content is skipped by the hash below.
			if filepath.Base(ev.Name) != base && !bytes.HasPrefix([]byte(filepath.Base(ev.Name)), []byte("..")) {
				continue
			}
		case err := <-errs:
			sink.Error(fmt.Errorf("endpoints file %s: watch: %w", s.path, err))
			continue
		case <-tick.C():
		}
		data, err := os.ReadFile(s.path)
		if err != nil {
			if h := hashBytes([]byte(err.Error())); h != last {
				last = h
				sink.Error(fmt.Errorf("endpoints file: %w", err))
			}
			continue
		}
		h := hashBytes(data)
		if h == last {
			continue
		}
		last = h
		targets, err := ParseStatic(data, s.path)
		if err != nil {
			sink.Error(err)
			continue
		}
		s.log.Info("endpoints file reloaded", "file", s.path, "endpoints", len(targets))
		sink.Update(targets)
	}
}

func hashBytes(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

type staticFile struct {
	Endpoints []staticEndpoint `yaml:"endpoints"`
}

type staticEndpoint struct {
	Address  string            `yaml:"address"`
	Name     string            `yaml:"name"`
	Models   []string          `yaml:"models"`
	Labels   map[string]string `yaml:"labels"`
	Capacity *float64          `yaml:"capacity"`
	Engine   string            `yaml:"engine"`
}

// ParseStatic parses an endpoints file (see Static); file names the source
// in errors, which carry the line and field: `endpoints.yaml: line 7:
// endpoints[2].address: missing port in address`. Every target is Ready.
func ParseStatic(data []byte, file string) ([]Target, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f staticFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file; want an endpoints: list", file)
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// Line numbers of each list item, for semantic errors.
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root)
	lines := itemLines(&root)
	line := func(i int) string {
		if i < len(lines) {
			return fmt.Sprintf("line %d: ", lines[i])
		}
		return ""
	}
	if f.Endpoints == nil {
		return nil, fmt.Errorf("%s: endpoints: missing (an empty pool is written endpoints: [])", file)
	}
	seen := map[string]int{}
	out := make([]Target, 0, len(f.Endpoints))
	var errs []error
	for i, e := range f.Endpoints {
		bad := func(field, msg string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %sendpoints[%d].%s: %s", file, line(i), i, field, fmt.Sprintf(msg, args...)))
		}
		host, port, err := net.SplitHostPort(e.Address)
		switch {
		case e.Address == "":
			bad("address", "required")
		case err != nil:
			bad("address", "%v", err)
		case host == "":
			bad("address", "%q has no host", e.Address)
		default:
			if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
				bad("address", "%q: port must be 1…65535", e.Address)
			}
		}
		if j, dup := seen[e.Address]; dup && e.Address != "" {
			bad("address", "%q already listed as endpoints[%d]", e.Address, j)
		}
		seen[e.Address] = i
		t := Target{Address: e.Address, Name: e.Name, Labels: e.Labels, Engine: e.Engine, Ready: true, Capacity: 1}
		if e.Capacity != nil {
			if !(*e.Capacity > 0) || *e.Capacity > 1e6 {
				bad("capacity", "%v, want > 0", *e.Capacity)
			}
			t.Capacity = *e.Capacity
		}
		for j, m := range e.Models {
			if m == "" {
				bad(fmt.Sprintf("models[%d]", j), "empty model name")
			}
		}
		if len(e.Models) > 0 {
			t.Models = e.Models
		}
		if e.Engine != "" {
			if _, ok := EngineMapping(e.Engine); !ok {
				bad("engine", "%q, want one of %v", e.Engine, Engines())
			}
		}
		out = append(out, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// itemLines returns the line of each item of the top-level endpoints list.
func itemLines(root *yaml.Node) []int {
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil
	}
	m := root.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "endpoints" && m.Content[i+1].Kind == yaml.SequenceNode {
			var lines []int
			for _, it := range m.Content[i+1].Content {
				lines = append(lines, it.Line)
			}
			return lines
		}
	}
	return nil
}
