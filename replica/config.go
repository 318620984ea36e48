package replica

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Config is the profile's replicas: section.
type Config struct {
	// Enabled turns replica sync on (default off).
	Enabled bool `mapstructure:"enabled" json:"enabled"`
	// ID names this replica among its peers and must be unique among them
	// (a peer with this replica's id is taken for itself); empty means the
	// host name (serve fills it in; in Kubernetes the pod name).
	ID string `mapstructure:"id" json:"id"`
	// Listen is where this replica serves the sync protocol (gRPC),
	// host:port (default :9003).
	Listen string `mapstructure:"listen" json:"listen"`
	// Peers are the other replicas' sync addresses, host:port. The list
	// may name this replica too (one list for every replica): a replica
	// that reaches itself stops dialling that address.
	Peers []string `mapstructure:"peers" json:"peers"`
	// Discovery, when its selector is set, finds the peers in Kubernetes
	// instead (or as well): the pods it selects, ready or not, on its port.
	Discovery Discovery `mapstructure:"discovery" json:"discovery"`
	// FlushInterval is how often a replica sends what it learned (default
	// 10ms; 1ms…1s). Peers see a pick at most this late plus the network.
	FlushInterval time.Duration `mapstructure:"flush_interval" json:"flush_interval"`
	// QueueSize is how many batches wait for one slow peer before new ones
	// are dropped (default 256, i.e. 2.56 s of batches at 10 ms).
	QueueSize int `mapstructure:"queue_size" json:"queue_size"`
	// PeerTimeout is how long a peer's in-flight and pending-prefill
	// counts stay counted after its last message (default 3s). A replica
	// with nothing to report still sends a heartbeat every third of it.
	PeerTimeout time.Duration `mapstructure:"peer_timeout" json:"peer_timeout"`
	// RetryInterval is the pause before redialling a lost peer (default
	// 1s).
	RetryInterval time.Duration `mapstructure:"retry_interval" json:"retry_interval"`
	// PickLogPicks and PickLogHashes bound the buffer of local picks
	// between two flushes (defaults 8192 picks, 2^20 block hashes = 8 MiB);
	// picks beyond it are dropped and counted.
	PickLogPicks  int `mapstructure:"pick_log_picks" json:"pick_log_picks"`
	PickLogHashes int `mapstructure:"pick_log_hashes" json:"pick_log_hashes"`
	// TLS, when its files are set, is mutual TLS between replicas.
	TLS TLSConfig `mapstructure:"tls" json:"tls"`
	// TokenFile names a file holding a shared secret (printable ASCII,
	// 32…4096 bytes after trimming white space; e.g. a mounted Kubernetes
	// Secret): a dialling replica sends it with every stream and a replica
	// accepts only streams that carry it. The file is read again when it
	// changes (checked at most every 10 s); the previous token stays
	// accepted until the next change, so a rotation does not cut the sync.
	TokenFile string `mapstructure:"token_file" json:"token_file"`
	// Insecure runs sync without authentication: any client that reaches
	// listen from a peer's address can feed this replica picks and loads.
	// Sync refuses to start unless tls, token_file or this is set; with
	// it, the replica logs a warning at start and shows it in /debug/peers
	// and trimtab_replica_auth_info.
	Insecure bool `mapstructure:"insecure" json:"insecure"`
	// MaxPeers bounds the replica ids a replica keeps for the peers that
	// stream to it (default 64); a new id beyond it is refused while the
	// others are live.
	MaxPeers int `mapstructure:"max_peers" json:"max_peers"`
	// MaxPeerInFlight and MaxPeerPendingPrefillBytes clamp what one peer
	// may report for one endpoint (defaults 4096 requests, the proxy's
	// default concurrency limit, and 512 MiB, the default body memory of
	// its HTTP and ext_proc servers together); negative reports count 0.
	MaxPeerInFlight            int64 `mapstructure:"max_peer_in_flight" json:"max_peer_in_flight"`
	MaxPeerPendingPrefillBytes int64 `mapstructure:"max_peer_pending_prefill_bytes" json:"max_peer_pending_prefill_bytes"`
	// MaxPeerPicksPerSecond bounds the picks a peer may send (a token
	// bucket holding one second of them; default 10000); picks beyond it
	// are dropped and counted.
	MaxPeerPicksPerSecond int `mapstructure:"max_peer_picks_per_second" json:"max_peer_picks_per_second"`
	// MaxSnapshotBytes and SnapshotTimeout bound the prefix index snapshot
	// a replica takes from a peer (defaults 256 MiB of block hashes, 8
	// bytes each, and 1m); a peer whose snapshot goes beyond either is
	// dropped and redialled.
	MaxSnapshotBytes int64         `mapstructure:"max_snapshot_bytes" json:"max_snapshot_bytes"`
	SnapshotTimeout  time.Duration `mapstructure:"snapshot_timeout" json:"snapshot_timeout"`
}

