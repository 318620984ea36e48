package replica

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/replica/peerload"
	"github.com/trimtab/trimtab/replica/replicapb"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// snapshotChunk bounds the hashes of one snapshot message (8 bytes each:
// 512 KiB, well under gRPC's 4 MiB message limit).
const snapshotChunk = 1 << 16

// Deps are a replica's collaborators. Nil fields get defaults: the real
// clock, discarded logs, no metrics, a listener on Config.Listen.
type Deps struct {
	Clock      clock.WithTicker
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Listener, when set, is where the sync server accepts (tests).
	Listener net.Listener
}

// Replica is one router replica's end of the sync: the server its peers
// stream to, and a dialler per peer it streams to.
type Replica struct {
	replicapb.UnimplementedReplicaServer

	cfg     Config
	sched   *scheduler.Scheduler
	prefix  *prefix.Scorer // nil: the profile has no prefix scorer
	picks   *prefix.PickLog
	loads   *peerload.Peers
	syncKey string
	clk     clock.WithTicker
	log     *slog.Logger
	m       *metrics
	lis     net.Listener

	serverCreds credentials.TransportCredentials
	tlsClient   *tls.Config  // nil without TLS
	tokens      *tokenSource // nil without token_file
	auth        string       // authMTLS, authToken, authMTLSToken or authInsecure
	allowed     peerSet
	refusalLogs map[string]*limiter // by refusal reason
	eps         atomic.Pointer[endpointSet]

	// peers are the addresses this replica streams to (SetPeers changes
	// them); runCtx and running are Run's, so SetPeers can start a new
	// peer's goroutine, which running waits for.
	peerMu  sync.Mutex
	peers   []*peer
	runCtx  context.Context
	running sync.WaitGroup

	mu      sync.Mutex
	inbound map[string]*inbound // by replica id
}

// inbound is what this replica knows of a peer that streams to it.
// Guarded by Replica.mu.
type inbound struct {
	id       string
	streams  int
	lastSeen time.Time
	batches  uint64
	lag      time.Duration // of the last batch
	expired  bool          // its loads were taken back
	// tokens and refilled are its picks' token bucket.
	tokens   float64
	refilled time.Time
}

// endpointSet is the pool's addresses, for checking what peers name.
type endpointSet struct {
	pool *scheduler.Pool
	set  map[string]struct{}
}

// endpoints returns the current pool's addresses; shared, do not modify.
func (r *Replica) endpoints() map[string]struct{} {
	pool := r.sched.Pool()
	if s := r.eps.Load(); s != nil && s.pool == pool {
		return s.set
	}
	s := &endpointSet{pool: pool, set: make(map[string]struct{}, len(pool.Pointers()))}
	for _, e := range pool.Pointers() {
		s.set[e.Address] = struct{}{}
	}
	r.eps.Store(s)
	return s.set
}

// New builds a replica for sched. It attaches a pick log to the profile's
// prefix scorer with the largest weight, the first of those on a tie
// (prefix.Synced; only that one is synced), and opens nothing yet.
func New(cfg Config, sched *scheduler.Scheduler, deps Deps) (*Replica, error) {
	cfg.Enabled = true
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ID == "" {
		return nil, errors.New("replicas.id: empty; name this replica (serve defaults it to the host name)")
	}
	r := &Replica{
		cfg:     cfg,
		sched:   sched,
		loads:   peerload.NewPeers(sched),
		clk:     deps.Clock,
		log:     deps.Logger,
		lis:     deps.Listener,
		inbound: map[string]*inbound{},
		syncKey: "no-prefix",

		refusalLogs: map[string]*limiter{},
	}
	for _, reason := range refusalReasons {
		r.refusalLogs[reason] = &limiter{}
	}
	if r.clk == nil {
		r.clk = clock.RealClock{}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if p, i := prefix.Synced(sched.Scorers()); p != nil {
		r.prefix = p
		r.syncKey = sched.Scorers()[i].Name + ":" + p.SyncKey()
	}
	var err error
	if r.picks, err = prefix.NewPickLog(cfg.PickLogPicks, cfg.PickLogHashes); err != nil {
		return nil, fmt.Errorf("replicas: %w", err)
	}
	if cfg.TLS.Enabled() {
		if err := r.loadTLS(); err != nil {
			return nil, err
		}
	}
	if cfg.TokenFile != "" {
		if r.tokens, err = newTokenSource(cfg.TokenFile, r.clk, r.log); err != nil {
			return nil, err
		}
	}
	switch {
	case r.tlsClient != nil && r.tokens != nil:
		r.auth = authMTLSToken
	case r.tlsClient != nil:
		r.auth = authMTLS
	case r.tokens != nil:
		r.auth = authToken
	default:
		r.auth = authInsecure
	}
	for _, addr := range cfg.Peers {
		r.peers = append(r.peers, newPeer(r, addr))
	}
	if r.m, err = newMetrics(r, deps.Registerer); err != nil {
		return nil, err
	}
	// Attached last: nothing is logged before New succeeded.
	if r.prefix != nil {
		r.prefix.SetPickLog(r.picks)
	}
	return r, nil
}

func (r *Replica) loadTLS() error {
	t := r.cfg.TLS
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return fmt.Errorf("replicas.tls: cert_file / key_file: %w", err)
	}
	caPEM, err := os.ReadFile(t.CAFile)
	if err != nil {
		return fmt.Errorf("replicas.tls.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("replicas.tls.ca_file: %s holds no PEM certificate", t.CAFile)
	}
	r.serverCreds = credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	})
	r.tlsClient = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13, ServerName: t.ServerName}
	return nil
}

