package replica

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
	"github.com/trimtab/trimtab/scorers/prefix"
)

var pool = []scheduler.Endpoint{{Address: "10.0.0.1:8000"}, {Address: "10.0.0.2:8000"}, {Address: "10.0.0.3:8000"}}

// node is one router replica in a test: a scheduler with a prefix and an
// inflight scorer, and its Replica.
type node struct {
	sched  *scheduler.Scheduler
	prefix *prefix.Scorer
	rep    *Replica
	reg    *prometheus.Registry
	lis    net.Listener
	stop   func()
}

func newScheduler(t testing.TB, prefixCfg prefix.Config, eps ...scheduler.Endpoint) (*scheduler.Scheduler, *prefix.Scorer) {
	t.Helper()
	p, err := prefix.New("prefix", prefixCfg, prefix.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{
		{Name: "prefix", Type: "prefix", Scorer: p, Weight: 1},
		{Name: "inflight", Type: "inflight", Scorer: &scorers.InFlight{}, Weight: 0.01},
	}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) == 0 {
		eps = pool
	}
	s.SetEndpoints(eps)
	return s, p
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testConfig(id string, peers ...string) Config {
	cfg := DefaultConfig()
	cfg.Enabled, cfg.ID, cfg.Listen, cfg.Peers = true, id, "127.0.0.1:0", peers
	cfg.FlushInterval = 5 * time.Millisecond
	cfg.PeerTimeout = 300 * time.Millisecond
	cfg.RetryInterval = 20 * time.Millisecond
	cfg.Insecure = true // the tests of authentication set it back
	return cfg
}

// start runs a replica with cfg on lis until the test ends (or stop).
func start(t testing.TB, cfg Config, lis net.Listener, prefixCfg prefix.Config, eps ...scheduler.Endpoint) *node {
	t.Helper()
	return startDeps(t, cfg, Deps{Listener: lis}, prefixCfg, eps...)
}

// startDeps is start with more Deps (a clock); the registry is the node's.
func startDeps(t testing.TB, cfg Config, deps Deps, prefixCfg prefix.Config, eps ...scheduler.Endpoint) *node {
	t.Helper()
	n := &node{reg: prometheus.NewRegistry(), lis: deps.Listener}
	n.sched, n.prefix = newScheduler(t, prefixCfg, eps...)
	deps.Registerer = n.reg
	var err error
	n.rep, err = New(cfg, n.sched, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.rep.Run(ctx) }()
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("replica %s: Run: %v", cfg.ID, err)
			}
		})
	}
	t.Cleanup(n.stop)
	return n
}

func prompt(blocks string) []byte {
	var b strings.Builder
	for _, c := range blocks {
		b.WriteString(strings.Repeat(string(c), 256))
	}
	return []byte(b.String())
}

// eventually polls cond every 5ms for at most 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// index returns n's prefix index as Export gives it, by endpoint.
func index(n *node) map[string][]uint64 {
	out := map[string][]uint64{}
	n.prefix.Export(func(addr string, hashes []uint64) { out[addr] = append([]uint64(nil), hashes...) })
	return out
}

