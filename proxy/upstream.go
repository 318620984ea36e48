package proxy

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// errStreamIdle is the read error of an endpoint's response body cut after
// the stream idle timeout.
var errStreamIdle = errors.New("no response bytes from the endpoint within http.stream_idle_timeout")

// upstreamBody reads an endpoint's response body under the stream idle
// timeout (HTTPConfig.StreamIdleTimeout): a Read that waits longer than
// idle for bytes cancels the attempt's outbound request, and that Read
// (or the next) fails with errStreamIdle. The timer runs only while a Read
// waits on the endpoint, so a slow client never counts against it. Not
// safe for concurrent use; Close stops the timer and cancels the attempt.
type upstreamBody struct {
	body    io.ReadCloser
	clk     clock.WithDelayedExecution
	idle    time.Duration
	cancel  context.CancelFunc // the attempt's outbound context
	timer   clock.Timer        // armed while a Read waits; nil before the first
	expired atomic.Bool

	peeked  bool // peek read the next Read's result into its buffer
	peekN   int
	peekErr error
}

func newUpstreamBody(body io.ReadCloser, clk clock.WithDelayedExecution, idle time.Duration, cancel context.CancelFunc) *upstreamBody {
	return &upstreamBody{body: body, clk: clk, idle: idle, cancel: cancel}
}

func (b *upstreamBody) expire() {
	b.expired.Store(true)
	b.cancel()
}

// Read reads from the endpoint, for at most the idle timeout. After peek
// it returns what peek read, which is already in p: the caller must pass
// the buffer it gave peek.
func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.peeked {
		b.peeked = false
		return b.peekN, b.peekErr
	}
	if b.expired.Load() {
		return 0, errStreamIdle
	}
	if b.timer == nil {
		b.timer = b.clk.AfterFunc(b.idle, b.expire)
	} else {
		b.timer.Reset(b.idle)
	}
	n, err := b.body.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF && b.expired.Load() {
		err = errStreamIdle
	}
	return n, err
}

// peek reads the body's first bytes into buf; the next Read(buf) returns
// the same result again.
func (b *upstreamBody) peek(buf []byte) (int, error) {
	n, err := b.Read(buf)
	b.peeked, b.peekN, b.peekErr = true, n, err
	return n, err
}

// timedOut reports whether the idle timeout cut the body.
func (b *upstreamBody) timedOut() bool { return b.expired.Load() }

// Close stops the timer, closes the body and cancels the attempt.
func (b *upstreamBody) Close() error {
	if b.timer != nil {
		b.timer.Stop()
	}
	err := b.body.Close()
	b.cancel()
	return err
}