// clientCreds returns the transport credentials for dialling addr.
func (r *Replica) clientCreds(addr string) credentials.TransportCredentials {
	if r.tlsClient == nil {
		return insecure.NewCredentials()
	}
	c := r.tlsClient.Clone()
	if c.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = host
		}
	}
	return credentials.NewTLS(c)
}

// Addr returns the sync server's address once Run listens (nil before).
func (r *Replica) Addr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lis == nil {
		return nil
	}
	return r.lis.Addr()
}

// Listen opens the sync server's listener if Deps gave none; Run calls it.
func (r *Replica) Listen() (net.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lis == nil {
		l, err := net.Listen("tcp", r.cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("replicas.listen: %w", err)
		}
		r.lis = l
	}
	return r.lis.Addr(), nil
}

// Run serves the sync protocol, streams to every peer and expires silent
// peers until ctx is cancelled; then it stops the server (open streams are
// cut), waits for every goroutine it started and takes back every peer's
// counts. It returns an error only when the server cannot listen or fails.
func (r *Replica) Run(ctx context.Context) error {
	if _, err := r.Listen(); err != nil {
		return err
	}
	if r.auth == authInsecure {
		r.log.Warn("REPLICA SYNC IS NOT AUTHENTICATED (replicas.insecure: true): any client that reaches replicas.listen from a peer's address can feed this replica picks and loads and steer its routing; set replicas.tls or replicas.token_file",
			"listen", r.lis.Addr().String())
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(16 << 20),
		grpc.MaxHeaderListSize(16 << 10),
		grpc.StreamInterceptor(r.streamAuth),
		// Dead dialers are found by keepalive; diallers ping every 10 s.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: max(r.cfg.PeerTimeout, time.Second)}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if r.serverCreds != nil {
		opts = append(opts, grpc.Creds(r.serverCreds))
	}
	gs := grpc.NewServer(opts...)
	replicapb.RegisterReplicaServer(gs, r)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := gs.Serve(r.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("replica: sync server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		gs.Stop() // bidirectional streams never end on their own
		return nil
	})
	g.Go(func() error { r.flushLoop(gctx); return nil })
	g.Go(func() error { r.expireLoop(gctx); return nil })
	r.peerMu.Lock()
	r.runCtx = gctx
	for _, p := range r.peers {
		r.startPeer(p)
	}
	r.peerMu.Unlock()
	err := g.Wait()
	r.peerMu.Lock()
	r.runCtx = nil // SetPeers starts nothing from here on
	r.peerMu.Unlock()
	r.running.Wait()
	r.mu.Lock()
	for id := range r.inbound {
		r.loads.Expire(id)
	}
	r.mu.Unlock()
	return err
}

// startPeer starts p's dialler under Run's context. Caller holds peerMu
// and Run is running.
func (r *Replica) startPeer(p *peer) {
	ctx, cancel := context.WithCancel(r.runCtx)
	p.stop, p.done = cancel, make(chan struct{})
	r.running.Add(1)
	go func() {
		defer r.running.Done()
		defer close(p.done)
		p.run(ctx)
	}()
}

// SetPeers replaces the peer addresses (Kubernetes peer discovery calls it
// with every change): new addresses are dialled at once, dropped ones'
// streams are closed (their batches are discarded), kept ones are left
// alone. It may be called before or during Run. An address that is not
// host:port is an error naming it, and nothing changes.
func (r *Replica) SetPeers(addrs []string) error {
	for i, a := range addrs {
		if err := checkHostPort(a); err != nil {
			return fmt.Errorf("replica: peer %d: %w", i, err)
		}
	}
	r.peerMu.Lock()
	old := map[string]*peer{}
	for _, p := range r.peers {
		old[p.addr] = p
	}
	next := make([]*peer, 0, len(addrs))
	for _, a := range addrs {
		if p, ok := old[a]; ok {
			next = append(next, p)
			delete(old, a)
			continue
		}
		if slices.ContainsFunc(next, func(p *peer) bool { return p.addr == a }) {
			continue
		}
		p := newPeer(r, a)
		if r.runCtx != nil {
			r.startPeer(p)
		}
		next = append(next, p)
	}
	r.peers = next
	r.peerMu.Unlock()
	for _, p := range old {
		if p.stop != nil {
			p.stop()
			<-p.done
		}
		r.log.Info("replica peer removed", "peer", p.addr)
	}
	return nil
}

