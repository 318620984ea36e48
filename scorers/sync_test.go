package scorers

import (
	"slices"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
)

func TestPickLogBoundsAndDrains(t *testing.T) {
	l, err := NewPickLog(3, 8)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Append("a", []uint64{1, 2, 3}) || !l.Append("b", []uint64{4, 5, 6}) {
		t.Fatal("appends within capacity refused")
	}
	// 6 of 8 hashes used: a third chain of 3 does not fit.
	if l.Append("c", []uint64{7, 8, 9}) {
		t.Error("append beyond the hash capacity accepted")
	}
	got := l.Drain(nil)
	want := []Chain{{"a", []uint64{1, 2, 3}}, {"b", []uint64{4, 5, 6}}}
	if !chainsEqual(got, want) {
		t.Errorf("drain %v, want %v", got, want)
	}
	// After a drain the ring restarts; chains that wrap the end of the
	// hash ring come back whole.
	l.Append("x", []uint64{1, 2, 3, 4, 5})
	l.Drain(got)
	l.Append("y", []uint64{6, 7, 8})
	l.Append("z", []uint64{9, 10, 11, 12})
	l.Append("w", nil)
	// 3 records already: the fourth is over the pick capacity.
	if l.Append("v", nil) {
		t.Error("append beyond the pick capacity accepted")
	}
	got = l.Drain(got)
	want = []Chain{{"y", []uint64{6, 7, 8}}, {"z", []uint64{9, 10, 11, 12}}, {"w", nil}}
	if !chainsEqual(got, want) {
		t.Errorf("second drain %v, want %v", got, want)
	}
	if l.Dropped() != 2 || l.Appended() != 6 {
		t.Errorf("dropped %d, appended %d; want 2, 6", l.Dropped(), l.Appended())
	}
	if _, err := NewPickLog(0, 1); err == nil {
		t.Error("a log of 0 picks was accepted")
	}
}

func chainsEqual(a, b []Chain) bool {
	return slices.EqualFunc(a, b, func(x, y Chain) bool {
		return x.Endpoint == y.Endpoint && slices.Equal(x.Hashes, y.Hashes)
	})
}

// TestPrefixPeerPicks: replica A's picks, drained from its log and
// recorded in replica B's index, make B score A's endpoint as A does.
func TestPrefixPeerPicks(t *testing.T) {
	pool := eps("a:1", "b:1", "c:1")
	a := newHarness(t, mustPrefix(t, smallPrefix()), pool)
	b := newHarness(t, mustPrefix(t, smallPrefix()), pool)
	log, err := NewPickLog(16, 1024)
	if err != nil {
		t.Fatal(err)
	}
	a.prefix(t).SetPickLog(log)

	a.route(t, scheduler.Request{Model: "m", Prompt: prompt("ABCD")}, "b:1")
	a.route(t, scheduler.Request{Model: "m", Prompt: prompt("XY")}, "c:1")
	chains := log.Drain(nil)
	if len(chains) != 2 || chains[0].Endpoint != "b:1" || len(chains[0].Hashes) != 4 || len(chains[1].Hashes) != 2 {
		t.Fatalf("log holds %+v, want b:1 with 4 hashes then c:1 with 2", chains)
	}
	for _, c := range chains {
		if !b.prefix(t).RecordPeer(c.Endpoint, c.Hashes) {
			t.Fatalf("RecordPeer(%s) refused", c.Endpoint)
		}
	}
	if b.prefix(t).RecordPeer("z:9", chains[0].Hashes) {
		t.Error("RecordPeer accepted an endpoint outside the pool")
	}
	// B never routed anything, yet: "ABEF" shares 2 of 4 blocks with b:1's
	// "ABCD" (0.5); "XYZ" 2 of 3 with c:1's "XY" (0.667).
	scores, _ := b.pick(t, &scheduler.Request{Model: "m", Prompt: prompt("ABEF"), Subset: []string{"a:1", "b:1", "c:1"}})
	if want := []float64{0, 0.5, 0}; !slices.Equal(scores, want) {
		t.Errorf("B's scores for ABEF %v, want %v", scores, want)
	}
	scores, _ = b.pick(t, &scheduler.Request{Model: "m", Prompt: prompt("XYZ")})
	if scores[2] < 0.66 || scores[2] > 0.67 || scores[0] != 0 || scores[1] != 0 {
		t.Errorf("B's scores for XYZ %v, want [0 0 0.667]", scores)
	}
	// B's own picks are not in A's log (each replica logs its own).
	if n := log.Len(); n != 0 {
		t.Errorf("A's log holds %d picks after B's, want 0", n)
	}
	checkIndex(t, b.prefix(t))
}

