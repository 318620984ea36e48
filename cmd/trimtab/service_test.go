package main

import (
	"testing"
	"time"
)

// TestServeRunWaitsForItsStopper: Run starts a goroutine that stops the
// servers when a background part fails; Run returns only after it has
// exited. The hook holds that goroutine back until Run has returned or
// holdFor has passed: a Run that waits returns after the hold, a Run that
// does not returns first and the hook sees it.
func TestServeRunWaitsForItsStopper(t *testing.T) {
	const holdFor = time.Second // a Run that does not wait returns well within it
	returned := make(chan struct{})
	exited := make(chan bool, 1) // true: the stopper exited after Run returned
	ts := startService(t, startFakeFleet(t, 1), false, func(o *serviceOptions) {
		o.StopperExit = func() {
			select {
			case <-returned:
				exited <- true
			case <-time.After(holdFor):
				exited <- false
			}
		}
	})
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	close(returned)
	select {
	case late := <-exited:
		if late {
			t.Fatal("service.Run returned while its stopper goroutine was still running")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stopper goroutine never exited")
	}
}
