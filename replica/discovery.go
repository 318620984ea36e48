package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"k8s.io/client-go/kubernetes"

	"github.com/trimtab/trimtab/fleet"
)

// DiscoveryDeps are a PeerDiscovery's collaborators.
type DiscoveryDeps struct {
	// Replica receives the peers found (required).
	Replica *Replica
	// Kube is the client of the pod informers; required unless
	// Discoverer is set.
	Kube kubernetes.Interface
	// Discoverer, when set, replaces the pod informers (tests).
	Discoverer fleet.Discoverer
	// Logger; nil discards.
	Logger *slog.Logger
}

// PeerDiscovery keeps a Replica's peers to the replicas that
// Config.Discovery finds in Kubernetes, with the static Config.Peers
// before them: the pods its selector matches in its namespace, ready or
// not (a starting replica can already sync), on Discovery.Port (listen's
// port when unset), through the same informers as endpoint discovery in
// mode pods.
type PeerDiscovery struct {
	d   fleet.Discoverer
	r   *Replica
	pre []string
	log *slog.Logger
}

// NewPeerDiscovery returns the discovery of cfg.Discovery, which must be
// enabled. Errors name the replicas.discovery setting.
func NewPeerDiscovery(cfg Config, deps DiscoveryDeps) (*PeerDiscovery, error) {
	d := cfg.Discovery
	switch {
	case !d.Enabled():
		return nil, errors.New("replicas.discovery: no selector, so no discovery")
	case deps.Replica == nil:
		return nil, errors.New("replicas.discovery: no replica to give the peers to")
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &PeerDiscovery{d: deps.Discoverer, r: deps.Replica, pre: append([]string(nil), cfg.Peers...), log: log}
	if p.d != nil {
		return p, nil
	}
	if deps.Kube == nil {
		return nil, errors.New("replicas.discovery: no Kubernetes client")
	}
	ec := fleet.EndpointsConfig{Mode: fleet.ModePods, Namespace: d.Namespace, Selector: d.Selector,
		TargetPort: d.PortOr(cfg.Listen), Resync: fleet.DefaultConfig().Endpoints.Resync}
	k, err := fleet.NewKube(ec, deps.Kube, nil, log)
	if err != nil {
		return nil, fmt.Errorf("replicas.discovery: %w", err)
	}
	p.d = k
	return p, nil
}

// Run watches the replicas until ctx is done and sets the Replica's peers
// at every change.
func (p *PeerDiscovery) Run(ctx context.Context) error { return p.d.Run(ctx, peerSink{p}) }

// peerSink turns discovered replica pods into the replica's peers.
type peerSink struct{ p *PeerDiscovery }

func (s peerSink) Update(targets []fleet.Target) {
	addrs := append([]string(nil), s.p.pre...)
	for _, t := range targets {
		addrs = append(addrs, t.Address)
	}
	if err := s.p.r.SetPeers(addrs); err != nil {
		s.p.log.Error("replica peer discovery: peers not changed", "err", err)
	}
}

func (s peerSink) Error(err error) { s.p.log.Warn("replica peer discovery", "err", err) }