// TLSConfig is mutual TLS between replicas: each presents CertFile/KeyFile
// and accepts only peers whose certificate CAFile signed. All three or
// none.
type TLSConfig struct {
	CertFile string `mapstructure:"cert_file" json:"cert_file"`
	KeyFile  string `mapstructure:"key_file" json:"key_file"`
	CAFile   string `mapstructure:"ca_file" json:"ca_file"`
	// ServerName, when set, is the name a peer's certificate must carry
	// (default: the host part of the peer's address).
	ServerName string `mapstructure:"server_name" json:"server_name"`
}

// Discovery finds the replicas in Kubernetes with the same informers as
// endpoint discovery in mode pods (PeerDiscovery, which gives the
// addresses to Replica.SetPeers). Pods that are not ready yet count: a
// starting replica can already sync and catch up.
type Discovery struct {
	// Selector is the replicas' pod label selector, e.g.
	// "app.kubernetes.io/name=trimtab"; empty: no discovery.
	Selector string `mapstructure:"selector" json:"selector"`
	// Namespace of the replicas' pods (required with a selector).
	Namespace string `mapstructure:"namespace" json:"namespace"`
	// Port is the pods' sync port (default: listen's port).
	Port int `mapstructure:"port" json:"port"`
}

// Enabled reports whether discovery is configured.
func (d Discovery) Enabled() bool { return d.Selector != "" }

// PortOr returns Port, or listen's port when Port is 0.
func (d Discovery) PortOr(listen string) int {
	if d.Port != 0 {
		return d.Port
	}
	_, p, _ := net.SplitHostPort(listen)
	n, _ := strconv.Atoi(p)
	return n
}

// Enabled reports whether mutual TLS is configured.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" }

// DefaultConfig returns the defaults: off, listening on :9003 when on,
// flushing every 10ms.
func DefaultConfig() Config {
	return Config{
		Listen:        ":9003",
		FlushInterval: 10 * time.Millisecond,
		QueueSize:     256,
		PeerTimeout:   3 * time.Second,
		RetryInterval: time.Second,
		PickLogPicks:  8192,
		PickLogHashes: 1 << 20,

		MaxPeers:                   64,
		MaxPeerInFlight:            4096,
		MaxPeerPendingPrefillBytes: 512 << 20,
		MaxPeerPicksPerSecond:      10000,
		MaxSnapshotBytes:           256 << 20,
		SnapshotTimeout:            time.Minute,
	}
}