func sameIndex(a, b map[string][]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestSyncPicksAndLoads(t *testing.T) {
	la, lb := listen(t), listen(t)
	cfg := prefix.DefaultConfig()
	a := start(t, testConfig("a", lb.Addr().String()), la, cfg)
	b := start(t, testConfig("b", la.Addr().String()), lb, cfg)

	d, err := a.sched.Pick(context.Background(), &scheduler.Request{Prompt: prompt("ABCD"), Subset: []string{"10.0.0.2:8000"}})
	if err != nil {
		t.Fatal(err)
	}
	bEp := func(n *node) *scheduler.Endpoint { return n.sched.Pool().Pointers()[1] }
	eventually(t, "b to count a's request on 10.0.0.2", func() bool { return bEp(b).InFlight() == 1 })
	if got := bEp(b).LocalInFlight(); got != 0 {
		t.Errorf("b's local in-flight %d, want 0 (the request is a's)", got)
	}
	if got := bEp(b).PendingPrefill(); got != int64(len(prompt("ABCD"))) {
		t.Errorf("b's pending prefill on 10.0.0.2 %d, want a's prompt, %d bytes", got, len(prompt("ABCD")))
	}
	// The endpoint answers: a learns the prompt (prefix learn: first_byte)
	// and b learns it from a: the same 4 blocks on 10.0.0.2, nothing
	// elsewhere.
	d.FirstByte()
	eventually(t, "b's index to hold a's pick", func() bool {
		ib := index(b)
		return len(ib) == 1 && len(ib["10.0.0.2:8000"]) == 4 && sameIndex(ib, index(a))
	})
	d.Done(scheduler.Outcome{})
	eventually(t, "a's completion to reach b", func() bool { return bEp(b).InFlight() == 0 && bEp(b).PendingPrefill() == 0 })

	// A peer that goes away takes its counts with it.
	d, err = a.sched.Pick(context.Background(), &scheduler.Request{Prompt: prompt("Q"), Subset: []string{"10.0.0.2:8000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Done(scheduler.Outcome{})
	eventually(t, "b to count a's second request", func() bool { return bEp(b).InFlight() == 1 })
	a.stop()
	eventually(t, "a's counts to expire on b", func() bool { return bEp(b).InFlight() == 0 })

	st := b.rep.Status()
	if len(st.Inbound) != 1 || st.Inbound[0].ID != "a" || !st.Inbound[0].Expired || st.Inbound[0].Batches == 0 {
		t.Errorf("b's inbound status %+v, want a, expired, with batches", st.Inbound)
	}
	if got := testutil.ToFloat64(b.rep.m.applied); got == 0 {
		t.Error("trimtab_replica_updates_applied_total is 0 on b")
	}
	if n := testutil.CollectAndCount(b.reg, "trimtab_replica_sync_lag_seconds"); n != 1 {
		t.Errorf("lag histogram: %d series, want 1", n)
	}
}

// TestLateJoinerCatchesUp: a replica started after its peer routed gets
// the peer's index from a snapshot, LRU order included.
func TestLateJoinerCatchesUp(t *testing.T) {
	la := listen(t)
	cfg := prefix.DefaultConfig()
	// a's only peer does not exist yet: its batches queue, then drop.
	a := start(t, testConfig("a", "127.0.0.1:1"), la, cfg)
	prompts := map[string]string{"ABCD": "10.0.0.1:8000", "ABEF": "10.0.0.2:8000", "XYZ": "10.0.0.3:8000"}
	for p, ep := range prompts {
		d, err := a.sched.Pick(context.Background(), &scheduler.Request{Prompt: prompt(p), Subset: []string{ep}})
		if err != nil {
			t.Fatal(err)
		}
		d.Done(scheduler.Outcome{})
	}
	c := start(t, testConfig("c", la.Addr().String()), listen(t), cfg)
	eventually(t, "c to restore a's snapshot", func() bool { return c.rep.Status().Peers[0].Snapshots == 1 })
	if ia, ic := index(a), index(c); !sameIndex(ia, ic) || len(ia) != 3 {
		t.Errorf("c's index %v, a's %v; want the same three endpoints in the same order", ic, ia)
	}
	if got := testutil.ToFloat64(a.rep.m.snapshotsSent); got != 1 {
		t.Errorf("a sent %v snapshots, want 1", got)
	}
}

// TestSlowPeerNeverBlocksPicks: with the only peer unreachable, picks go
// on, batches beyond the queue are dropped and counted.
func TestSlowPeerNeverBlocksPicks(t *testing.T) {
	cfg := testConfig("a", "127.0.0.1:1")
	cfg.QueueSize = 2
	a := start(t, cfg, listen(t), prefix.DefaultConfig())
	for i := range 200 {
		d, err := a.sched.Pick(context.Background(), &scheduler.Request{Prompt: prompt(string(rune('A' + i%26)))})
		if err != nil {
			t.Fatal(err)
		}
		d.Done(scheduler.Outcome{})
		if i%20 == 0 {
			time.Sleep(6 * time.Millisecond) // let a few flushes happen
		}
	}
	eventually(t, "dropped batches to be counted", func() bool { return testutil.ToFloat64(a.rep.m.droppedQueue) > 0 })
	st := a.rep.Status()
	if st.Peers[0].Connected || st.Peers[0].LastError == "" || st.Peers[0].Queued > 2 {
		t.Errorf("peer status %+v, want disconnected with an error and at most 2 queued", st.Peers[0])
	}
}

// TestSelfAndMismatch: a replica listed among its own peers stops dialling
// itself; a peer with another index layout is refused with a clear error.
func TestSelfAndMismatch(t *testing.T) {
	la, lb := listen(t), listen(t)
	a := start(t, testConfig("a", la.Addr().String(), lb.Addr().String()), la, prefix.DefaultConfig())
	other := prefix.DefaultConfig()
	other.Shards = 8
	start(t, testConfig("b", la.Addr().String()), lb, other)
	eventually(t, "a to find itself and be refused by b", func() bool {
		st := a.rep.Status()
		return st.Peers[0].Self && strings.Contains(st.Peers[1].LastError, "prefix index layout differs")
	})
	// a's error names a's layout; b's refusal does not tell its own.
	if err := a.rep.Status().Peers[1].LastError; !strings.Contains(err, "shards=16") || strings.Contains(err, "shards=8") {
		t.Errorf("mismatch error %q: want a's layout (shards=16), not b's (shards=8)", err)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := testConfig("a", "10.0.0.9:9003")
	tests := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) {}, ""},
		{func(c *Config) { c.Enabled, c.Peers = false, nil }, ""},
		{func(c *Config) { c.Peers = nil }, "replicas.peers: list the other replicas"},
		{func(c *Config) { c.Peers, c.Discovery = nil, Discovery{Selector: "app=trimtab", Namespace: "x"} }, ""},
		{func(c *Config) { c.Discovery = Discovery{Selector: "app=trimtab"} }, "replicas.discovery.namespace: required"},
		{func(c *Config) { c.Discovery = Discovery{Port: 9003} }, "replicas.discovery: namespace or port set without a selector"},
		{func(c *Config) { c.Peers = []string{"nohost"} }, `replicas.peers[0]: "nohost" is not host:port`},
		{func(c *Config) { c.Peers = []string{"a:1", "a:1"} }, `replicas.peers[1]: "a:1" is peers[0] again`},
		{func(c *Config) { c.Listen = "x:port" }, `replicas.listen: "x:port": port "port" is not a number`},
		{func(c *Config) { c.FlushInterval = 0 }, "replicas.flush_interval: 0s, want 1ms…1s"},
		{func(c *Config) { c.QueueSize = 0 }, "replicas.queue_size: 0, want 1…65536"},
		{func(c *Config) { c.PeerTimeout = 10 * time.Millisecond }, "replicas.peer_timeout: 10ms, want at least 3 × flush_interval (15ms)"},
		{func(c *Config) { c.TLS.CertFile = "c.pem" }, "replicas.tls: set cert_file, key_file and ca_file together"},
		{func(c *Config) { c.Insecure = false }, "replicas.tls, replicas.token_file or replicas.insecure: replica sync takes routing hints"},
		{func(c *Config) { c.Insecure, c.TokenFile = false, "/run/token" }, ""},
		{func(c *Config) { c.TokenFile = "/run/token" }, "replicas.insecure: true together with tls or token_file"},
		{func(c *Config) { c.MaxPeers = 0 }, "replicas.max_peers: 0, want 1…1024"},
		{func(c *Config) { c.MaxPeerInFlight = -1 }, "replicas.max_peer_in_flight: -1, want 1…1048576"},
		{func(c *Config) { c.MaxPeerPendingPrefillBytes = 0 }, "replicas.max_peer_pending_prefill_bytes: 0"},
		{func(c *Config) { c.MaxPeerPicksPerSecond = 0 }, "replicas.max_peer_picks_per_second: 0"},
		{func(c *Config) { c.MaxSnapshotBytes = 1000 }, "replicas.max_snapshot_bytes: 1000, want 1048576 (1 MiB)"},
		{func(c *Config) { c.SnapshotTimeout = 0 }, "replicas.snapshot_timeout: 0s, want 1s…1h"},
	}
	for i, tt := range tests {
		c := ok
		tt.edit(&c)
		err := c.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("case %d: %v, want %q", i, err, tt.want)
		}
	}
	s, _ := newScheduler(t, prefix.DefaultConfig())
	if _, err := New(testConfig("", "a:1"), s, Deps{}); err == nil || !strings.Contains(err.Error(), "replicas.id") {
		t.Errorf("New without an id: %v", err)
	}
	c := testConfig("a", "a:1")
	c.Insecure, c.TLS = false, TLSConfig{CertFile: "/nonexistent/c.pem", KeyFile: "/nonexistent/k.pem", CAFile: "/nonexistent/ca.pem"}
	if _, err := New(c, s, Deps{}); err == nil || !strings.Contains(err.Error(), "replicas.tls") {
		t.Errorf("New with missing TLS files: %v", err)
	}
}

// TestSetPeers: peers added while running are dialled at once; removed
// ones' streams close, so their receivers stop counting this replica.
func TestSetPeers(t *testing.T) {
	la, lb := listen(t), listen(t)
	cfg := prefix.DefaultConfig()
	a := start(t, testConfig("a", "127.0.0.1:1"), la, cfg)
	b := start(t, testConfig("b", la.Addr().String()), lb, cfg)
	d, err := a.sched.Pick(context.Background(), &scheduler.Request{Prompt: prompt("AB"), Subset: []string{"10.0.0.1:8000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Done(scheduler.Outcome{})
	onB := func() int64 { return b.sched.Pool().Pointers()[0].InFlight() }
	if err := a.rep.SetPeers([]string{lb.Addr().String(), lb.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to count a's request once a dials it", func() bool { return onB() == 1 })
	if ps := a.rep.Status().Peers; len(ps) != 1 || ps[0].ID != "b" || !ps[0].Connected {
		t.Errorf("peers after SetPeers with a repeated address: %+v, want one, b, connected", ps)
	}
	if err := a.rep.SetPeers(nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to drop a's count once a stops streaming", func() bool { return onB() == 0 })
	if err := a.rep.SetPeers([]string{"no-port"}); err == nil || !strings.Contains(err.Error(), `"no-port" is not host:port`) {
		t.Errorf("SetPeers with a bad address: %v", err)
	}
}

// TestRedialAfterPeerRestart: a peer stopped for 10 s and started again on
// the same port is streamed to again within a few retry intervals, not
// after gRPC's connection backoff grew while it was away (1 s, 1.6 s,
// 2.6 s, … after each failed connection: at 10 s down, the next attempt
// comes 5–8 s after the restart).
func TestRedialAfterPeerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("a peer down for 10 s")
	}
	la, lb := listen(t), listen(t)
	addrB := lb.Addr().String()
	cfg := prefix.DefaultConfig()
	a := start(t, testConfig("a", addrB), la, cfg)
	b := start(t, testConfig("b", la.Addr().String()), lb, cfg)
	eventually(t, "a to stream to b", func() bool { return a.rep.Status().Peers[0].Connected })
	b.stop()
	eventually(t, "a to see b gone", func() bool { return !a.rep.Status().Peers[0].Connected })
	time.Sleep(10 * time.Second) // b is down: a keeps failing to connect
	lb2, err := net.Listen("tcp", addrB)
	if err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	start(t, testConfig("b", la.Addr().String()), lb2, cfg)
	for !a.rep.Status().Peers[0].Connected {
		if time.Since(restarted) > 3*time.Second {
			t.Fatalf("a has not streamed to b again %v after b restarted (retry_interval %v)", time.Since(restarted), testConfig("a").RetryInterval)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSyncsTheHeaviestPrefixIndex: with several prefix scorers in the
// profile, the replica syncs the one with the largest profile weight (the
// first of those on a tie), the same one the simulator's routers sync
// (prefix.Synced). Weights 0, 32, 32, 0: the second.
func TestSyncsTheHeaviestPrefixIndex(t *testing.T) {
	var entries []scheduler.ScorerEntry
	for i, w := range []float64{0, 32, 32, 0} {
		p, err := prefix.New("p"+string(rune('a'+i)), prefix.DefaultConfig(), prefix.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, scheduler.ScorerEntry{Name: "p" + string(rune('a'+i)), Type: "prefix", Scorer: p, Weight: w})
	}
	s, err := scheduler.New(scheduler.DefaultConfig(), entries, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(testConfig("a", "127.0.0.1:1"), s, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if r.prefix != entries[1].Scorer || !strings.HasPrefix(r.syncKey, "pb:") {
		t.Errorf("synced index %q, want pb (weight 32, the first of the heaviest)", r.syncKey)
	}
}
