package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/replica/replicapb"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// The hostile peers here speak the generated replica protocol
// (replicapb) over real gRPC on loopback; none of them is a Replica.

const testToken = "0123456789abcdef0123456789abcdef-test"

func writeToken(t *testing.T, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// dialFrom dials addr in plain text from the local IP from ("" for any).
func dialFrom(t *testing.T, addr, from string) replicapb.ReplicaClient {
	t.Helper()
	d := net.Dialer{}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return replicapb.NewReplicaClient(conn)
}

type syncStream = grpc.BidiStreamingClient[replicapb.Message, replicapb.Message]

// hello opens a stream with tok (none if empty), sends h and waits for the
// answer: nil once the replica sent its Hello, else the refusal.
func hello(ctx context.Context, c replicapb.ReplicaClient, tok string, h *replicapb.Hello) (syncStream, error) {
	if tok != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	st, err := c.Sync(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&replicapb.Message{Body: &replicapb.Message_Hello{Hello: h}}); err != nil && !errors.Is(err, io.EOF) {
		return st, err
	}
	m, err := st.Recv()
	if err != nil {
		return st, err
	}
	if m.GetHello() == nil {
		return st, fmt.Errorf("first answer %v is not a Hello", m)
	}
	return st, nil
}

// counter reads a counter from reg by name and label values (0 when the
// series does not exist).
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// victim runs a replica with the token on 127.0.0.1, whose only peer is
// 127.0.0.1:1 (so 127.0.0.1 is in its peer set and 127.0.0.2 is not).
func victim(t *testing.T, edit func(*Config)) *node {
	t.Helper()
	cfg := testConfig("victim", "127.0.0.1:1")
	cfg.Insecure, cfg.TokenFile = false, writeToken(t, testToken)
	if edit != nil {
		edit(&cfg)
	}
	return start(t, cfg, listen(t), prefix.DefaultConfig())
}

func (n *node) hello(id string) *replicapb.Hello {
	return &replicapb.Hello{ReplicaId: id, SyncKey: n.rep.syncKey}
}

// TestSyncRefusesToStartUnauthenticated: without tls, token_file or an
// explicit insecure, New fails naming all three.
func TestSyncRefusesToStartUnauthenticated(t *testing.T) {
	cfg := testConfig("a", "127.0.0.1:1")
	cfg.Insecure = false
	s, _ := newScheduler(t, prefix.DefaultConfig())
	_, err := New(cfg, s, Deps{})
	if err == nil {
		t.Fatal("New without authentication succeeded")
	}
	for _, want := range []string{"replicas.tls", "replicas.token_file", "replicas.insecure"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	tests := []struct {
		token string
		want  string
	}{
		{"", "is empty"},
		{"  short\n", "at least 32"},
		{strings.Repeat("x", 5000), "at most 4096"},
		{strings.Repeat("x", 40) + "\x01", "printable"},
	}
	for _, tt := range tests {
		c := cfg
		c.TokenFile = writeToken(t, tt.token)
		if _, err := New(c, s, Deps{}); err == nil || !strings.Contains(err.Error(), "replicas.token_file") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("token %.12q: %v, want an error naming replicas.token_file and %q", tt.token, err, tt.want)
		}
	}
}

// TestHostileUnauthenticated: a stream without the token, or with another
// one, is refused before its Hello is read, and counted.
func TestHostileUnauthenticated(t *testing.T) {
	v := victim(t, nil)
	c := dialFrom(t, v.lis.Addr().String(), "127.0.0.1")
	for _, tok := range []string{"", "wrong-token-wrong-token-wrong-token-0"} {
		_, err := hello(t.Context(), c, tok, v.hello("mallory"))
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("token %q: %v, want Unauthenticated", tok, err)
		}
	}
	if got := counter(t, v.reg, "trimtab_replica_peers_refused_total", "reason", "unauthenticated"); got != 2 {
		t.Errorf("refused unauthenticated: %v, want 2", got)
	}
	if st, err := hello(t.Context(), c, testToken, v.hello("friend")); err != nil {
		t.Errorf("with the token: %v", err)
	} else {
		st.CloseSend()
	}
	for _, in := range v.rep.Status().Inbound {
		if in.ID == "mallory" {
			t.Error("mallory is among the inbound peers")
		}
	}
}

