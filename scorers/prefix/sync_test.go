package prefix

import (
	"slices"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
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
	pool := scorertest.Eps("a:1", "b:1", "c:1")
	a := scorertest.NewHarness(t, mustPrefix(t, smallPrefix()), pool)
	b := scorertest.NewHarness(t, mustPrefix(t, smallPrefix()), pool)
	log, err := NewPickLog(16, 1024)
	if err != nil {
		t.Fatal(err)
	}
	scorerOf(t, a).SetPickLog(log)

	route(t, a, scheduler.Request{Model: "m", Prompt: prompt("ABCD")}, "b:1")
	route(t, a, scheduler.Request{Model: "m", Prompt: prompt("XY")}, "c:1")
	chains := log.Drain(nil)
	if len(chains) != 2 || chains[0].Endpoint != "b:1" || len(chains[0].Hashes) != 4 || len(chains[1].Hashes) != 2 {
		t.Fatalf("log holds %+v, want b:1 with 4 hashes then c:1 with 2", chains)
	}
	for _, c := range chains {
		if !scorerOf(t, b).RecordPeer(c.Endpoint, c.Hashes) {
			t.Fatalf("RecordPeer(%s) refused", c.Endpoint)
		}
	}
	if scorerOf(t, b).RecordPeer("z:9", chains[0].Hashes) {
		t.Error("RecordPeer accepted an endpoint outside the pool")
	}
	// B never routed anything, yet: "ABEF" shares 2 of 4 blocks with b:1's
	// "ABCD" (0.5); "XYZ" 2 of 3 with c:1's "XY" (0.667).
	scores, _ := b.Pick(t, &scheduler.Request{Model: "m", Prompt: prompt("ABEF"), Subset: []string{"a:1", "b:1", "c:1"}})
	if want := []float64{0, 0.5, 0}; !slices.Equal(scores, want) {
		t.Errorf("B's scores for ABEF %v, want %v", scores, want)
	}
	scores, _ = b.Pick(t, &scheduler.Request{Model: "m", Prompt: prompt("XYZ")})
	if scores[2] < 0.66 || scores[2] > 0.67 || scores[0] != 0 || scores[1] != 0 {
		t.Errorf("B's scores for XYZ %v, want [0 0 0.667]", scores)
	}
	// B's own picks are not in A's log (each replica logs its own).
	if n := log.Len(); n != 0 {
		t.Errorf("A's log holds %d picks after B's, want 0", n)
	}
	checkIndex(t, scorerOf(t, b))
}

// TestPrefixExportRestore: a joining replica restored from a peer's export
// scores every prompt as the peer does, and keeps each endpoint's LRU
// order (the least recent entries are evicted first on both).
func TestPrefixExportRestore(t *testing.T) {
	cfg := smallPrefix()
	cfg.Shards, cfg.Capacity = 2, 8 // 4 blocks per shard per endpoint: evictions happen
	pool := scorertest.Eps("a:1", "b:1", "c:1")
	src := scorertest.NewHarness(t, mustPrefix(t, cfg), pool)
	prompts := []string{"ABCDEFGH", "ABCDXYZ", "QRST", "QRSU", "MNOP", "ABCDEFGQ", "KLMN", "JJKK"}
	for i, p := range prompts {
		route(t, src, scheduler.Request{Model: "m", Prompt: prompt(p)}, pool[i%3].Address)
	}
	dst := scorertest.NewHarness(t, mustPrefix(t, cfg), pool)
	exported := 0
	scorerOf(t, src).Export(func(addr string, hashes []uint64) {
		exported += len(hashes)
		if !scorerOf(t, dst).Restore(addr, hashes) {
			t.Fatalf("Restore(%s) refused", addr)
		}
	})
	if exported == 0 {
		t.Fatal("export produced nothing")
	}
	if got, want := scorerOf(t, dst).Stats().Blocks, scorerOf(t, src).Stats().Blocks; got != want {
		t.Errorf("restored index holds %d blocks, the source %d", got, want)
	}
	checkIndex(t, scorerOf(t, dst))
	for _, p := range append(prompts, "ABCE", "QRSTUV", "ZZZZ") {
		req := scheduler.Request{Model: "m", Prompt: prompt(p)}
		want := scoresOf(t, src, req)
		if got := scoresOf(t, dst, req); !slices.Equal(got, want) {
			t.Errorf("%s: restored scores %v, source %v", p, got, want)
		}
	}
	// The same order: a new 4-block prompt on a:1 evicts the same (least
	// recent) entries on both.
	for _, h := range []*scorertest.Harness{src, dst} {
		route(t, h, scheduler.Request{Model: "m", Prompt: prompt("abcd")}, "a:1")
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
func scoresOf(t *testing.T, h *scorertest.Harness, req scheduler.Request) []float64 {
	t.Helper()
	cs := h.CycleState(t)
	eps := h.S.Pool().Pointers()
	out := make([]float64, len(eps))
	scorerOf(t, h).Score(cs, &req, eps, out)
	return out
}
