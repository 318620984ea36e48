package proxy

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/scheduler"
)

// Scheduler is what the data path needs from the scheduler;
// *scheduler.Scheduler implements it. Pick's contract is the scheduler's:
// the caller must finish a returned Decision with Done exactly once.
type Scheduler interface {
	Pick(ctx context.Context, req *scheduler.Request) (*scheduler.Decision, error)
	// Pool returns the installed pool (for /v1/models, pass-through and
	// readiness).
	Pool() *scheduler.Pool
}

// AdminView is what the admin server shows; *scheduler.Scheduler
// implements it.
type AdminView interface {
	Pool() *scheduler.Pool
	Weights() *scheduler.Weights
	Scorers() []scheduler.ScorerEntry
}

// ControlView is what /debug/weights shows of the control loop besides the
// weights in force. It must be safe for concurrent use.
type ControlView interface {
	// Signal returns the detector's latest signal in [0,1] and when it
	// was measured; ok is false before the first measurement.
	Signal() (value float64, at time.Time, ok bool)
	// BaseWeights returns the profile weights in force (the reloaded ones
	// after a reload), index-aligned with AdminView.Scorers. The caller
	// may keep but not modify the slice.
	BaseWeights() []float64
}

// Deps are the collaborators of the servers. Each constructor uses the
// fields it needs; nil optional fields get harmless defaults.
type Deps struct {
	// Scheduler is required by NewHTTP and NewExtProc.
	Scheduler Scheduler
	// Flow, when set, puts flow control between the servers and the
	// Scheduler (it must pick from the same one, and its Run must be
	// running); nil picks directly at no cost.
	Flow *flow.Controller
	// View is required by NewAdmin (usually the same *scheduler.Scheduler).
	View AdminView
	// Control, when set, gives /debug/weights the live signal and the base
	// weights after reloads; nil shows the signal the weights in force
	// were made from and the scheduler's base weights.
	Control ControlView
	// Gatherer is what /metrics exposes; nil serves an empty registry.
	Gatherer prometheus.Gatherer
	// Registerer receives the server's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger; nil discards.
	Logger *slog.Logger
	// Clock stamps Request.Arrival and measures latency; nil is the real
	// clock. When it also implements clock.WithDelayedExecution (as the
	// real and fake clocks do) it times the HTTP proxy's stream idle
	// timeout; otherwise the real clock does.
	Clock clock.PassiveClock
	// Recorder keeps recent decisions for /debug/decisions; nil records
	// nothing. Share one between the servers and the admin server.
	Recorder *Recorder
	// Traffic records the scheduled requests for /debug/trace; nil
	// records nothing. Share one between the servers and the admin server.
	Traffic *TrafficRecorder
	// Tracer, when set, gives every scheduled request a span (see
	// tracing.go); nil traces nothing and adds no work to the request path.
	Tracer trace.Tracer
	// Listener, when set, is used instead of listening on the configured
	// address (tests pass 127.0.0.1:0). Run closes it. It belongs to one
	// server: give each constructor its own Deps value.
	Listener net.Listener
}

func (d *Deps) defaults() {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Clock == nil {
		d.Clock = clock.RealClock{}
	}
}