// TestHostileUnknownAddress: a peer with the token but from an address
// outside the configured and discovered peers is refused and counted; once
// discovery (SetPeers) lists its address, it is accepted.
func TestHostileUnknownAddress(t *testing.T) {
	if l, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("127.0.0.2 is not a local address here (on macOS: sudo ifconfig lo0 alias 127.0.0.2): %v", err)
	} else {
		l.Close()
	}
	v := victim(t, nil)
	addr := v.lis.Addr().String()
	_, err := hello(t.Context(), dialFrom(t, addr, "127.0.0.2"), testToken, v.hello("stranger"))
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("from 127.0.0.2: %v, want PermissionDenied", err)
	}
	if got := counter(t, v.reg, "trimtab_replica_peers_refused_total", "reason", "unknown_address"); got != 1 {
		t.Errorf("refused unknown_address: %v, want 1", got)
	}
	if err := v.rep.SetPeers([]string{"127.0.0.1:1", "127.0.0.2:1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := hello(t.Context(), dialFrom(t, addr, "127.0.0.2"), testToken, v.hello("newcomer")); err != nil {
		t.Errorf("from 127.0.0.2 once discovered: %v", err)
	}
	// A peer named by host name is resolved.
	w := victim(t, func(c *Config) { c.Peers = []string{"localhost:1"} })
	if _, err := hello(t.Context(), dialFrom(t, w.lis.Addr().String(), "127.0.0.1"), testToken, w.hello("local")); err != nil {
		t.Errorf("from 127.0.0.1 with peers [localhost:1]: %v", err)
	}
}

