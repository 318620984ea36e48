//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestConfigImportStopsOnCancel: config import reading an input that never
// ends (a FIFO whose writer stays open) returns once its context is
// cancelled, as main cancels it on SIGTERM.
func TestConfigImportStopsOnCancel(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "endless.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	w, err := os.OpenFile(fifo, os.O_RDWR, 0) // does not wait for a reader
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("apiVersion: llm-d.ai/v1alpha1\n")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	root := newRootCmd()
	root.SetOut(new(bytes.Buffer))
	root.SetErr(new(bytes.Buffer))
	root.SetArgs([]string{"config", "import", fifo})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("config import after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("config import still running 30 s after cancel")
	}
}
