package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// listener binds addr unless ln is already set.
func listen(ln net.Listener, addr string) (net.Listener, error) {
	if ln != nil {
		return ln, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("proxy: listen %s: %w", addr, err)
	}
	return l, nil
}

// httpServer runs an http.Server on a listener with a graceful drain.
// Request contexts derive from a base context that is cancelled when the
// drain deadline passes, which cuts upstream requests still running; Run
// then waits for every handler (tracked by active) to return.
type httpServer struct {
	name   string
	drain  time.Duration
	mu     sync.Mutex
	ln     net.Listener
	addr   string
	active sync.WaitGroup
}

func (s *httpServer) bind() (net.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ln, err := listen(s.ln, s.addr)
	if err != nil {
		return nil, err
	}
	s.ln = ln
	return ln.Addr(), nil
}

// track wraps h so Run can wait for handlers after a forced close.
func (s *httpServer) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.active.Add(1)
		defer s.active.Done()
		h.ServeHTTP(w, r)
	})
}

func (s *httpServer) run(ctx context.Context, h http.Handler) error {
	if _, err := s.bind(); err != nil {
		return err
	}
	base, cut := context.WithCancel(context.Background())
	defer cut()
	srv := &http.Server{
		Handler:           s.track(h),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		cut()
		s.active.Wait()
		return fmt.Errorf("proxy: %s server: %w", s.name, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.drain)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		cut() // past the drain deadline: cut what still runs
		_ = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	cut()
	s.active.Wait()
	if errors.Is(err, context.DeadlineExceeded) {
		return nil // the drain deadline is the documented way to end
	}
	return err
}
