package fleet

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestParseStatic(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    []Target
		wantErr string
	}{
		{
			name: "full",
			yaml: `endpoints:
  - address: 10.0.0.1:8000
    name: vllm-0
    models: [llama]
    labels: {zone: a}
    capacity: 2
  - address: "[fd00::1]:8000"
    engine: sglang
`,
			want: []Target{
				{Address: "10.0.0.1:8000", Name: "vllm-0", Models: []string{"llama"}, Labels: map[string]string{"zone": "a"}, Capacity: 2, Ready: true},
				{Address: "[fd00::1]:8000", Engine: "sglang", Capacity: 1, Ready: true},
			},
		},
		{name: "empty pool", yaml: "endpoints: []\n", want: []Target{}},
		{name: "empty file", yaml: "", wantErr: "e.yaml: empty file"},
		{name: "no list", yaml: "other: 1\n", wantErr: "field other not found"},
		{name: "unknown field", yaml: "endpoints:\n  - address: 1.2.3.4:80\n    adress: x\n", wantErr: "line 3: field adress not found"},
		{name: "missing port", yaml: "endpoints:\n  - address: 1.2.3.4:80\n  - address: 1.2.3.4\n", wantErr: "e.yaml: line 3: endpoints[1].address: address 1.2.3.4: missing port in address"},
		{name: "bad port", yaml: "endpoints:\n  - address: 1.2.3.4:0\n", wantErr: "line 2: endpoints[0].address"},
		{name: "duplicate", yaml: "endpoints:\n  - address: a:1\n  - address: a:1\n", wantErr: "endpoints[1].address: \"a:1\" already listed as endpoints[0]"},
		{name: "capacity", yaml: "endpoints:\n  - address: a:1\n    capacity: -1\n", wantErr: "endpoints[0].capacity"},
		{name: "engine", yaml: "endpoints:\n  - address: a:1\n    engine: llamacpp\n", wantErr: "endpoints[0].engine"},
		{name: "type error", yaml: "endpoints:\n  - address: a:1\n    models: llama\n", wantErr: "line 3"},
		{name: "not yaml", yaml: "endpoints: [\n", wantErr: "e.yaml: yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatic([]byte(tt.yaml), "e.yaml")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// recordingSink collects what a discoverer reports.
type recordingSink struct {
	mu      sync.Mutex
	updates [][]Target
	errs    []error
	changed chan struct{}
}

func newRecordingSink() *recordingSink { return &recordingSink{changed: make(chan struct{}, 1)} }

func (s *recordingSink) Update(ts []Target) {
	s.mu.Lock()
	s.updates = append(s.updates, ts)
	s.mu.Unlock()
	s.poke()
}

func (s *recordingSink) Error(err error) {
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
	s.poke()
}

func (s *recordingSink) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *recordingSink) counts() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.updates), len(s.errs)
}

func (s *recordingSink) last() []Target {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.updates) == 0 {
		return nil
	}
	return s.updates[len(s.updates)-1]
}

// waitFor polls cond with a bounded real-time deadline, calling tick (if
// any) between polls.
func waitFor(t *testing.T, what string, cond func() bool, tick func()) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(5 * time.Millisecond):
		}
		if tick != nil {
			tick()
		}
	}
}

func addrs(ts []Target) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Address)
	}
	return strings.Join(s, " ")
}

func TestStaticWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "endpoints.yaml")
	write := func(s string) {
		// write-then-rename, as editors and ConfigMap updates do
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("endpoints:\n  - address: 10.0.0.1:8000\n")
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	s := NewStatic(path, time.Minute, clk, nil)
	sink := runStatic(t, s)
	waitFor(t, "initial list", func() bool { return addrs(sink.last()) == "10.0.0.1:8000" }, nil)

	// A good edit is picked up by the watcher (the fake clock never ticks).
	write("endpoints:\n  - address: 10.0.0.1:8000\n  - address: 10.0.0.2:8000\n")
	waitFor(t, "second endpoint", func() bool { return addrs(sink.last()) == "10.0.0.1:8000 10.0.0.2:8000" }, nil)

	// A bad edit keeps the list and reports the line and field.
	n, _ := sink.counts()
	write("endpoints:\n  - address: 10.0.0.1:8000\n  - address: 10.0.0.3\n")
	waitFor(t, "error", func() bool { _, e := sink.counts(); return e > 0 }, nil)
	if u, _ := sink.counts(); u != n {
		t.Errorf("a bad edit produced an update")
	}
	sink.mu.Lock()
	msg := sink.errs[0].Error()
	sink.mu.Unlock()
	if !strings.Contains(msg, "endpoints.yaml: line 3: endpoints[1].address") {
		t.Errorf("error %q does not name file, line and field", msg)
	}

	write("endpoints:\n  - address: 10.0.0.4:8000\n")
	waitFor(t, "fixed list", func() bool { return addrs(sink.last()) == "10.0.0.4:8000" }, nil)
}

// TestStaticEditAfterFirstRead: an edit made right after the first read,
// before any tick, is picked up: the watch is in place before the read.
func TestStaticEditAfterFirstRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(path, []byte("endpoints:\n  - address: 10.0.0.1:8000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewStatic(path, time.Minute, clocktesting.NewFakeClock(time.Unix(0, 0)), nil)
	s.afterFirstRead = func() {
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte("endpoints:\n  - address: 10.0.0.2:8000\n"), 0o644); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Error(err)
		}
	}
	sink := runStatic(t, s)
	waitFor(t, "the edit made after the first read", func() bool { return addrs(sink.last()) == "10.0.0.2:8000" }, nil)
}

func TestStaticPeriodicReload(t *testing.T) {
	// Without a watcher, the periodic re-read alone picks up edits.
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(path, []byte("endpoints:\n  - address: 10.0.0.1:8000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	s := NewStatic(path, time.Minute, clk, nil)
	s.noWatch = true
	sink := runStatic(t, s)
	waitFor(t, "initial list", func() bool { return addrs(sink.last()) == "10.0.0.1:8000" }, nil)
	if err := os.WriteFile(path, []byte("endpoints:\n  - address: 10.0.0.9:8000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reloaded list", func() bool { return addrs(sink.last()) == "10.0.0.9:8000" }, func() { clk.Step(time.Minute) })
	// the watcher-less start is reported once
	if _, e := sink.counts(); e != 1 {
		t.Errorf("errors = %d, want 1 (watch disabled)", e)
	}
}

func TestStaticBadFileAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.yaml")
	if err := os.WriteFile(path, []byte("endpoints:\n  - address: nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := NewStatic(path, time.Minute, nil, nil).Run(context.Background(), newRecordingSink())
	if err == nil || !strings.Contains(err.Error(), "endpoints[0].address") {
		t.Fatalf("err = %v", err)
	}
	err = NewStatic(filepath.Join(t.TempDir(), "missing.yaml"), time.Minute, nil, nil).Run(context.Background(), newRecordingSink())
	if err == nil {
		t.Fatal("missing file: no error")
	}
}

func FuzzParseStatic(f *testing.F) {
	for _, s := range []string{
		"endpoints:\n  - address: 10.0.0.1:8000\n    name: a\n    models: [x]\n    labels: {k: v}\n    capacity: 2\n    engine: sglang\n",
		"endpoints: []\n",
		"endpoints:\n  - address: \"[::1]:80\"\n",
		"endpoints: [\n",
		"",
		"endpoints:\n  - address: a:1\n  - address: a:1\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, err := ParseStatic(data, "f.yaml")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, tg := range ts {
			if _, _, err := net.SplitHostPort(tg.Address); err != nil || seen[tg.Address] {
				t.Fatalf("accepted bad or duplicate address %q", tg.Address)
			}
			seen[tg.Address] = true
			if !(tg.Capacity > 0) || !tg.Ready {
				t.Fatalf("accepted target %+v", tg)
			}
		}
	})
}

// runStatic runs s against a recording sink until the test ends.
func runStatic(t *testing.T, s *Static) *recordingSink {
	t.Helper()
	sink := newRecordingSink()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, sink) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sink
}
