package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
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
	name       string
	drain      time.Duration
	idle       time.Duration // keep-alive idle timeout
	maxConns   int           // open connections; 0 is unlimited
	retryAfter time.Duration // Retry-After of the answer over maxConns
	mu         sync.Mutex
	ln         net.Listener
	addr       string
	active     sync.WaitGroup
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
		IdleTimeout:       s.idle,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	ln := s.ln
	if s.maxConns > 0 {
		ln = &capListener{Listener: ln, slots: make(chan struct{}, s.maxConns), full: connsFull(s.retryAfter)}
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
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

// connsFull renders the answer written to a connection over the cap
// before it is closed.
func connsFull(retryAfter time.Duration) []byte {
	b := ErrConnections.JSON()
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: " +
		retryAfterValue(retryAfter) + "\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + string(b))
}

// capListener holds at most cap(slots) connections open. A connection
// over the cap is answered 503 and closed at once rather than left
// waiting in the accept queue behind idle keep-alive connections.
type capListener struct {
	net.Listener
	slots chan struct{}
	full  []byte // connsFull
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &capConn{Conn: c, slots: l.slots}, nil
		default:
			_, _ = c.Write(l.full) // a fresh socket's send buffer takes it without blocking
			_ = c.Close()
		}
	}
}

// capConn gives its slot back when closed (once, however often Close is
// called).
type capConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}
