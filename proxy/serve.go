package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
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
	perClient  int           // open connections per client address; 0 is unlimited
	exempt     []netip.Prefix
	retryAfter time.Duration        // Retry-After of the answers over the caps
	refused    func(perClient bool) // counts a refused connection; nil counts nothing
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
	if s.maxConns > 0 || s.perClient > 0 {
		cl := &capListener{Listener: ln, full: connsFull(ErrConnections, s.retryAfter), refused: s.refused}
		if s.maxConns > 0 {
			cl.slots = make(chan struct{}, s.maxConns)
		}
		if s.perClient > 0 {
			cl.perClient, cl.exempt = s.perClient, s.exempt
			cl.clientFull = connsFull(ErrClientConnections, s.retryAfter)
			cl.clients = make(map[netip.Addr]int)
		}
		ln = cl
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

// connsFull renders e, the answer written to a connection over a cap
// before it is closed.
func connsFull(e *Error, retryAfter time.Duration) []byte {
	b := e.JSON()
	return []byte("HTTP/1.1 " + strconv.Itoa(e.Status) + " " + http.StatusText(e.Status) +
		"\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: " +
		retryAfterValue(retryAfter) + "\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + string(b))
}

// capListener holds at most cap(slots) connections open (none when slots
// is nil), and at most perClient from one client address (none when 0),
// except from exempt addresses. A connection over a cap is answered (full:
// 503, clientFull: 429) and closed at once rather than left waiting in the
// accept queue behind idle keep-alive connections. The per-client counts
// hold only addresses with open connections, so they are bounded by the
// open connections.
type capListener struct {
	net.Listener
	slots      chan struct{}
	full       []byte // connsFull(ErrConnections)
	perClient  int
	exempt     []netip.Prefix
	clientFull []byte // connsFull(ErrClientConnections)
	refused    func(perClient bool)

	mu      sync.Mutex
	clients map[netip.Addr]int // open connections per client address
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cc := &capConn{Conn: c, l: l}
		if l.slots != nil {
			select {
			case l.slots <- struct{}{}:
				cc.slot = true
			default:
				l.refuse(c, l.full, false)
				continue
			}
		}
		if l.perClient > 0 {
			if a, ok := clientAddr(c); ok && !inPrefixes(l.exempt, a) {
				if !l.take(a) {
					if cc.slot {
						<-l.slots
					}
					l.refuse(c, l.clientFull, true)
					continue
				}
				cc.client, cc.counted = a, true
			}
		}
		return cc, nil
	}
}

// refuse answers c with msg and closes it.
func (l *capListener) refuse(c net.Conn, msg []byte, perClient bool) {
	if l.refused != nil {
		l.refused(perClient)
	}
	_, _ = c.Write(msg) // a fresh socket's send buffer takes it without blocking
	_ = c.Close()
}

// take counts a connection from a, unless a is at the per-client cap.
func (l *capListener) take(a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.clients[a]
	if n >= l.perClient {
		return false
	}
	l.clients[a] = n + 1
	return true
}

// give uncounts a connection from a.
func (l *capListener) give(a netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.clients[a] - 1; n > 0 {
		l.clients[a] = n
	} else {
		delete(l.clients, a)
	}
}

// clientAddr is c's remote IP address (IPv4-mapped addresses as IPv4, no
// zone); false when c is not a TCP connection.
func clientAddr(c net.Conn) (netip.Addr, bool) {
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	a := ta.AddrPort().Addr().Unmap().WithZone("")
	return a, a.IsValid()
}

func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// capConn gives its slot and its client count back when closed (once,
// however often Close is called).
type capConn struct {
	net.Conn
	l       *capListener
	slot    bool       // holds one of l.slots
	client  netip.Addr // counted in l.clients when counted
	counted bool
	once    sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.slot {
			<-c.l.slots
		}
		if c.counted {
			c.l.give(c.client)
		}
	})
	return err
}
