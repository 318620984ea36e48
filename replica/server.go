package replica

import (
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trimtab/trimtab/replica/peerload"
	"github.com/trimtab/trimtab/replica/replicapb"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// Why an inbound stream was refused (trimtab_replica_peers_refused_total).
const (
	reasonUnauthenticated = "unauthenticated"
	reasonUnknownAddr     = "unknown_address"
	reasonBadHello        = "bad_hello"
	reasonLayout          = "layout_differs"
	reasonTooMany         = "too_many_peers"
)

var refusalReasons = []string{reasonUnauthenticated, reasonUnknownAddr, reasonBadHello, reasonLayout, reasonTooMany}

// refused counts a refused stream and logs it, at most once per logEvery
// per reason. detail is for the log only, never for the peer.
func (r *Replica) refused(reason, addr, detail string) {
	r.m.refused[reason].Inc()
	if held, ok := r.refusalLogs[reason].allow(r.clk.Now()); ok {
		r.log.Warn("replica sync: refused a peer's stream", "reason", reason, "peer_addr", addr, "detail", detail, "refusals_not_logged", held)
	}
}

// Sync implements replicapb.ReplicaServer: a peer's stream. The stream
// must come from a peer's address (or carry a certificate the CA signed)
// and start with a Hello naming a replica id and this replica's layout;
// then the peer sends batches, which are applied as they come, within the
// bounds of the Config. When the stream ends the peer's counts are taken
// back (unless another stream of the same peer is open).
func (r *Replica) Sync(stream grpc.BidiStreamingServer[replicapb.Message, replicapb.Message]) error {
	addr := remoteAddr(stream.Context())
	if !r.knownAddr(stream.Context()) {
		r.refused(reasonUnknownAddr, addr, "")
		return status.Error(codes.PermissionDenied, "replica sync: this address is not one of the replica's peers")
	}
	first, err := r.recvHello(stream)
	if err != nil {
		return err
	}
	hello := first.GetHello()
	switch {
	case hello == nil || !validID(hello.ReplicaId):
		r.refused(reasonBadHello, addr, "")
		return status.Errorf(codes.InvalidArgument, "replica sync: the first message must be a Hello with a replica_id of 1…%d printable characters", maxIDBytes)
	case hello.ReplicaId == r.cfg.ID:
		return status.Errorf(codes.AlreadyExists, "replica sync: this is replica %q itself", r.cfg.ID)
	case hello.SyncKey != r.syncKey:
		r.refused(reasonLayout, addr, "peer "+hello.ReplicaId+" has layout "+truncate(hello.SyncKey, 128)+", this replica "+r.syncKey)
		return status.Error(codes.FailedPrecondition, "replica sync: the prefix index layout differs; give every replica the same profile and release")
	}
	id := hello.ReplicaId
	in, err := r.admit(id)
	if err != nil {
		r.refused(reasonTooMany, addr, "peer "+id)
		return err
	}
	defer func() {
		r.mu.Lock()
		in.streams--
		gone := in.streams == 0
		if gone {
			r.loads.Expire(id)
			in.expired = true
		}
		r.mu.Unlock()
		if gone {
			r.log.Warn("replica peer lost: its in-flight and pending-prefill counts no longer count", "peer", id)
		}
	}()
	r.log.Info("replica peer connected", "peer", id, "peer_addr", addr)
	ack := &replicapb.Hello{ReplicaId: r.cfg.ID, SyncKey: r.syncKey}
	if err := stream.Send(&replicapb.Message{Body: &replicapb.Message_Hello{Hello: ack}}); err != nil {
		return err
	}
	if hello.WantSnapshot {
		if err := r.snapshot(stream); err != nil {
			return err
		}
	}
	var (
		chains []prefix.Chain
		loads  []peerload.Load
		seen   = map[string]struct{}{}
	)
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		b := msg.GetBatch()
		if b == nil {
			continue
		}
		chains, loads = chains[:0], loads[:0]
		for _, c := range b.Chains {
			chains = append(chains, prefix.Chain{Endpoint: c.Endpoint, Hashes: c.Hashes})
		}
		loads = r.checkLoads(b.Loads, loads, seen)
		r.apply(in, chains, loads, time.Unix(0, b.SentUnixNano))
	}
}

