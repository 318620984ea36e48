package main

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/proxy"
	"github.com/trimtab/trimtab/scheduler"
)

// retuneSource gives the slow loop (control.Retune) its inputs: the
// traffic recorder's window, taken and restarted at every run, and the
// calibrator's engine.
type retuneSource struct {
	traffic *proxy.TrafficRecorder
	cal     *fleet.Calibrator
	sched   *scheduler.Scheduler
}

// TakeWindow writes the window and opens a new one; the requests recorded
// between the two are lost to both.
func (r retuneSource) TakeWindow() ([]byte, int, error) {
	if !r.traffic.Enabled() {
		return nil, 0, errors.New("traffic recording is off: set server.admin.record.enabled: true")
	}
	var b bytes.Buffer
	if _, err := r.traffic.WriteTrace(&b); err != nil {
		return nil, 0, fmt.Errorf("writing the window: %w", err)
	}
	r.traffic.Restart()
	eps := 0
	if p := r.sched.Pool(); p != nil {
		eps = len(p.Endpoints)
	}
	return b.Bytes(), eps, nil
}

// Engine returns the calibrator's engine file and how many endpoints'
// calibration is learned.
func (r retuneSource) Engine() ([]byte, int) { return r.cal.EngineFile(), r.cal.Learned() }