// TestHostileSyncKeyNotEchoed: a Hello with another layout is refused
// without the replica's layout in the answer.
func TestHostileSyncKeyNotEchoed(t *testing.T) {
	v := victim(t, nil)
	_, err := hello(t.Context(), dialFrom(t, v.lis.Addr().String(), ""), testToken, &replicapb.Hello{ReplicaId: "probe", SyncKey: "guess"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("%v, want FailedPrecondition", err)
	}
	msg := status.Convert(err).Message()
	if strings.Contains(msg, v.rep.syncKey) || strings.Contains(msg, "shards=") || !strings.Contains(msg, "layout differs") {
		t.Errorf("refusal %q: want \"layout differs\" without this replica's layout %q", msg, v.rep.syncKey)
	}
	if got := counter(t, v.reg, "trimtab_replica_peers_refused_total", "reason", "layout_differs"); got != 1 {
		t.Errorf("refused layout_differs: %v, want 1", got)
	}
}

// batch sends one Batch on st.
func batch(t *testing.T, st syncStream, chains []*replicapb.Chain, loads []*replicapb.Load) {
	t.Helper()
	if err := st.Send(&replicapb.Message{Body: &replicapb.Message_Batch{Batch: &replicapb.Batch{Chains: chains, Loads: loads, SentUnixNano: time.Now().UnixNano()}}}); err != nil {
		t.Fatal(err)
	}
}

func (n *node) inbound(id string) InboundStatus {
	for _, in := range n.rep.Status().Inbound {
		if in.ID == id {
			return in
		}
	}
	return InboundStatus{}
}

// TestHostileLoadsClamped: a peer's loads are clamped to [0, the bounds]
// per endpoint; loads for endpoints the pool lacks and repeated endpoints
// are dropped, so nothing stays behind when the peer goes.
func TestHostileLoadsClamped(t *testing.T) {
	v := victim(t, func(c *Config) { c.MaxPeerInFlight, c.MaxPeerPendingPrefillBytes = 100, 1000 })
	ctx, cancel := context.WithCancel(t.Context())
	st, err := hello(ctx, dialFrom(t, v.lis.Addr().String(), ""), testToken, v.hello("liar"))
	if err != nil {
		t.Fatal(err)
	}
	batch(t, st, nil, []*replicapb.Load{
		{Endpoint: "10.0.0.1:8000", InFlight: 1000000, PendingPrefill: 1 << 50}, // both clamped: 100, 1000
		{Endpoint: "10.0.0.2:8000", InFlight: -500, PendingPrefill: -7},         // both clamped: 0, 0
		{Endpoint: "10.0.0.3:8000", InFlight: 7, PendingPrefill: 9},
		{Endpoint: "10.0.0.3:8000", InFlight: 7, PendingPrefill: 9}, // again: dropped
		{Endpoint: "10.9.9.9:8000", InFlight: 5},                    // not in the pool: dropped
	})
	eventually(t, "the batch to be applied", func() bool { return v.inbound("liar").Batches == 1 })
	eps := v.sched.Pool().Pointers()
	for i, want := range []struct{ inflight, pending int64 }{{100, 1000}, {0, 0}, {7, 9}} {
		if got, gotP := eps[i].InFlight(), eps[i].PendingPrefill(); got != want.inflight || gotP != want.pending {
			t.Errorf("%s: in flight %d, pending %d; want %d, %d", eps[i].Address, got, gotP, want.inflight, want.pending)
		}
	}
	if got := counter(t, v.reg, "trimtab_replica_loads_clamped_total"); got != 4 {
		t.Errorf("loads clamped: %v, want 4 (in flight and pending, on 10.0.0.1 and 10.0.0.2)", got)
	}
	if pl := v.rep.loads.Peer("liar"); len(pl) != 2 {
		t.Errorf("applied loads %v, want 10.0.0.1 and 10.0.0.3 only", pl)
	}
	cancel()
	eventually(t, "the liar's loads to be taken back", func() bool {
		for _, e := range eps {
			if e.InFlight() != 0 || e.PendingPrefill() != 0 {
				return false
			}
		}
		return true
	})
}

// TestHostileChainFlood: a peer's picks beyond max_peer_picks_per_second
// (a bucket of one second's worth, refilled on the replica's clock) are
// dropped and counted.
func TestHostileChainFlood(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	cfg := testConfig("victim", "127.0.0.1:1")
	cfg.Insecure, cfg.TokenFile = false, writeToken(t, testToken)
	cfg.MaxPeerPicksPerSecond = 100
	v := startDeps(t, cfg, Deps{Listener: listen(t), Clock: clk}, prefix.DefaultConfig())
	st, err := hello(t.Context(), dialFrom(t, v.lis.Addr().String(), ""), testToken, v.hello("flooder"))
	if err != nil {
		t.Fatal(err)
	}
	chains := make([]*replicapb.Chain, 100)
	for i := range chains {
		chains[i] = &replicapb.Chain{Endpoint: "10.0.0.1:8000", Hashes: []uint64{uint64(i + 1)}}
	}
	for range 10 {
		batch(t, st, chains, nil)
	}
	eventually(t, "10 batches", func() bool { return v.inbound("flooder").Batches == 10 })
	// 10 × 100 picks at one instant: the bucket's 100 pass, 900 drop.
	if got := counter(t, v.reg, "trimtab_replica_picks_applied_total"); got != 100 {
		t.Errorf("picks applied %v, want 100", got)
	}
	if got := counter(t, v.reg, "trimtab_replica_updates_dropped_total", "reason", "rate_limited"); got != 900 {
		t.Errorf("picks dropped rate_limited %v, want 900", got)
	}
	clk.Step(500 * time.Millisecond) // refills 50
	batch(t, st, chains, nil)
	eventually(t, "the 11th batch", func() bool { return v.inbound("flooder").Batches == 11 })
	if got := counter(t, v.reg, "trimtab_replica_picks_applied_total"); got != 150 {
		t.Errorf("picks applied %v, want 100 + 50", got)
	}
}

// TestHostilePeerIDsBounded: 20,000 peer ids keep at most max_peers
// entries (a live peer's entry is never evicted; a new id beyond max_peers
// while all are live is refused and counted), and /debug/peers stays
// small.
func TestHostilePeerIDsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 streams")
	}
	v := victim(t, func(c *Config) { c.MaxPeers = 8 })
	c := dialFrom(t, v.lis.Addr().String(), "")
	live := make([]context.CancelFunc, 0, 8)
	for i := range 8 {
		ctx, cancel := context.WithCancel(t.Context())
		if _, err := hello(ctx, c, testToken, v.hello(fmt.Sprintf("live-%d", i))); err != nil {
			t.Fatal(err)
		}
		live = append(live, cancel)
	}
	if _, err := hello(t.Context(), c, testToken, v.hello("one-too-many")); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 9th id with 8 live: %v, want ResourceExhausted", err)
	}
	if got := counter(t, v.reg, "trimtab_replica_peers_refused_total", "reason", "too_many_peers"); got != 1 {
		t.Errorf("refused too_many_peers: %v, want 1", got)
	}
	live[0]()
	eventually(t, "live-0 to expire", func() bool { return v.inbound("live-0").Expired })
	for i := range 20000 {
		ctx, cancel := context.WithCancel(t.Context())
		st, err := hello(ctx, c, testToken, v.hello(fmt.Sprintf("sybil-%d", i)))
		if err == nil {
			st.CloseSend()
			_, err = st.Recv() // the stream ends: the id is expired
		}
		cancel()
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("sybil %d: %v", i, err)
		}
	}
	if n := len(v.rep.Status().Inbound); n > 8 {
		t.Errorf("%d inbound peers kept, want at most 8", n)
	}
	for i := 1; i < 8; i++ {
		if in := v.inbound(fmt.Sprintf("live-%d", i)); in.Streams != 1 {
			t.Errorf("live-%d: %+v, want kept with its stream", i, in)
		}
	}
	rec := httptest.NewRecorder()
	v.rep.Handler().ServeHTTP(rec, httptest.NewRequest("GET", PathPeers, nil))
	if rec.Body.Len() > 16<<10 {
		t.Errorf("/debug/peers is %d bytes", rec.Body.Len())
	}
	for _, cancel := range live {
		cancel()
	}
}

