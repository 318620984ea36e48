// Package peerload carries router-local load between router replicas:
// Local reads what this router sent to each endpoint and has not finished
// (in-flight requests, pending-prefill bytes), and Peers adds what each
// peer reports to a scheduler (scheduler.AddPeerLoad), so the distribution
// scorers and the load guard see the pool-wide load. The replica package
// ships the reports over gRPC; the simulator hands them between its
// routers. A peer only feeds hints: what it reports changes scores, never
// the set of candidates, which comes from discovery alone.
package peerload

import (
	"sync"

	"github.com/trimtab/trimtab/scheduler"
)

// Load is one endpoint's router-local load as a replica reports it.
type Load struct {
	Endpoint string
	// InFlight is the requests the replica sent there that have not
	// completed; PendingPrefill the prompt bytes of those without a first
	// response byte.
	InFlight, PendingPrefill int64
}

// Local appends to dst, for every endpoint of pool with a non-zero
// router-local count, its local in-flight and pending-prefill counts (not
// the peers' shares), and returns it. A report lists only non-zero
// endpoints; Peers.Apply reads an endpoint missing from it as 0.
func Local(pool *scheduler.Pool, dst []Load) []Load {
	for _, e := range pool.Pointers() {
		in, pend := e.LocalInFlight(), e.LocalPendingPrefill()
		if in != 0 || pend != 0 {
			dst = append(dst, Load{Endpoint: e.Address, InFlight: in, PendingPrefill: pend})
		}
	}
	return dst
}

// Peers applies peers' load reports to a scheduler: it remembers what
// each peer's last report added per endpoint, adds the difference when a
// new report comes (scheduler.AddPeerLoad), and takes everything back when
// the peer expires. Reports are absolute, so a lost or late report is
// corrected by the next. Safe for concurrent use.
type Peers struct {
	s     *scheduler.Scheduler
	mu    sync.Mutex
	peers map[string]map[string]Load // peer → endpoint → applied
}

// NewPeers returns a Peers feeding s.
func NewPeers(s *scheduler.Scheduler) *Peers {
	return &Peers{s: s, peers: map[string]map[string]Load{}}
}

// Apply installs peer's report: its counts replace the peer's previous
// ones; endpoints missing from loads count 0.
func (pl *Peers) Apply(peer string, loads []Load) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	prev := pl.peers[peer]
	next := make(map[string]Load, len(loads))
	for _, l := range loads {
		if l.InFlight == 0 && l.PendingPrefill == 0 {
			continue
		}
		old, dup := next[l.Endpoint] // a repeated endpoint: its last entry counts, once
		if !dup {
			old = prev[l.Endpoint]
		}
		pl.s.AddPeerLoad(l.Endpoint, l.InFlight-old.InFlight, l.PendingPrefill-old.PendingPrefill)
		next[l.Endpoint] = l
	}
	for ep, old := range prev {
		if _, ok := next[ep]; !ok {
			pl.s.AddPeerLoad(ep, -old.InFlight, -old.PendingPrefill)
		}
	}
	if len(next) == 0 {
		delete(pl.peers, peer)
		return
	}
	pl.peers[peer] = next
}

// Expire takes back everything peer's reports added: a vanished replica's
// requests stop counting.
func (pl *Peers) Expire(peer string) { pl.Apply(peer, nil) }

// Peer returns the counts last applied for peer, by endpoint; a copy.
func (pl *Peers) Peer(peer string) map[string]Load {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	out := make(map[string]Load, len(pl.peers[peer]))
	for k, v := range pl.peers[peer] {
		out[k] = v
	}
	return out
}
