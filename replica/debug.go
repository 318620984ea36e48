package replica

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"
)

// PathPeers is where the admin server serves Handler.
const PathPeers = "/debug/peers"

// Status is what /debug/peers shows: this replica and each peer, both the
// ones it streams to (Peers) and the ones streaming to it (Inbound).
type Status struct {
	// Enabled is false on a replica without sync (OffHandler).
	Enabled bool   `json:"enabled"`
	ID      string `json:"id"`
	Listen  string `json:"listen"`
	SyncKey string `json:"sync_key"`
	// Auth is how sync streams are authenticated: mtls, token,
	// mtls+token, or insecure (replicas.insecure: true).
	Auth string `json:"auth"`
	// PicksLogged and PicksDropped count this replica's picks put in (or
	// dropped from) the log its peers are fed from.
	PicksLogged  uint64          `json:"picks_logged"`
	PicksDropped uint64          `json:"picks_dropped"`
	Peers        []PeerStatus    `json:"peers"`
	Inbound      []InboundStatus `json:"inbound"`
}

// PeerStatus is one configured peer address.
type PeerStatus struct {
	Address string `json:"address"`
	// ID is the peer's replica id, once a stream was accepted.
	ID        string `json:"id,omitempty"`
	Connected bool   `json:"connected"`
	// Self: the address is this replica's own, so it is not dialled.
	Self bool `json:"self,omitempty"`
	// Since is when the stream opened or last closed.
	Since     time.Time `json:"since,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	Queued    int       `json:"queued"`
	Sent      uint64    `json:"batches_sent"`
	Dropped   uint64    `json:"batches_dropped"`
	Snapshots int       `json:"snapshots_received"`
}

// InboundStatus is one peer that streams to this replica.
type InboundStatus struct {
	ID       string    `json:"id"`
	Streams  int       `json:"streams"`
	LastSeen time.Time `json:"last_seen"`
	Batches  uint64    `json:"batches_applied"`
	LagMS    float64   `json:"lag_ms"`
	// Expired: its counts were taken back (stream closed or silent).
	Expired bool `json:"expired"`
	// InFlight is the peer's requests in flight, over all endpoints, as
	// counted here now.
	InFlight int64 `json:"in_flight"`
}

// Status returns the replica's view of its peers: as many as are
// configured or discovered, and at most max_peers inbound ones.
func (r *Replica) Status() Status {
	st := Status{Enabled: true, ID: r.cfg.ID, Listen: r.cfg.Listen, SyncKey: r.syncKey, Auth: r.auth, PicksLogged: r.picks.Appended(), PicksDropped: r.picks.Dropped()}
	if a := r.Addr(); a != nil {
		st.Listen = a.String()
	}
	for _, p := range r.peerList() {
		p.mu.Lock()
		st.Peers = append(st.Peers, PeerStatus{Address: p.addr, ID: p.peerID, Connected: p.connected.Load(), Self: p.self.Load(), Since: p.since,
			LastError: p.lastErr, Queued: len(p.queue), Sent: p.sent.Load(), Dropped: p.dropped.Load(), Snapshots: p.snapshots})
		p.mu.Unlock()
	}
	r.mu.Lock()
	for _, in := range r.inbound {
		s := InboundStatus{ID: in.id, Streams: in.streams, LastSeen: in.lastSeen, Batches: in.batches,
			LagMS: float64(in.lag) / 1e6, Expired: in.expired}
		for _, l := range r.loads.Peer(in.id) {
			s.InFlight += l.InFlight
		}
		st.Inbound = append(st.Inbound, s)
	}
	r.mu.Unlock()
	sort.Slice(st.Inbound, func(i, j int) bool { return st.Inbound[i].ID < st.Inbound[j].ID })
	return st
}

// OffHandler serves what /debug/peers shows on a replica with sync off:
// {"enabled": false}, so the status page knows to hide its peers card.
func OffHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"enabled": false}` + "\n"))
	})
}

// Handler serves Status as JSON (GET only).
func (r *Replica) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r.Status())
	})
}
