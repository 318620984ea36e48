package replica

import (
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trimtab/trimtab/replica/replicapb"
	"github.com/trimtab/trimtab/scorers"
)

// Sync implements replicapb.ReplicaServer: a peer's stream. The first
// message must be a Hello; then the peer sends batches, which are applied
// as they come. When the stream ends the peer's counts are taken back
// (unless another stream of the same peer is open).
func (r *Replica) Sync(stream grpc.BidiStreamingServer[replicapb.Message, replicapb.Message]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	switch {
	case hello == nil || hello.ReplicaId == "":
		return status.Error(codes.InvalidArgument, "replica sync: the first message must be a Hello with a replica_id")
	case hello.ReplicaId == r.cfg.ID:
		return status.Errorf(codes.AlreadyExists, "replica sync: this is replica %q itself", r.cfg.ID)
	case hello.SyncKey != r.syncKey:
		return status.Errorf(codes.FailedPrecondition, "replica sync: peer %q has prefix index layout %q, this replica %q; give every replica the same profile", hello.ReplicaId, hello.SyncKey, r.syncKey)
	}
	id := hello.ReplicaId
	ack := &replicapb.Hello{ReplicaId: r.cfg.ID, SyncKey: r.syncKey}
	if err := stream.Send(&replicapb.Message{Body: &replicapb.Message_Hello{Hello: ack}}); err != nil {
		return err
	}
	r.mu.Lock()
	in := r.inbound[id]
	if in == nil {
		in = &inbound{id: id}
		r.inbound[id] = in
	}
	in.streams++
	in.lastSeen, in.expired = r.clk.Now(), false
	r.mu.Unlock()
	r.log.Info("replica peer connected", "peer", id)
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
	if hello.WantSnapshot {
		if err := r.snapshot(stream); err != nil {
			return err
		}
	}
	var (
		chains []scorers.Chain
		loads  []scorers.EndpointLoad
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
			chains = append(chains, scorers.Chain{Endpoint: c.Endpoint, Hashes: c.Hashes})
		}
		for _, l := range b.Loads {
			loads = append(loads, scorers.EndpointLoad{Endpoint: l.Endpoint, InFlight: l.InFlight, PendingPrefill: l.PendingPrefill})
		}
		r.apply(in, chains, loads, time.Unix(0, b.SentUnixNano))
	}
}

// apply records a peer's batch: its picks in the prefix index, its loads
// in the scheduler.
func (r *Replica) apply(in *inbound, chains []scorers.Chain, loads []scorers.EndpointLoad, sent time.Time) {
	if r.prefix != nil {
		for _, c := range chains {
			if !r.prefix.RecordPeer(c.Endpoint, c.Hashes) {
				r.m.unknownEndpoint.Inc()
			}
		}
	}
	now := r.clk.Now()
	lag := now.Sub(sent)
	r.mu.Lock()
	r.loads.Apply(in.id, loads)
	in.lastSeen, in.expired = now, false
	in.batches++
	in.lag = lag
	r.mu.Unlock()
	r.m.applied.Inc()
	r.m.picksApplied.Add(float64(len(chains)))
	r.m.lag.Observe(max(lag, 0).Seconds())
}
