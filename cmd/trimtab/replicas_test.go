package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/replica"
	"github.com/trimtab/trimtab/scheduler"
)

// replicaSet is n `serve` replicas in one process in front of one fleet,
// each with replica sync towards all the others (when sync is on).
type replicaSet struct {
	t       *testing.T
	fleet   []string
	syncLns []net.Listener
	members []*testService
	// queue is replicas.queue_size (0: the default).
	queue int
	// discover finds the peers through replicas.discovery (a fixed
	// discoverer standing in for the Kubernetes informers) instead of a
	// static list.
	discover bool
}

// newReplicaSet reserves n sync listeners (so every profile can list every
// peer) and starts the replicas in start (the rest with startReplica).
func newReplicaSet(t *testing.T, fleet []string, n int, sync bool, start ...int) *replicaSet {
	t.Helper()
	rs := &replicaSet{t: t, fleet: fleet, members: make([]*testService, n)}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rs.syncLns = append(rs.syncLns, ln)
	}
	for _, i := range start {
		rs.startReplica(i, sync)
	}
	return rs
}

func (rs *replicaSet) startReplica(i int, sync bool) *testService {
	t := rs.t
	t.Helper()
	dir := t.TempDir()
	var eps strings.Builder
	eps.WriteString("endpoints:\n")
	for _, a := range rs.fleet {
		fmt.Fprintf(&eps, "  - address: %s\n    models: [llama-3.1-8b-instruct]\n", a)
	}
	epsFile := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(epsFile, []byte(eps.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// profileYAML ends with the scrape: section. Metrics stay fresh for 2 s
	// (not 4 × 50 ms): these tests are about what the replicas share, and
	// on a busy machine a late scrape would otherwise filter the pod that
	// holds a prefix out as stale.
	body := profileYAML(epsFile, 16, false) + "  max_age: 2s\n"
	if sync {
		var peers []string
		for _, l := range rs.syncLns {
			peers = append(peers, l.Addr().String())
		}
		// One peer list for every replica, its own address included.
		list := fmt.Sprintf("  peers: [%s]\n", strings.Join(peers, ", "))
		if rs.discover {
			list = "  discovery: {selector: app.kubernetes.io/name=trimtab, namespace: test}\n"
		}
		// The replicas share a token (replicas.token_file), as from one
		// Kubernetes Secret.
		tokenFile := filepath.Join(dir, "replica-token")
		if err := os.WriteFile(tokenFile, []byte("replica-set-test-token-0123456789abcdef\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		body += fmt.Sprintf("replicas:\n  enabled: true\n  id: replica-%d\n  listen: %s\n%s  flush_interval: 5ms\n  peer_timeout: 600ms\n  retry_interval: 50ms\n  token_file: %s\n",
			i, rs.syncLns[i].Addr(), list, tokenFile)
		if rs.queue > 0 {
			body += fmt.Sprintf("  queue_size: %d\n", rs.queue)
		}
	}
	f, err := configs.Load(writeProfile(t, dir, body))
	if err != nil {
		t.Fatal(err)
	}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	httpLn, adminLn := listen(), listen()
	opt := serviceOptions{Logger: slog.New(slog.DiscardHandler), HTTP: httpLn, Admin: adminLn, DisableExtProc: true, NoRuntimeM: true}
	if sync {
		opt.Replica = rs.syncLns[i]
	}
	if rs.discover {
		var found fleet.Fixed
		for k, l := range rs.syncLns {
			found = append(found, fleet.Target{Address: l.Addr().String(), Name: fmt.Sprintf("trimtab-%d", k)})
		}
		opt.PeerDiscoverer = found
	}
	svc, err := newService(f, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- svc.Run(ctx) }()
	ts := &testService{svc: svc, proxyURL: "http://" + httpLn.Addr().String(), adminURL: "http://" + adminLn.Addr().String()}
	stopped := false
	ts.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-errc:
			return err
		case <-time.After(20 * time.Second):
			return fmt.Errorf("replica %d did not stop within 20s of cancellation", i)
		}
	}
	t.Cleanup(func() { _ = ts.stop() })
	eventually(t, 10*time.Second, "readyz", func() bool {
		resp, err := http.Get(ts.adminURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	rs.members[i] = ts
	return ts
}

// sharedPrompt is request r of prefix group g: a 2,000-token group prefix
// (8,000 bytes) and a short question of its own.
func sharedPrompt(g, r int) string {
	prefix := strings.Repeat(fmt.Sprintf("group %03d system prompt. ", g), 8000/24)
	return prefix + fmt.Sprintf(" question %d of group %d?", r, g)
}

// completion sends one completion to url and returns its prompt and cached
// tokens.
func completion(url, prompt string) (promptTokens, cached int, err error) {
	body, _ := json.Marshal(map[string]any{"model": "llama-3.1-8b-instruct", "prompt": prompt, "max_tokens": 4})
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	var out struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, 0, err
	}
	return out.Usage.PromptTokens, out.Usage.Details.Cached, nil
}

// cachedRatio plays groups × rounds shared-prefix requests, round by round,
// spreading them round-robin over the replicas at urls, and returns the
// fleet's cached-token ratio (Σ cached ÷ Σ prompt tokens).
func cachedRatio(t *testing.T, urls []string, groups, rounds int) float64 {
	t.Helper()
	var prompt, cached, k int
	for r := range rounds {
		for g := range groups {
			p, c, err := completion(urls[k%len(urls)], sharedPrompt(g, r))
			if err != nil {
				t.Fatalf("request %d (group %d, round %d): %v", k, g, r, err)
			}
			prompt, cached, k = prompt+p, cached+c, k+1
		}
	}
	return float64(cached) / float64(prompt)
}

// TestReplicasKeepThePrefixCache: three synced replicas behind round robin
// keep at least 95 % of one replica's fleet cached-token ratio; three
// unsynced replicas lose part of it.
func TestReplicasKeepThePrefixCache(t *testing.T) {
	const groups, rounds = 11, 6 // 11 groups: round robin over 3 replicas sends each group to each replica
	ratio := func(n int, sync bool) float64 {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		rs := newReplicaSet(t, startFakeFleet(t, 4), n, sync, idx...)
		var urls []string
		for _, m := range rs.members {
			urls = append(urls, m.proxyURL)
		}
		if sync {
			eventually(t, 10*time.Second, "every replica connected to both peers", func() bool {
				for _, m := range rs.members {
					st := m.svc.repl.Status()
					out := 0
					for _, p := range st.Peers {
						if p.Connected {
							out++
						}
					}
					if out != n-1 {
						return false
					}
				}
				return true
			})
		}
		r := cachedRatio(t, urls, groups, rounds)
		for _, m := range rs.members {
			_ = m.stop()
		}
		return r
	}
	single, unsynced, synced := ratio(1, false), ratio(3, false), ratio(3, true)
	t.Logf("fleet cached-token ratio: 1 replica %.3f, 3 unsynced %.3f, 3 synced %.3f (%.1f %% of one)", single, unsynced, synced, 100*synced/single)
	if synced < 0.95*single {
		t.Errorf("3 synced replicas: cached-token ratio %.3f, below 95 %% of one replica's %.3f", synced, single)
	}
	if unsynced >= synced {
		t.Errorf("3 unsynced replicas: %.3f, not below the synced %.3f; the test does not show what sync is for", unsynced, synced)
	}
}

// TestReplicaKilledMidRun: with one of three replicas stopped mid-run, the
// other two keep routing every request; the stopped one finishes what it
// had in flight; its peers take its counts back.
func TestReplicaKilledMidRun(t *testing.T) {
	rs := newReplicaSet(t, startFakeFleet(t, 3), 3, true, 0, 1, 2)
	var (
		killed  atomic.Bool
		failed  atomic.Int64
		served  atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		firstE  error
	)
	const clients, perClient = 6, 30
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perClient {
				k := c*perClient + i
				m := k % 3
				if m == 2 && killed.Load() {
					m = k % 2 // the Service stops sending to the lost replica
				}
				if _, _, err := completion(rs.members[m].proxyURL, sharedPrompt(k%8, k)); err != nil {
					if m == 2 {
						continue // the lost replica's own requests may fail
					}
					failed.Add(1)
					errOnce.Do(func() { firstE = err })
					continue
				}
				served.Add(1)
			}
		}()
	}
	eventually(t, 20*time.Second, "a third of the requests", func() bool { return served.Load() >= clients*perClient/3 })
	killed.Store(true)
	if err := rs.members[2].stop(); err != nil {
		t.Errorf("stopping replica 2: %v", err)
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d requests to the surviving replicas failed; first: %v", n, firstE)
	}
	for _, m := range rs.members[:2] {
		eventually(t, 5*time.Second, "replica 2's counts to expire and the pool to drain", func() bool {
			for _, e := range m.svc.sched.Pool().Pointers() {
				if e.InFlight() != 0 || e.PendingPrefill() != 0 {
					return false
				}
			}
			for _, in := range m.svc.repl.Status().Inbound {
				if in.ID == "replica-2" && !in.Expired {
					return false
				}
			}
			return true
		})
	}
	// /debug/peers tells the operator.
	resp, err := http.Get(rs.members[0].adminURL + replica.PathPeers)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st replica.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	var lost *replica.PeerStatus
	for i, p := range st.Peers {
		if p.Address == rs.syncLns[2].Addr().String() {
			lost = &st.Peers[i]
		}
	}
	if st.ID != "replica-0" || lost == nil || lost.Connected || lost.LastError == "" {
		t.Errorf("/debug/peers on replica 0: %+v; want replica 2's address disconnected with its error", st)
	}
}

// TestReplicaStartedLateCatchesUp: a replica started after the others
// routed gets their prefix index from a snapshot before it routes anything,
// and its first requests find their prefixes cached.
func TestReplicaStartedLateCatchesUp(t *testing.T) {
	rs := newReplicaSet(t, startFakeFleet(t, 4), 3, true)
	// Batches for the absent replica queue up to 4, then drop: what it
	// knows at start must come from the snapshot.
	rs.queue = 4
	rs.startReplica(0, true)
	rs.startReplica(1, true)
	const groups = 12
	cachedRatio(t, []string{rs.members[0].proxyURL, rs.members[1].proxyURL}, groups, 2)
	late := rs.startReplica(2, true)
	eventually(t, 10*time.Second, "the late replica to restore both peers' snapshots", func() bool {
		n := 0
		for _, p := range late.svc.repl.Status().Peers {
			n += p.Snapshots
		}
		return n >= 2
	})
	// New questions of known groups, all through the late replica: each
	// prefix is already cached on the pod its snapshot names.
	var prompt, cached int
	for g := range groups {
		p, c, err := completion(late.proxyURL, sharedPrompt(g, 100+g))
		if err != nil {
			t.Fatal(err)
		}
		prompt, cached = prompt+p, cached+c
	}
	if r := float64(cached) / float64(prompt); r < 0.9 {
		t.Errorf("late replica's first requests: cached-token ratio %.3f, want ≥ 0.9 (every group prefix is on some pod)", r)
	}
}

// TestReplicasFoundByDiscovery: with replicas.discovery instead of a peer
// list, every replica streams to the others the discoverer reports (its
// own pod skipped) and they count each other's requests.
func TestReplicasFoundByDiscovery(t *testing.T) {
	rs := newReplicaSet(t, startFakeFleet(t, 2), 3, true)
	rs.discover = true
	for i := range 3 {
		rs.startReplica(i, true)
	}
	for _, m := range rs.members {
		eventually(t, 10*time.Second, "two connected peers and one self", func() bool {
			connected, self := 0, 0
			for _, p := range m.svc.repl.Status().Peers {
				if p.Connected {
					connected++
				}
				if p.Self {
					self++
				}
			}
			return connected == 2 && self == 1
		})
	}
	ep := rs.members[1].svc.sched.Pool().Pointers()[0].Address
	d, err := rs.members[1].svc.sched.Pick(context.Background(), &scheduler.Request{Model: "llama-3.1-8b-instruct", Subset: []string{ep}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Done(scheduler.Outcome{})
	for _, k := range []int{0, 2} {
		eventually(t, 5*time.Second, "the other replicas to count replica 1's request", func() bool {
			for _, e := range rs.members[k].svc.sched.Pool().Pointers() {
				if e.Address == ep {
					return e.InFlight() == 1
				}
			}
			return false
		})
	}
}
