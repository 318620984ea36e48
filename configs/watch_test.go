package configs

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestWatchTrigger: after Ready, each trigger loads the file and applies
// it; a file that does not validate is refused and logged, and Apply is
// not called.
func TestWatchTrigger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profile.yaml")
	write := func(weight string) {
		if err := os.WriteFile(path, []byte("scorers:\n  - type: queue\n    weight: "+weight+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("2")
	var (
		mu      sync.Mutex
		applied []float64
		logs    bytes.Buffer
	)
	trigger, ready, done := make(chan os.Signal), make(chan struct{}), make(chan error, 1)
	w := Watch{
		Path: path, Trigger: trigger, Ready: func() { close(ready) },
		// A clock that never moves: file events never end their debounce,
		// so only the triggers reload.
		Clock:  clocktesting.NewFakeClock(time.Unix(0, 0)),
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)),
		Apply: func(f *File) error {
			mu.Lock()
			defer mu.Unlock()
			applied = append(applied, *f.Scorers[0].Weight)
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- w.Run(ctx) }()
	<-ready
	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s", what)
			}
		}
	}
	nApplied := func(n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return len(applied) == n }
	}
	trigger <- os.Interrupt
	wait("first reload", nApplied(1))
	write("-1")
	trigger <- os.Interrupt
	wait("refusal logged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), "profile reload refused")
	})
	write("5")
	trigger <- os.Interrupt
	wait("third reload", nApplied(2))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []float64{2, 5}; !slices.Equal(applied, want) {
		t.Errorf("applied weights %v, want %v (the -1 refused)", applied, want)
	}
	if !strings.Contains(logs.String(), "weight: must be a finite number") {
		t.Errorf("log lacks the refusal with its reason:\n%s", logs.String())
	}
}

// lockedWriter writes to w under mu, which the test also holds to read.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
