package fakeserver

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestServePool: bad sizes are refused naming the problem; a pool runs
// until its context is cancelled and then returns nil.
func TestServePool(t *testing.T) {
	for _, tt := range []struct {
		port, n int
		want    string
	}{
		{8000, 0, "0 servers, want at least 1"},
		{65535, 2, "does not leave room for 2 servers"},
		{-1, 1, "does not leave room"},
	} {
		if err := ServePool(context.Background(), DefaultConfig(), Deps{}, "127.0.0.1", tt.port, tt.n); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("port %d, %d servers: %v, want an error containing %q", tt.port, tt.n, err, tt.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServePool(ctx, DefaultConfig(), Deps{}, "127.0.0.1", 0, 2) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after cancel: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pool did not stop within 10 s of cancellation")
	}
}
