package replica

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"
)

const (
	// tokenHeader carries "Bearer <token>" on every sync stream.
	tokenHeader = "authorization"
	// tokenMinBytes and tokenMaxBytes bound the shared secret (after
	// trimming white space).
	tokenMinBytes = 32
	tokenMaxBytes = 4096
	// tokenRecheck is how often the token file is checked for a change.
	tokenRecheck = 10 * time.Second
	// resolveEvery bounds how often the peers' host names are resolved
	// again for an inbound stream from an address not among them.
	resolveEvery = time.Second
	// logEvery is how often a repeated refusal or stream error is logged;
	// the lines held back in between are counted in the next one.
	logEvery = 10 * time.Second
	// maxIDBytes bounds a peer's replica id.
	maxIDBytes = 128
	// maxErrBytes bounds an error kept for /debug/peers.
	maxErrBytes = 256
)

// Auth modes, as /debug/peers and trimtab_replica_auth_info name them.
const (
	authMTLS      = "mtls"
	authToken     = "token"
	authMTLSToken = "mtls+token"
	authInsecure  = "insecure"
)

// readToken reads and checks a token file: printable ASCII, tokenMinBytes
// to tokenMaxBytes after trimming white space. Errors name
// replicas.token_file and never quote the token.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("replicas.token_file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 2*tokenMaxBytes+1))
	if err != nil {
		return "", fmt.Errorf("replicas.token_file: %s: %w", path, err)
	}
	if len(b) > 2*tokenMaxBytes {
		return "", fmt.Errorf("replicas.token_file: %s is larger than %d bytes; a token holds at most %d bytes", path, 2*tokenMaxBytes, tokenMaxBytes)
	}
	tok := bytes.TrimSpace(b)
	switch {
	case len(tok) == 0:
		return "", fmt.Errorf("replicas.token_file: %s is empty", path)
	case len(tok) < tokenMinBytes:
		return "", fmt.Errorf("replicas.token_file: %s holds %d bytes, want at least %d (e.g. head -c 32 /dev/urandom | base64)", path, len(tok), tokenMinBytes)
	case len(tok) > tokenMaxBytes:
		return "", fmt.Errorf("replicas.token_file: %s holds %d bytes, want at most %d", path, len(tok), tokenMaxBytes)
	}
	for i, c := range tok {
		if c < 0x21 || c > 0x7e {
			return "", fmt.Errorf("replicas.token_file: %s: byte %d is not printable ASCII (want no spaces or control characters inside the token)", path, i)
		}
	}
	return string(tok), nil
}

// tokenSource is the shared secret from replicas.token_file, read again
// when the file changes. Safe for concurrent use.
type tokenSource struct {
	path string
	clk  clock.PassiveClock
	log  *slog.Logger

	mu      sync.Mutex
	tok     string
	sums    [][sha256.Size]byte // accepted: the current token, then the previous one
	checked time.Time
	mod     time.Time
	size    int64
}

func newTokenSource(path string, clk clock.PassiveClock, log *slog.Logger) (*tokenSource, error) {
	ts := &tokenSource{path: path, clk: clk, log: log}
	tok, err := readToken(path)
	if err != nil {
		return nil, err
	}
	ts.set(tok)
	if fi, err := os.Stat(path); err == nil {
		ts.mod, ts.size = fi.ModTime(), fi.Size()
	}
	ts.checked = clk.Now()
	return ts, nil
}

func (ts *tokenSource) set(tok string) {
	sum := sha256.Sum256([]byte(tok))
	if len(ts.sums) > 0 {
		ts.sums = [][sha256.Size]byte{sum, ts.sums[0]}
	} else {
		ts.sums = [][sha256.Size]byte{sum}
	}
	ts.tok = tok
}