// peerList returns the current peers; the slice is not modified later.
func (r *Replica) peerList() []*peer {
	r.peerMu.Lock()
	defer r.peerMu.Unlock()
	return r.peers
}

// flushLoop sends a batch to every peer each FlushInterval when there is
// something new, and a heartbeat at least every PeerTimeout / 3.
func (r *Replica) flushLoop(ctx context.Context) {
	t := r.clk.NewTicker(r.cfg.FlushInterval)
	defer t.Stop()
	var (
		chains   []prefix.Chain
		loads    []peerload.Load
		prev     []peerload.Load
		lastSent time.Time
	)
	heartbeat := r.cfg.PeerTimeout / 3
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		now := r.clk.Now()
		chains = r.picks.Drain(chains)
		loads = peerload.Local(r.sched.Pool(), loads[:0])
		if len(chains) == 0 && slices.Equal(loads, prev) && now.Sub(lastSent) < heartbeat {
			continue
		}
		prev = append(prev[:0], loads...)
		lastSent = now
		msg := batchMessage(chains, loads, now)
		for _, p := range r.peerList() {
			p.enqueue(msg, len(chains))
		}
	}
}

func batchMessage(chains []prefix.Chain, loads []peerload.Load, now time.Time) *replicapb.Message {
	b := &replicapb.Batch{SentUnixNano: now.UnixNano()}
	b.Chains = make([]*replicapb.Chain, len(chains))
	for i, c := range chains {
		b.Chains[i] = &replicapb.Chain{Endpoint: c.Endpoint, Hashes: slices.Clone(c.Hashes)}
	}
	b.Loads = make([]*replicapb.Load, len(loads))
	for i, l := range loads {
		b.Loads[i] = &replicapb.Load{Endpoint: l.Endpoint, InFlight: l.InFlight, PendingPrefill: l.PendingPrefill}
	}
	return &replicapb.Message{Body: &replicapb.Message_Batch{Batch: b}}
}

// forgetAfter × PeerTimeout after its last message, an inbound peer
// without a stream is forgotten (it leaves /debug/peers).
const forgetAfter = 10

// expireLoop takes back the counts of inbound peers silent for PeerTimeout
// (a stream that hangs without closing), and forgets the ones gone for
// forgetAfter × PeerTimeout.
func (r *Replica) expireLoop(ctx context.Context) {
	t := r.clk.NewTicker(r.cfg.PeerTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		now := r.clk.Now()
		r.mu.Lock()
		for id, in := range r.inbound {
			if in.streams == 0 && now.Sub(in.lastSeen) > forgetAfter*r.cfg.PeerTimeout {
				delete(r.inbound, id)
				r.m.forgotten.Inc()
				continue
			}
			if !in.expired && now.Sub(in.lastSeen) > r.cfg.PeerTimeout {
				r.loads.Expire(id)
				in.expired = true
				r.m.expired.Inc()
				r.log.Warn("replica peer silent: its in-flight and pending-prefill counts no longer count", "peer", id, "last_seen", in.lastSeen)
			}
		}
		r.mu.Unlock()
	}
}

// restore records a snapshot's entries of the endpoint at addr in the
// prefix index and returns how many.
func (r *Replica) restore(addr string, hashes []uint64) int {
	if r.prefix == nil || len(hashes) == 0 {
		return 0
	}
	if !r.prefix.Restore(addr, hashes) {
		r.m.unknownEndpoint.Inc()
		return 0
	}
	return len(hashes)
}

// snapshot sends this replica's prefix index on stream in chunks.
func (r *Replica) snapshot(stream grpc.BidiStreamingServer[replicapb.Message, replicapb.Message]) error {
	var (
		chunk []*replicapb.Chain
		size  int
		err   error
	)
	flush := func(last bool) {
		if err != nil {
			return
		}
		err = stream.Send(&replicapb.Message{Body: &replicapb.Message_Snapshot{Snapshot: &replicapb.Snapshot{Chains: chunk, Last: last}}})
		chunk, size = nil, 0
	}
	if r.prefix != nil {
		r.prefix.Export(func(addr string, hashes []uint64) {
			for len(hashes) > 0 {
				n := min(len(hashes), snapshotChunk-size)
				chunk = append(chunk, &replicapb.Chain{Endpoint: addr, Hashes: slices.Clone(hashes[:n])})
				hashes, size = hashes[n:], size+n
				if size >= snapshotChunk {
					flush(false)
				}
			}
		})
	}
	flush(true)
	if err == nil {
		r.m.snapshotsSent.Inc()
	}
	return err
}
