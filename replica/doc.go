// Package replica keeps router replicas' views of the pool close to each
// other. Each trimtab replica routes on its own; without sync, a replica's
// prefix index learns only its own picks and its in-flight and
// pending-prefill counts see only its own requests, so N replicas behind a
// round-robin Service send the same prefix to N pods and each underrates
// the load the others put on a pod.
//
// With sync on, every replica streams to each peer (gRPC, service
// trimtab.replica.v1.Replica, one bidirectional stream per pair and
// direction) a batch every flush_interval: the picks it made since the last
// batch (endpoint and the request's prefix-block hash chain, from the
// prefix scorer's prefix.PickLog) and its router-local loads per endpoint
// (absolute counts). A receiving replica records the chains in its prefix
// index (prefix.Scorer.RecordPeer) and adds the loads to its scheduler
// (peerload.Peers → scheduler.AddPeerLoad), so its prefix, in-flight and
// pending-prefill scorers and the load guard see the whole pool's traffic.
// A (re)joining replica asks each peer for a snapshot of its index
// (prefix.Scorer.Export / Restore) when the stream opens. A peer only feeds hints:
// what it sends changes scores, never the candidates, which come from
// discovery alone.
//
// A peer's stream is authenticated (a shared token checked by a stream
// interceptor, or mutual TLS; Config.Insecure is the explicit, logged way
// out), must come from a configured or discovered peer's address (without
// mutual TLS), and everything it sends is bounded: replica ids
// (max_peers), endpoints (only the pool's, once per batch), loads (clamped
// to [0, max_peer_in_flight] and [0, max_peer_pending_prefill_bytes]),
// picks (a token bucket per peer on the injected clock) and the snapshot a
// dialler takes (max_snapshot_bytes, snapshot_timeout; restored endpoint
// by endpoint as it arrives). Each refusal or drop is counted.
//
// Consistency is eventual with bounded lag: a peer's pick reaches this
// replica's index at most flush_interval plus the network later, and a
// lost batch loses its picks (the loads come back with the next batch).
// The counts of a peer whose stream closed, or that sent nothing for
// peer_timeout, expire at once.
//
// Peers come from Config.Peers and, with Config.Discovery, from a
// PeerDiscovery: its Run, which the caller runs beside the Replica's,
// watches the replicas' pods (fleet's informers, mode pods) and calls
// SetPeers at every change.
//
// Concurrency: Run starts and waits for the gRPC server, the flush loop,
// one dialler per peer (each with its own receive goroutine and Hello
// watchdog, both waited for; each stream on a new connection, so a redial
// is never delayed by gRPC's connection backoff) and the expiry loop. The request path only appends to the PickLog,
// which never blocks or allocates; everything else happens on these
// goroutines. Sends to a slow peer queue in a bounded channel; when it is
// full a batch is dropped and counted, never waited for.
package replica