// refresh reads the file again when tokenRecheck passed and it changed.
// Caller holds mu.
func (ts *tokenSource) refresh() {
	now := ts.clk.Now()
	if now.Sub(ts.checked) < tokenRecheck {
		return
	}
	ts.checked = now
	fi, err := os.Stat(ts.path)
	if err != nil || (fi.ModTime().Equal(ts.mod) && fi.Size() == ts.size) {
		return
	}
	tok, err := readToken(ts.path)
	if err != nil {
		ts.log.Warn("replica token file changed but is unusable; keeping the previous token", "err", err)
		return
	}
	ts.mod, ts.size = fi.ModTime(), fi.Size()
	if tok != ts.tok {
		ts.set(tok)
		ts.log.Info("replica token file changed; the previous token stays accepted until the next change", "token_file", ts.path)
	}
}

// current returns the token a dialler sends.
func (ts *tokenSource) current() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.refresh()
	return ts.tok
}

// accepts reports whether md carries exactly one "Bearer <token>" with the
// current or the previous token, comparing in constant time.
func (ts *tokenSource) accepts(md metadata.MD) bool {
	vals := md.Get(tokenHeader)
	if len(vals) != 1 {
		return false
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.refresh()
	match := 0
	for _, s := range ts.sums {
		match |= subtle.ConstantTimeCompare(sum[:], s[:])
	}
	return match == 1
}

// streamAuth is the sync server's stream interceptor: with a token
// configured, a stream without it is refused before anything is read.
func (r *Replica) streamAuth(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if r.tokens != nil {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if !r.tokens.accepts(md) {
			r.refused(reasonUnauthenticated, remoteAddr(ss.Context()), "")
			return status.Error(codes.Unauthenticated, "replica sync: missing or wrong token (replicas.token_file)")
		}
	}
	return handler(srv, ss)
}

func remoteAddr(ctx context.Context) string {
	if p, ok := grpcpeer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// peerSet decides which addresses may stream to this replica: those of the
// current peers (configured or discovered), host names resolved.
type peerSet struct {
	mu       sync.Mutex
	resolved map[string][]netip.Addr // host name → addresses
	last     time.Time               // of the last resolution
}

// knownAddr reports whether the stream on ctx comes from one of the peers'
// addresses. Under mutual TLS every stream is known: the handshake
// checked the peer's certificate.
func (r *Replica) knownAddr(ctx context.Context) bool {
	if r.tlsClient != nil {
		return true
	}
	p, ok := grpcpeer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return false
	}
	ap, err := netip.ParseAddrPort(p.Addr.String())
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	var names []string
	for _, pr := range r.peerList() {
		host, _, err := net.SplitHostPort(pr.addr)
		if err != nil {
			continue
		}
		if a, err := netip.ParseAddr(host); err == nil {
			if a.Unmap() == ip {
				return true
			}
			continue
		}
		names = append(names, host)
	}
	if len(names) == 0 {
		return false
	}
	ps := &r.allowed
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.has(names, ip) {
		return true
	}
	now := r.clk.Now()
	if !ps.last.IsZero() && now.Sub(ps.last) < resolveEvery {
		return false
	}
	ps.last = now
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	next := make(map[string][]netip.Addr, len(names))
	for _, h := range names {
		addrs, err := net.DefaultResolver.LookupNetIP(rctx, "ip", h)
		if err != nil {
			next[h] = ps.resolved[h] // keep what it was
			continue
		}
		for i := range addrs {
			addrs[i] = addrs[i].Unmap()
		}
		next[h] = addrs
	}
	ps.resolved = next
	return ps.has(names, ip)
}

func (ps *peerSet) has(names []string, ip netip.Addr) bool {
	for _, h := range names {
		for _, a := range ps.resolved[h] {
			if a == ip {
				return true
			}
		}
	}
	return false
}

// limiter lets one log line through per logEvery and counts the ones it
// holds back. Safe for concurrent use.
type limiter struct {
	mu   sync.Mutex
	next time.Time
	held int
}

// allow reports whether to log now, and how many lines were held back
// since the last one logged.
func (l *limiter) allow(now time.Time) (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.held++
		return 0, false
	}
	held, l.held, l.next = l.held, 0, now.Add(logEvery)
	return held, true
}

// truncate bounds s (a peer's error or id) for logs and /debug/peers.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
