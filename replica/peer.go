package replica

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
		p.lastErr = err.Error()
	} else if connected {
		p.lastErr = ""
	}
}

// run dials the peer and streams batches until ctx is done, redialling
// after RetryInterval when the stream breaks.
func (p *peer) run(ctx context.Context) {
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(p.r.clientCreds(p.addr)))
	if err != nil {
		// Only a malformed target fails here; Validate checked host:port.
		p.setState(false, err)
		p.r.log.Error("replica peer address unusable", "peer", p.addr, "error", err)
		return
	}
	defer conn.Close()
	client := replicapb.NewReplicaClient(conn)
	for {
		// A snapshot is only useful once the pool (its addresses) is known.
		if len(p.r.sched.Pool().Pointers()) > 0 {
			err := p.stream(ctx, client)
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
			p.r.log.Warn("replica peer stream ended; redialling", "peer", p.addr, "error", err, "after", p.r.cfg.RetryInterval)
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
	st, err := client.Sync(sctx)
	if err != nil {
		return err
	}
	want, before := p.resync.Swap(false), p.snapshotsTaken()
	hello := &replicapb.Hello{ReplicaId: p.r.cfg.ID, SyncKey: p.r.syncKey, WantSnapshot: want}
	if err := st.Send(&replicapb.Message{Body: &replicapb.Message_Hello{Hello: hello}}); err != nil {
		p.resync.Store(want || p.resync.Load())
		return err
	}
	// The peer's Hello says it accepted the stream (a refusal is an error
	// status here).
	ack, err := st.Recv()
	if err == nil && ack.GetHello() == nil {
		err = status.Error(codes.Internal, "replica sync: the peer's first message is not a Hello")
	}
	if err != nil {
		p.resync.Store(want || p.resync.Load())
		return err
	}
	p.mu.Lock()
	p.peerID = ack.GetHello().ReplicaId
	p.mu.Unlock()
	recvErr := make(chan error, 1)
	go func() { recvErr <- p.receive(st, cancel) }()
	p.setState(true, nil)
	p.r.log.Info("replica peer stream open", "peer", p.addr, "peer_id", ack.GetHello().ReplicaId, "snapshot", want)
	var sendErr error
loop:
	for {
		select {
		case <-sctx.Done():
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

func (p *peer) snapshotsTaken() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshots
}

// receive reads the peer's messages until the stream ends: snapshot parts,
// restored once the last part is in (parts of one endpoint are restored
// together, so its LRU order survives the split). It cancels the stream
// when it fails.
func (p *peer) receive(st grpc.BidiStreamingClient[replicapb.Message, replicapb.Message], cancel context.CancelFunc) error {
	defer cancel()
	var parts map[string][]uint64
	for {
		m, err := st.Recv()
		if err != nil {
			return err
		}
		s := m.GetSnapshot()
		if s == nil {
			continue
		}
		if parts == nil {
			parts = map[string][]uint64{}
		}
		for _, c := range s.Chains {
			parts[c.Endpoint] = append(parts[c.Endpoint], c.Hashes...)
		}
		if !s.Last {
			continue
		}
		n := p.r.restore(&replicapb.Snapshot{Chains: chainsOf(parts)})
		parts = nil
		p.mu.Lock()
		p.snapshots++
		p.mu.Unlock()
		p.r.m.snapshotsReceived.Inc()
		p.r.log.Info("replica caught up from a peer's prefix index", "peer", p.addr, "blocks", n)
	}
}

func chainsOf(parts map[string][]uint64) []*replicapb.Chain {
	out := make([]*replicapb.Chain, 0, len(parts))
	for ep, h := range parts {
		out = append(out, &replicapb.Chain{Endpoint: ep, Hashes: h})
	}
	return out
}
