package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/trimtab/trimtab/replica/replicapb"
)

// peer is the dialling side towards one peer address: a bounded queue of
// batches and the goroutine that streams them.
type peer struct {
	r     *Replica
	addr  string
	queue chan *replicapb.Message

	// stop and done end the dialler started by Replica.startPeer.
	stop func()
	done chan struct{}

	connected atomic.Bool
	self      atomic.Bool // the address is this replica's own
	sent      atomic.Uint64
	dropped   atomic.Uint64
	// resync asks for a snapshot at the next connection: at first, and
	// after batches were dropped.
	resync atomic.Bool
	// snapshotHashesMax is the most hashes one stream's snapshot brought.
	snapshotHashesMax atomic.Int64

	// logs holds back repeated "stream ended" lines.
	logs limiter

	mu        sync.Mutex
	peerID    string // the peer's replica id, from its Hello
	lastErr   string
	since     time.Time // connected or disconnected since
	snapshots int       // snapshots received
}

func newPeer(r *Replica, addr string) *peer {
	p := &peer{r: r, addr: addr, queue: make(chan *replicapb.Message, r.cfg.QueueSize)}
	p.resync.Store(true)
	return p
}

// enqueue offers a batch without blocking; a full queue drops it.
func (p *peer) enqueue(m *replicapb.Message, picks int) {
	if p.self.Load() {
		return
	}
	select {
	case p.queue <- m:
	default:
		p.dropped.Add(1)
		p.r.m.droppedQueue.Inc()
		if picks > 0 {
			p.resync.Store(true)
		}
	}
}

func (p *peer) setState(connected bool, err error) {
	p.connected.Store(connected)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.since = p.r.clk.Now()
	if err != nil {
		p.lastErr = truncate(err.Error(), maxErrBytes)
	} else if connected {
		p.lastErr = ""
	}
}

// dial returns a new connection to the peer. Each stream gets its own, so
// a redial resolves the peer's name again and never waits out backoff
// that gRPC accumulated while the peer was away.
func (p *peer) dial() (*grpc.ClientConn, error) {
	retry := p.r.cfg.RetryInterval
	return grpc.NewClient(p.addr,
		grpc.WithTransportCredentials(p.r.clientCreds(p.addr)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: retry, Multiplier: 1.6, Jitter: 0.2, MaxDelay: retry},
			MinConnectTimeout: max(p.r.cfg.PeerTimeout, time.Second),
		}),
		// A peer that vanished without closing the connection (its host
		// gone, a network cut) is found within 10 s + peer_timeout.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: max(p.r.cfg.PeerTimeout, time.Second)}))
}

// run dials the peer and streams batches until ctx is done, redialling
// RetryInterval after the stream breaks.
func (p *peer) run(ctx context.Context) {
	for {
		// A snapshot is only useful once the pool (its addresses) is known.
		if len(p.r.sched.Pool().Pointers()) > 0 {
			conn, err := p.dial()
			if err != nil {
				// Only a malformed target fails here; Validate checked host:port.
				p.setState(false, err)
				p.r.log.Error("replica peer address unusable", "peer", p.addr, "err", err)
				return
			}
			err = p.stream(ctx, replicapb.NewReplicaClient(conn))
			conn.Close()
			if ctx.Err() != nil {
				return
			}
			if status.Code(err) == codes.AlreadyExists {
				p.self.Store(true)
				p.setState(false, err)
				p.r.log.Info("replica peer address is this replica; not dialling it", "peer", p.addr)
				return
			}
			p.setState(false, err)
			if held, ok := p.logs.allow(p.r.clk.Now()); ok {
				p.r.log.Warn("replica peer stream ended; redialling", "peer", p.addr, "err", truncate(err.Error(), maxErrBytes),
					"after", p.r.cfg.RetryInterval, "ends_not_logged", held)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-p.r.clk.After(p.r.cfg.RetryInterval):
		}
	}
}

// stream runs one stream: Hello, then batches from the queue, while a
// receive goroutine takes the peer's snapshot. It returns why the stream
// ended.
func (p *peer) stream(ctx context.Context, client replicapb.ReplicaClient) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if p.r.tokens != nil {
		sctx = metadata.AppendToOutgoingContext(sctx, tokenHeader, "Bearer "+p.r.tokens.current())
	}
	// The peer has peer_timeout to accept the stream.
	acked, ackWatch := make(chan struct{}), make(chan struct{})
	ack := sync.OnceFunc(func() { close(acked) })
	ackTimer := p.r.clk.NewTimer(max(p.r.cfg.PeerTimeout, time.Second))
	go func() {
		defer close(ackWatch)
		select {
		case <-ackTimer.C():
			cancel()
		case <-acked:
		}
	}()
	defer func() { ack(); ackTimer.Stop(); <-ackWatch }()
	st, err := client.Sync(sctx)
	if err != nil {
		return err
	}
	want, before := p.resync.Swap(false), p.snapshotsTaken()
	hello := &replicapb.Hello{ReplicaId: p.r.cfg.ID, SyncKey: p.r.syncKey, WantSnapshot: want}
	if err := st.Send(&replicapb.Message{Body: &replicapb.Message_Hello{Hello: hello}}); err != nil && !errors.Is(err, io.EOF) {
		p.resync.Store(want || p.resync.Load())
		return err
	}
	// The peer's Hello says it accepted the stream (a refusal is an error
	// status here).
	answer, err := st.Recv()
	ack()
	if err == nil && answer.GetHello() == nil {
		err = status.Error(codes.Internal, "replica sync: the peer's first message is not a Hello")
	}
	if err != nil {
		p.resync.Store(want || p.resync.Load())
		if status.Code(err) == codes.FailedPrecondition {
			err = fmt.Errorf("%w (this replica's layout: %s)", err, p.r.syncKey)
		}
		if sctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("replica sync: the peer did not answer the Hello within %v", max(p.r.cfg.PeerTimeout, time.Second))
		}
		return err
	}
	p.mu.Lock()
	p.peerID = truncate(answer.GetHello().ReplicaId, maxIDBytes)
	p.mu.Unlock()
	recvErr := make(chan error, 1)
	snapDone := make(chan struct{})
	go func() { recvErr <- p.receive(st, cancel, want, snapDone) }()
	p.setState(true, nil)
	p.r.log.Info("replica peer stream open", "peer", p.addr, "peer_id", p.peerIDNow(), "snapshot", want)
	var (
		sendErr  error
		deadline <-chan time.Time // the snapshot's
	)
	if want {
		t := p.r.clk.NewTimer(p.r.cfg.SnapshotTimeout)
		defer t.Stop()
		deadline = t.C()
	}
