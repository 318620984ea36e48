package replica

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

// discoveryReplica is a Replica (not running) whose peers a PeerDiscovery
// can set.
func discoveryReplica(t *testing.T, cfg Config) *Replica {
	t.Helper()
	sched, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{
		{Name: "inflight", Type: "inflight", Scorer: &scorers.InFlight{}, Weight: 1},
	}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg, sched, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func peerAddrs(r *Replica) []string {
	var out []string
	for _, p := range r.Status().Peers {
		out = append(out, p.Address)
	}
	return out
}

// runDiscovery runs p until the test ends.
func runDiscovery(t *testing.T, p *PeerDiscovery) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("discovery: %v", err)
		}
	})
}

// TestPeerDiscoveryFindsPods: replicas.discovery is endpoint discovery
// in mode pods: the pods its selector matches in its namespace, ready or
// not (a starting replica can already sync), on the sync port (listen's
// when discovery.port is unset), after the static peers.
func TestPeerDiscoveryFindsPods(t *testing.T) {
	pod := func(name, ns, ip string, ready bool, app string) *corev1.Pod {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/name": app}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
		}
	}
	kc := fake.NewClientset(
		pod("trimtab-0", "gw", "10.1.0.1", true, "trimtab"),
		pod("trimtab-1", "gw", "10.1.0.2", true, "trimtab"),
		pod("trimtab-2", "gw", "10.1.0.3", false, "trimtab"),
		pod("trimtab-x", "other", "10.9.0.1", true, "trimtab"),
		pod("vllm-0", "gw", "10.2.0.1", true, "vllm"),
	)
	cfg := testConfig("trimtab-0", "10.8.0.1:9003")
	cfg.Listen = ":9003"
	cfg.Discovery = Discovery{Selector: "app.kubernetes.io/name=trimtab", Namespace: "gw"}
	r := discoveryReplica(t, cfg)
	p, err := NewPeerDiscovery(cfg, DiscoveryDeps{Replica: r, Kube: kc})
	if err != nil {
		t.Fatal(err)
	}
	runDiscovery(t, p)
	// The static peer first, then the three trimtab pods of namespace gw
	// in the order discovery reports them (sorted here).
	want := []string{"10.1.0.1:9003", "10.1.0.2:9003", "10.1.0.3:9003"}
	eventually(t, "the static peer and the three trimtab pods of namespace gw", func() bool {
		got := peerAddrs(r)
		if len(got) != 4 || got[0] != "10.8.0.1:9003" {
			return false
		}
		rest := slices.Clone(got[1:])
		slices.Sort(rest)
		return slices.Equal(rest, want)
	})
}

// TestPeerDiscoveryOverride: a Discoverer in the deps replaces the pod
// informers (no Kubernetes client needed) and feeds SetPeers as they do.
func TestPeerDiscoveryOverride(t *testing.T) {
	cfg := testConfig("a")
	cfg.Discovery = Discovery{Selector: "app=trimtab", Namespace: "gw"}
	r := discoveryReplica(t, cfg)
	p, err := NewPeerDiscovery(cfg, DiscoveryDeps{Replica: r, Discoverer: fleet.Fixed{{Address: "127.0.0.1:7001"}, {Address: "127.0.0.1:7002"}}})
	if err != nil {
		t.Fatal(err)
	}
	runDiscovery(t, p)
	eventually(t, "the two fixed peers", func() bool {
		return slices.Equal(peerAddrs(r), []string{"127.0.0.1:7001", "127.0.0.1:7002"})
	})
}

// TestNewPeerDiscoveryRefuses: what cannot discover is refused, naming
// replicas.discovery.
func TestNewPeerDiscoveryRefuses(t *testing.T) {
	on := testConfig("a")
	on.Discovery = Discovery{Selector: "app=trimtab", Namespace: "gw"}
	r := discoveryReplica(t, on)
	badSel := on
	badSel.Discovery.Selector = "app in (("
	for _, tt := range []struct {
		name string
		cfg  Config
		deps DiscoveryDeps
		want string
	}{
		{"no selector", testConfig("a"), DiscoveryDeps{Replica: r, Kube: fake.NewClientset()}, "no selector"},
		{"no replica", on, DiscoveryDeps{Kube: fake.NewClientset()}, "no replica"},
		{"no client", on, DiscoveryDeps{Replica: r}, "no Kubernetes client"},
		{"bad selector", badSel, DiscoveryDeps{Replica: r, Kube: fake.NewClientset()}, "selector"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPeerDiscovery(tt.cfg, tt.deps)
			if err == nil || !strings.HasPrefix(err.Error(), "replicas.discovery: ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want replicas.discovery: …%s…", err, tt.want)
			}
		})
	}
}