// TestPrefixExportRestore: a joining replica restored from a peer's export
// scores every prompt as the peer does, and keeps each endpoint's LRU
// order (the least recent entries are evicted first on both).
func TestPrefixExportRestore(t *testing.T) {
	cfg := smallPrefix()
	cfg.Shards, cfg.Capacity = 2, 8 // 4 blocks per shard per endpoint: evictions happen
	pool := eps("a:1", "b:1", "c:1")
	src := newHarness(t, mustPrefix(t, cfg), pool)
	prompts := []string{"ABCDEFGH", "ABCDXYZ", "QRST", "QRSU", "MNOP", "ABCDEFGQ", "KLMN", "JJKK"}
	for i, p := range prompts {
		src.route(t, scheduler.Request{Model: "m", Prompt: prompt(p)}, pool[i%3].Address)
	}
	dst := newHarness(t, mustPrefix(t, cfg), pool)
	exported := 0
	src.prefix(t).Export(func(addr string, hashes []uint64) {
		exported += len(hashes)
		if !dst.prefix(t).Restore(addr, hashes) {
			t.Fatalf("Restore(%s) refused", addr)
		}
	})
	if exported == 0 {
		t.Fatal("export produced nothing")
	}
	if got, want := dst.prefix(t).Stats().Blocks, src.prefix(t).Stats().Blocks; got != want {
		t.Errorf("restored index holds %d blocks, the source %d", got, want)
	}
	checkIndex(t, dst.prefix(t))
	for _, p := range append(prompts, "ABCE", "QRSTUV", "ZZZZ") {
		req := scheduler.Request{Model: "m", Prompt: prompt(p)}
		want := scoresOf(t, src, req)
		if got := scoresOf(t, dst, req); !slices.Equal(got, want) {
			t.Errorf("%s: restored scores %v, source %v", p, got, want)
		}
	}
	// The same order: a new 4-block prompt on a:1 evicts the same (least
	// recent) entries on both.
	for _, h := range []*harness{src, dst} {
		h.route(t, scheduler.Request{Model: "m", Prompt: prompt("abcd")}, "a:1")
	}
	for _, p := range prompts {
		req := scheduler.Request{Model: "m", Prompt: prompt(p)}
		if got, want := scoresOf(t, dst, req), scoresOf(t, src, req); !slices.Equal(got, want) {
			t.Errorf("%s after evictions: restored scores %v, source %v", p, got, want)
		}
	}
}

// scoresOf scores req on every candidate without recording it (a Score
// outside Pick leaves the index untouched).
func scoresOf(t *testing.T, h *harness, req scheduler.Request) []float64 {
	t.Helper()
	cs := h.cycleState(t)
	eps := h.s.Pool().Pointers()
	out := make([]float64, len(eps))
	h.prefix(t).Score(cs, &req, eps, out)
	return out
}