// validID reports whether id is a usable replica id: 1…maxIDBytes
// printable ASCII characters.
func validID(id string) bool {
	if id == "" || len(id) > maxIDBytes {
		return false
	}
	for i := range len(id) {
		if id[i] < 0x20 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// admit registers a stream of peer id. A new id beyond max_peers takes the
// place of the peer without a stream seen longest ago; with every entry
// streaming, it is refused.
func (r *Replica) admit(id string) (*inbound, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clk.Now()
	in := r.inbound[id]
	if in == nil {
		if len(r.inbound) >= r.cfg.MaxPeers {
			var oldest *inbound
			for _, o := range r.inbound {
				if o.streams == 0 && (oldest == nil || o.lastSeen.Before(oldest.lastSeen)) {
					oldest = o
				}
			}
			if oldest == nil {
				return nil, status.Errorf(codes.ResourceExhausted, "replica sync: this replica already has %d peers streaming (replicas.max_peers)", r.cfg.MaxPeers)
			}
			delete(r.inbound, oldest.id)
			r.m.forgotten.Inc()
		}
		rate := float64(r.cfg.MaxPeerPicksPerSecond)
		in = &inbound{id: id, tokens: rate, refilled: now}
		r.inbound[id] = in
	}
	in.streams++
	in.lastSeen, in.expired = now, false
	return in, nil
}

// checkLoads appends to dst the loads of src that count: for endpoints of
// the pool, each once, clamped to [0, the Config's bounds]. The others are
// dropped and counted. seen is scratch space.
func (r *Replica) checkLoads(src []*replicapb.Load, dst []peerload.Load, seen map[string]struct{}) []peerload.Load {
	known := r.endpoints()
	clear(seen)
	clamped := 0
	clamp := func(v, hi int64) int64 {
		switch {
		case v < 0:
			clamped++
			return 0
		case v > hi:
			clamped++
			return hi
		}
		return v
	}
	for _, l := range src {
		if _, ok := known[l.Endpoint]; !ok {
			r.m.unknownEndpoint.Inc()
			continue
		}
		if _, dup := seen[l.Endpoint]; dup {
			r.m.duplicateEndpoint.Inc()
			continue
		}
		seen[l.Endpoint] = struct{}{}
		dst = append(dst, peerload.Load{Endpoint: l.Endpoint,
			InFlight:       clamp(l.InFlight, r.cfg.MaxPeerInFlight),
			PendingPrefill: clamp(l.PendingPrefill, r.cfg.MaxPeerPendingPrefillBytes)})
	}
	if clamped > 0 {
		r.m.loadsClamped.Add(float64(clamped))
	}
	return dst
}

// apply records a peer's batch: its picks in the prefix index, as many as
// its rate allows, its loads in the scheduler.
func (r *Replica) apply(in *inbound, chains []prefix.Chain, loads []peerload.Load, sent time.Time) {
	now := r.clk.Now()
	r.mu.Lock()
	allowed := in.take(now, len(chains), float64(r.cfg.MaxPeerPicksPerSecond))
	r.mu.Unlock()
	if dropped := len(chains) - allowed; dropped > 0 {
		r.m.rateLimited.Add(float64(dropped))
		chains = chains[:allowed]
	}
	applied := 0
	if r.prefix != nil {
		for _, c := range chains {
			if r.prefix.RecordPeer(c.Endpoint, c.Hashes) {
				applied++
			} else {
				r.m.unknownEndpoint.Inc()
			}
		}
	}
	lag := now.Sub(sent)
	r.mu.Lock()
	r.loads.Apply(in.id, loads)
	in.lastSeen, in.expired = now, false
	in.batches++
	in.lag = lag
	r.mu.Unlock()
	r.m.applied.Inc()
	r.m.picksApplied.Add(float64(applied))
	r.m.lag.Observe(max(lag, 0).Seconds())
}

// take refills in's bucket (rate a second, at most one second's worth) and
// takes up to n tokens from it; it returns how many. Caller holds
// Replica.mu.
func (in *inbound) take(now time.Time, n int, rate float64) int {
	if dt := now.Sub(in.refilled); dt > 0 {
		in.tokens = min(rate, in.tokens+dt.Seconds()*rate)
		in.refilled = now
	}
	k := min(n, int(in.tokens))
	in.tokens -= float64(k)
	return k
}

// recvHello receives a stream's first message, waiting at most
// peer_timeout (at least a second) for it: a stream that passed the
// address and token checks but never speaks is closed and counted as a bad
// Hello instead of being held open. The receiving goroutine ends when
// Recv returns, which it does at once when this handler returns (gRPC
// cancels the stream then); its channel is buffered, so it never blocks.
func (r *Replica) recvHello(stream grpc.BidiStreamingServer[replicapb.Message, replicapb.Message]) (*replicapb.Message, error) {
	type recv struct {
		m   *replicapb.Message
		err error
	}
	got := make(chan recv, 1)
	go func() {
		m, err := stream.Recv()
		got <- recv{m, err}
	}()
	wait := max(r.cfg.PeerTimeout, time.Second)
	t := r.clk.NewTimer(wait)
	defer t.Stop()
	select {
	case g := <-got:
		return g.m, g.err
	case <-t.C():
		r.refused(reasonBadHello, remoteAddr(stream.Context()), "no Hello within "+wait.String())
		return nil, status.Errorf(codes.DeadlineExceeded, "replica sync: no Hello within %v", wait)
	}
}
