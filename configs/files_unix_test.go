//go:build unix

package configs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestReadFileCancelledOnAPipe: a read of a FIFO whose writer never
// closes returns once the context is cancelled (SIGTERM in cmd).
func TestReadFileCancelledOnAPipe(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "endless.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// O_RDWR opens without waiting for a reader; the writer never closes.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("plugins:\n")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := ReadFile(ctx, fifo, MaxFileBytes); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("ReadFile returned before cancel: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("ReadFile after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ReadFile still blocked 30 s after cancel")
	}
}