// TestHostileEndpointNames: 500,000 endpoint names in one batch's loads
// and chains: none is kept (the pool has 3), all are counted.
func TestHostileEndpointNames(t *testing.T) {
	v := victim(t, nil)
	st, err := hello(t.Context(), dialFrom(t, v.lis.Addr().String(), ""), testToken, v.hello("namer"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 500000
	loads := make([]*replicapb.Load, n)
	for i := range loads {
		loads[i] = &replicapb.Load{Endpoint: fmt.Sprintf("10.%d.%d.%d:1", i>>16, i>>8&255, i&255), InFlight: 1}
	}
	batch(t, st, nil, loads)
	eventually(t, "the batch to be applied", func() bool { return v.inbound("namer").Batches == 1 })
	if pl := v.rep.loads.Peer("namer"); len(pl) != 0 {
		t.Errorf("%d endpoints kept for the peer, want 0", len(pl))
	}
	if got := counter(t, v.reg, "trimtab_replica_updates_dropped_total", "reason", "unknown_endpoint"); got != n {
		t.Errorf("dropped unknown_endpoint %v, want %d", got, n)
	}
}

// endless is a hostile sync server: it accepts any Hello, then streams
// snapshot parts that never end (until a send fails or it sent limit
// hashes), or, with stall, one part and then nothing.
type endless struct {
	replicapb.UnimplementedReplicaServer
	limit   int64
	stall   bool
	streams atomic.Int64
	sent    atomic.Int64 // hashes the first stream sent
	cut     chan error   // the first stream's end
}

func (e *endless) Sync(st grpc.BidiStreamingServer[replicapb.Message, replicapb.Message]) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	first := e.streams.Add(1) == 1
	if err := st.Send(&replicapb.Message{Body: &replicapb.Message_Hello{Hello: &replicapb.Hello{ReplicaId: "endless"}}}); err != nil {
		return err
	}
	if !first {
		<-st.Context().Done()
		return nil
	}
	hashes := make([]uint64, 8192)
	for i := range hashes {
		hashes[i] = uint64(i)
	}
	part := &replicapb.Message{Body: &replicapb.Message_Snapshot{Snapshot: &replicapb.Snapshot{
		Chains: []*replicapb.Chain{{Endpoint: "10.0.0.1:8000", Hashes: hashes}}}}}
	for e.sent.Load() < e.limit {
		if err := st.Send(part); err != nil {
			e.cut <- err
			return err
		}
		if e.sent.Add(int64(len(hashes))); e.stall {
			<-st.Context().Done()
			e.cut <- st.Context().Err()
			return nil
		}
	}
	e.cut <- nil
	<-st.Context().Done()
	return nil
}

func serveEndless(t *testing.T, e *endless) string {
	t.Helper()
	l := listen(t)
	gs := grpc.NewServer()
	replicapb.RegisterReplicaServer(gs, e)
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	return l.Addr().String()
}

// TestHostileEndlessSnapshot: a peer whose snapshot never ends is dropped
// once it sent max_snapshot_bytes, and what the replica took of it stays
// within that bound.
func TestHostileEndlessSnapshot(t *testing.T) {
	e := &endless{limit: 8 << 20, cut: make(chan error, 1)} // 8 Mi hashes, 64 MiB
	cfg := testConfig("a", serveEndless(t, e))
	cfg.MaxSnapshotBytes = 1 << 20 // 131,072 hashes, 16 parts of 8,192
	a := start(t, cfg, listen(t), prefix.DefaultConfig())
	select {
	case err := <-e.cut:
		if err == nil {
			t.Fatalf("the replica took %d hashes (%d MiB) of an endless snapshot and was still reading", e.sent.Load(), e.sent.Load()>>17)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the endless snapshot still streams after %d hashes", e.sent.Load())
	}
	eventually(t, "the overflow to be counted", func() bool {
		return counter(t, a.reg, "trimtab_replica_snapshots_dropped_total", "reason", "too_large") == 1
	})
	if got := a.rep.peerList()[0].snapshotHashesMax.Load(); got > 1<<17 {
		t.Errorf("the replica took %d hashes of the snapshot, want at most 131,072", got)
	}
	if got := counter(t, a.reg, "trimtab_replica_snapshots_total", "direction", "received"); got != 0 {
		t.Errorf("snapshots received %v, want 0", got)
	}
}

// TestHostileStalledSnapshot: a peer whose snapshot does not finish within
// snapshot_timeout (on the replica's clock) is dropped.
func TestHostileStalledSnapshot(t *testing.T) {
	e := &endless{limit: 1 << 20, stall: true, cut: make(chan error, 1)}
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	cfg := testConfig("a", serveEndless(t, e))
	a := startDeps(t, cfg, Deps{Listener: listen(t), Clock: clk}, prefix.DefaultConfig())
	eventually(t, "the first part to be sent", func() bool { return e.sent.Load() > 0 })
	// Step the clock until the stall is counted (the timer may not exist
	// yet at the first steps; on a loaded machine the stream may also end
	// for another reason first, and the replica redials and asks again).
	slow := func() float64 {
		return counter(t, a.reg, "trimtab_replica_snapshots_dropped_total", "reason", "too_slow")
	}
	deadline := time.Now().Add(60 * time.Second)
	for slow() == 0 && time.Now().Before(deadline) {
		clk.Step(cfg.SnapshotTimeout / 4)
		time.Sleep(10 * time.Millisecond)
	}
	if slow() == 0 {
		t.Fatalf("the stalled snapshot was never dropped as too slow (%d parts sent)", e.sent.Load())
	}
	eventually(t, "the stalled snapshot's stream to be cut", func() bool { return len(e.cut) > 0 })
}

// TestTokenRotation: a changed token file is read at the next check (every
// 10 s on the clock); the previous token stays accepted until the one
// after.
func TestTokenRotation(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	path := writeToken(t, testToken)
	ts, err := newTokenSource(path, clk, slogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	md := func(tok string) metadata.MD { return metadata.Pairs("authorization", "Bearer "+tok) }
	second, third := testToken+"-second", testToken+"-third-one"
	if !ts.accepts(md(testToken)) || ts.accepts(md(second)) || ts.accepts(metadata.MD{}) || ts.accepts(metadata.Pairs("authorization", testToken)) {
		t.Fatal("the first token: want it alone accepted, as a Bearer token")
	}
	for _, next := range []string{second, third} {
		if err := os.WriteFile(path, []byte(next+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if ts.accepts(md(next)) {
			t.Errorf("%s accepted before the next check", next)
		}
		clk.Step(tokenRecheck)
		if !ts.accepts(md(next)) || ts.current() != next {
			t.Errorf("%s not taken up %v later", next, tokenRecheck)
		}
	}
	// Accepted: third (current) and second (previous), not the first.
	if ts.accepts(md(testToken)) || !ts.accepts(md(second)) {
		t.Error("after two rotations: want the current and the previous token accepted, not the first")
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.Step(tokenRecheck)
	if !ts.accepts(md(third)) {
		t.Error("an unusable new token file replaced the working token")
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestHostileSilentStream: an authenticated stream from a peer's address
// that never sends its Hello is closed after peer_timeout (300 ms here),
// not held open for ever, and counted as a bad Hello.
func TestHostileSilentStream(t *testing.T) {
	v := victim(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer time.AfterFunc(20*time.Second, cancel).Stop() // the test's own bound: Canceled, not DeadlineExceeded
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+testToken)
	st, err := dialFrom(t, v.lis.Addr().String(), "127.0.0.1").Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a silent stream ended with %v, want DeadlineExceeded from the replica (the test gives up after 20 s with Canceled)", err)
	}
	if got := counter(t, v.reg, "trimtab_replica_peers_refused_total", "reason", "bad_hello"); got != 1 {
		t.Errorf("refused bad_hello: %v, want 1", got)
	}
}
