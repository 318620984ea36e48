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
// endpoint discovery in mode pods (serve wires it; the replica package
// only takes the addresses, through Replica.SetPeers). Pods that are not
// ready yet count: a starting replica can already sync and catch up.
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