func TestPeerLoads(t *testing.T) {
	h := newHarness(t, &InFlight{}, eps("a:1", "b:1"))
	a, b := h.s.Pool().Pointers()[0], h.s.Pool().Pointers()[1]
	pl := NewPeerLoads(h.s)
	pl.Apply("p1", []EndpointLoad{{"a:1", 3, 300}, {"b:1", 1, 0}})
	pl.Apply("p2", []EndpointLoad{{"a:1", 2, 0}})
	// a:1: 3 + 2 = 5 in flight, 300 pending; b:1: 1.
	if a.InFlight() != 5 || a.PendingPrefill() != 300 || b.InFlight() != 1 {
		t.Fatalf("a:1 %d/%d, b:1 %d; want 5/300, 1", a.InFlight(), a.PendingPrefill(), b.InFlight())
	}
	// p1's next report replaces its last: a:1 1 (so 1 + 2 = 3), b:1 gone.
	pl.Apply("p1", []EndpointLoad{{"a:1", 1, 0}})
	if a.InFlight() != 3 || a.PendingPrefill() != 0 || b.InFlight() != 0 {
		t.Errorf("after p1's second report: a:1 %d/%d, b:1 %d; want 3/0, 0", a.InFlight(), a.PendingPrefill(), b.InFlight())
	}
	// The in-flight scorer sees the pool-wide count: a:1 3, b:1 0 → 0, 1.
	scores, _ := h.pick(t, &scheduler.Request{})
	if !slices.Equal(scores, []float64{0, 1}) {
		t.Errorf("inflight scores %v, want [0 1]", scores)
	}
	pl.Expire("p2")
	pl.Expire("p1")
	if a.InFlight() != 0 || b.InFlight() != 0 || len(pl.Peer("p1")) != 0 {
		t.Errorf("after expiry: a:1 %d, b:1 %d, p1 %v; want 0, 0, none", a.InFlight(), b.InFlight(), pl.Peer("p1"))
	}
	// A report naming an endpoint twice counts its last entry once: a:1
	// 2 then 5 → 5; expiring the peer takes back exactly 5.
	pl.Apply("p3", []EndpointLoad{{"a:1", 2, 10}, {"a:1", 5, 20}})
	if a.InFlight() != 5 || a.PendingPrefill() != 20 {
		t.Errorf("after a repeated endpoint: a:1 %d/%d, want 5/20", a.InFlight(), a.PendingPrefill())
	}
	pl.Expire("p3")
	if a.InFlight() != 0 || a.PendingPrefill() != 0 {
		t.Errorf("after p3 expired: a:1 %d/%d, want 0/0 (no phantom load)", a.InFlight(), a.PendingPrefill())
	}
	// LocalLoads reports only this router's own counts.
	pl.Apply("p1", []EndpointLoad{{"b:1", 4, 0}})
	d := pickOn(t, h, "a:1")
	got := LocalLoads(h.s.Pool(), nil)
	d.Done(scheduler.Outcome{})
	if len(got) != 1 || got[0] != (EndpointLoad{"a:1", 1, 0}) {
		t.Errorf("LocalLoads %v, want [{a:1 1 0}] (b:1's 4 are the peer's)", got)
	}
}

func pickOn(t *testing.T, h *harness, addr string) *scheduler.Decision {
	t.Helper()
	d, err := h.s.Pick(t.Context(), &scheduler.Request{Subset: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPickWithPickLogAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race (sync.Pool drops items at random under it)")
	}
	s, p := benchScheduler(t, benchEndpoints(64, 1))
	reqs := benchWorkload(8<<10, 16, 8, 256, 1)
	warm(t, s, reqs)
	log, err := NewPickLog(1024, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	p.SetPickLog(log)
	// Size the drain buffer once, as the sync layer's reused buffer is.
	for i := range 512 {
		pickDone(t, s, &reqs[i%len(reqs)])
	}
	buf := log.Drain(nil)
	i := 0
	allocs := testing.AllocsPerRun(500, func() {
		pickDone(t, s, &reqs[i%len(reqs)])
		if i++; i%256 == 0 {
			buf = log.Drain(buf)
		}
	})
	if allocs != 0 {
		t.Errorf("Pick+Done with a pick log allocates %v times per request, want 0", allocs)
	}
	if log.Dropped() != 0 {
		t.Errorf("%d picks dropped", log.Dropped())
	}
}

// TestSyncedPrefix: the synced index is the prefix scorer with the largest
// profile weight, the first of those on a tie; other scorers never count.
func TestSyncedPrefix(t *testing.T) {
	tests := []struct {
		name    string
		weights []float64 // < 0: an inflight scorer of weight −w
		want    int
	}{
		{"none", []float64{-1}, -1},
		{"one", []float64{-1, 0}, 1},
		{"heaviest", []float64{0, 32, 0}, 1},
		{"first of a tie", []float64{2, 32, 32}, 1},
		{"other scorers ignored", []float64{-64, 1, 4}, 2},
	}
	for _, tt := range tests {
		var entries []scheduler.ScorerEntry
		for _, w := range tt.weights {
			if w < 0 {
				entries = append(entries, scheduler.ScorerEntry{Name: "inflight", Scorer: &InFlight{}, Weight: -w})
				continue
			}
			p, err := NewPrefix("prefix", DefaultPrefixConfig(), Deps{})
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, scheduler.ScorerEntry{Name: "prefix", Scorer: p, Weight: w})
		}
		p, at := SyncedPrefix(entries)
		if at != tt.want || (at >= 0 && p != entries[at].Scorer) || (at < 0 && p != nil) {
			t.Errorf("%s: SyncedPrefix at %d, want %d", tt.name, at, tt.want)
		}
	}
}