// Validate checks the section; errors name the field. A disabled section
// is not checked further.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("replicas."+format, a...)) }
	if err := checkHostPort(c.Listen); err != nil {
		bad("listen: %v", err)
	}
	if len(c.Peers) == 0 && !c.Discovery.Enabled() {
		bad("peers: list the other replicas' sync addresses (host:port), or set discovery.selector; with no peer there is nothing to sync")
	}
	if d := c.Discovery; d.Enabled() {
		if d.Namespace == "" {
			bad("discovery.namespace: required with discovery.selector")
		}
		if d.Port < 0 || d.Port > 65535 {
			bad("discovery.port: %d, want 1…65535 (0: listen's port)", d.Port)
		}
	} else if d.Namespace != "" || d.Port != 0 {
		bad("discovery: namespace or port set without a selector")
	}
	seen := map[string]int{}
	for i, p := range c.Peers {
		if err := checkHostPort(p); err != nil {
			bad("peers[%d]: %v", i, err)
		} else if j, dup := seen[p]; dup {
			bad("peers[%d]: %q is peers[%d] again", i, p, j)
		}
		seen[p] = i
	}
	if c.FlushInterval < time.Millisecond || c.FlushInterval > time.Second {
		bad("flush_interval: %v, want 1ms…1s", c.FlushInterval)
	}
	if c.QueueSize < 1 || c.QueueSize > 1<<16 {
		bad("queue_size: %d, want 1…65536", c.QueueSize)
	}
	if c.PeerTimeout < 3*c.FlushInterval {
		bad("peer_timeout: %v, want at least 3 × flush_interval (%v)", c.PeerTimeout, 3*c.FlushInterval)
	}
	if c.RetryInterval < 10*time.Millisecond || c.RetryInterval > time.Minute {
		bad("retry_interval: %v, want 10ms…1m", c.RetryInterval)
	}
	if c.PickLogPicks < 1 || c.PickLogPicks > 1<<20 {
		bad("pick_log_picks: %d, want 1…1048576", c.PickLogPicks)
	}
	if c.PickLogHashes < 1 || c.PickLogHashes > 1<<26 {
		bad("pick_log_hashes: %d, want 1…67108864", c.PickLogHashes)
	}
	if t := c.TLS; t.Enabled() && (t.CertFile == "" || t.KeyFile == "" || t.CAFile == "") {
		bad("tls: set cert_file, key_file and ca_file together (mutual TLS), or none")
	}
	switch {
	case !c.TLS.Enabled() && c.TokenFile == "" && !c.Insecure:
		bad("tls, replicas.token_file or replicas.insecure: replica sync takes routing hints from the network, so it needs authentication: set tls (mutual TLS) or token_file (a shared secret, e.g. a mounted Kubernetes Secret), or insecure: true to run it without")
	case c.Insecure && (c.TLS.Enabled() || c.TokenFile != ""):
		bad("insecure: true together with tls or token_file; remove one")
	}
	if c.MaxPeers < 1 || c.MaxPeers > 1024 {
		bad("max_peers: %d, want 1…1024", c.MaxPeers)
	}
	if c.MaxPeerInFlight < 1 || c.MaxPeerInFlight > 1<<20 {
		bad("max_peer_in_flight: %d, want 1…1048576", c.MaxPeerInFlight)
	}
	if c.MaxPeerPendingPrefillBytes < 1 || c.MaxPeerPendingPrefillBytes > 1<<40 {
		bad("max_peer_pending_prefill_bytes: %d, want 1…1099511627776 (1 TiB)", c.MaxPeerPendingPrefillBytes)
	}
	if c.MaxPeerPicksPerSecond < 1 || c.MaxPeerPicksPerSecond > 1000000 {
		bad("max_peer_picks_per_second: %d, want 1…1000000", c.MaxPeerPicksPerSecond)
	}
	if c.MaxSnapshotBytes < 1<<20 || c.MaxSnapshotBytes > 16<<30 {
		bad("max_snapshot_bytes: %d, want 1048576 (1 MiB)…17179869184 (16 GiB)", c.MaxSnapshotBytes)
	}
	if c.SnapshotTimeout < time.Second || c.SnapshotTimeout > time.Hour {
		bad("snapshot_timeout: %v, want 1s…1h", c.SnapshotTimeout)
	}
	return errors.Join(errs...)
}

func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", s, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number in 0…65535", s, port)
	}
	return nil
}