loop:
	for {
		select {
		case <-sctx.Done():
			break loop
		case <-snapDone:
			snapDone, deadline = nil, nil
		case <-deadline:
			p.r.m.snapshotSlow.Inc()
			sendErr = fmt.Errorf("replica sync: the peer's snapshot did not finish within replicas.snapshot_timeout (%v); dropped", p.r.cfg.SnapshotTimeout)
			break loop
		case m := <-p.queue:
			if sendErr = st.Send(m); sendErr != nil {
				break loop
			}
			p.sent.Add(1)
			p.r.m.sent.Inc()
		}
	}
	cancel()
	rerr := <-recvErr // the receive goroutine ends with the stream
	if want && p.snapshotsTaken() == before {
		p.resync.Store(true) // the snapshot did not arrive: ask again
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if sendErr != nil && !errors.Is(sendErr, io.EOF) {
		return sendErr
	}
	return rerr
}

func (p *peer) peerIDNow() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peerID
}

func (p *peer) snapshotsTaken() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshots
}

// receive reads the peer's messages until the stream ends. With want, the
// peer's snapshot comes in parts; each endpoint's entries are restored as
// soon as the next endpoint starts (an endpoint's parts are restored
// together, so its LRU order survives the split), so at most one
// endpoint's entries wait here. A snapshot beyond max_snapshot_bytes, or a
// part not asked for, ends the stream. It closes snapDone once the last
// part is in, and cancels the stream when it fails.
func (p *peer) receive(st grpc.BidiStreamingClient[replicapb.Message, replicapb.Message], cancel context.CancelFunc, want bool, snapDone chan<- struct{}) error {
	defer cancel()
	var (
		limit    = p.r.cfg.MaxSnapshotBytes / 8
		total    int64
		cur      string
		buf      []uint64
		restored int
	)
	for {
		m, err := st.Recv()
		if err != nil {
			return err
		}
		s := m.GetSnapshot()
		if s == nil {
			continue
		}
		if !want {
			p.r.m.snapshotUnexpected.Inc()
			return status.Error(codes.FailedPrecondition, "replica sync: the peer sent a snapshot part that was not asked for; dropped")
		}
		known := p.r.endpoints()
		for _, c := range s.Chains {
			if total += int64(len(c.Hashes)); total > limit {
				p.snapshotHashesMax.Store(max(p.snapshotHashesMax.Load(), total-int64(len(c.Hashes))))
				p.r.m.snapshotTooLarge.Inc()
				return status.Errorf(codes.ResourceExhausted, "replica sync: the peer's snapshot is larger than replicas.max_snapshot_bytes (%d); dropped", p.r.cfg.MaxSnapshotBytes)
			}
			if c.Endpoint != cur {
				restored += p.r.restore(cur, buf)
				cur, buf = c.Endpoint, buf[:0]
			}
			if _, ok := known[c.Endpoint]; ok {
				buf = append(buf, c.Hashes...)
			} else if len(c.Hashes) > 0 {
				p.r.m.unknownEndpoint.Inc()
			}
		}
		p.snapshotHashesMax.Store(max(p.snapshotHashesMax.Load(), total))
		if !s.Last {
			continue
		}
		restored += p.r.restore(cur, buf)
		cur, buf, want = "", nil, false
		p.mu.Lock()
		p.snapshots++
		p.mu.Unlock()
		close(snapDone)
		p.r.m.snapshotsReceived.Inc()
		p.r.log.Info("replica caught up from a peer's prefix index", "peer", p.addr, "blocks", restored)
	}
}
