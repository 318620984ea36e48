package prefix

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

// joinBoundScheduler is a real scheduler over pods a:1, b:1 and c:1 with
// the prefix scorer (learn: join_new, the join always made, spread below
// fill spreadFill) at weight 1, a load guard that never fires and the
// join bound at factor join (0: off), prefill 1,000 tokens/s.
func joinBoundScheduler(t *testing.T, join, spreadFill float64, capacity int) (*scheduler.Scheduler, *prometheus.Registry) {
	t.Helper()
	cfg := smallPrefix()
	cfg.Learn, cfg.JoinSpreadFill = LearnJoinNew, spreadFill
	if capacity > 0 {
		cfg.Capacity, cfg.Shards = capacity, 1
	}
	sc := scheduler.DefaultConfig()
	sc.Guard = scheduler.GuardConfig{Factor: 2, Slack: 100, PrefillTokensPerSecond: 1000, JoinFactor: join}
	reg := prometheus.NewRegistry()
	s, err := scheduler.New(sc, []scheduler.ScorerEntry{{Name: "prefix", Type: Type, Scorer: mustPrefix(t, cfg), Weight: 1}},
		nil, scheduler.MaxScore{}, scheduler.Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(scorertest.Eps("a:1", "b:1", "c:1"))
	return s, reg
}

func pickAt(t *testing.T, s *scheduler.Scheduler, blocks string, at time.Time, subset ...string) *scheduler.Decision {
	t.Helper()
	d, err := s.Pick(context.Background(), &scheduler.Request{Prompt: prompt(blocks), Arrival: at, Subset: subset})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func joinSpreadPicks(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "trimtab_scheduler_join_spread_picks_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no trimtab_scheduler_join_spread_picks_total")
	return 0
}

// TestJoinBound: a request that would join a prefix still in its first
// prefill ranks elsewhere when it would wait more than join_factor × the
// shortest wait, while the caches have room for another copy. A 32-token
// prompt (WXYZ…) is queued on a:1, then a new 16-token prompt ABCD is
// picked onto a:1 and recorded there at the pick. A second ABCD expects
// (32 + 16) ÷ 1,000 = 48 ms on a:1, where it holds the whole prompt, and
// 16 ms on b:1 and c:1, which must compute it: over 1.5 × 16 ms, so it is
// spread — unless the bound is off, the caches are full (fill ≥
// join_spread_fill), ABCD has answered on a:1 (a computed prefix is
// never spread by this bound), or its entry is past the TTL.
func TestJoinBound(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name        string
		join, fill  float64
		capacity    int    // blocks per endpoint (0: the default)
		held        string // prompt recorded on every pod first
		answered    bool   // ABCD's first byte came before the second
		after       time.Duration
		wantSpread  bool
		wantJoining bool
	}{
		{name: "spread", join: 1.5, fill: 0.8, wantSpread: true, wantJoining: true},
		{name: "bound off", join: 0, fill: 0.8},
		{name: "not reported", join: 1.5, fill: 0},
		// Each pod's 10-block cache holds EFGHIJKL (8 blocks) and a:1
		// also WXYZWXYZ and ABCD, evicting: fill (10 + 8 + 8) ÷ 30 ≥ 0.8.
		{name: "caches full", join: 1.5, fill: 0.8, capacity: 10, held: "EFGHIJKL"},
		{name: "answered", join: 1.5, fill: 0.8, answered: true},
		{name: "past the TTL", join: 1.5, fill: 0.8, after: pendingJoinTTL + time.Second},
		{name: "within the TTL", join: 1.5, fill: 0.8, after: pendingJoinTTL - time.Second, wantSpread: true, wantJoining: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, reg := joinBoundScheduler(t, tc.join, tc.fill, tc.capacity)
			if tc.held != "" {
				for _, addr := range []string{"a:1", "b:1", "c:1"} {
					d := pickAt(t, s, tc.held, t0, addr)
					d.FirstByte()
					d.Done(scheduler.Outcome{})
				}
			}
			long := pickAt(t, s, "WXYZWXYZ", t0, "a:1")
			first := pickAt(t, s, "ABCD", t0, "a:1")
			if tc.answered {
				first.FirstByte()
			}
			second := pickAt(t, s, "ABCD", t0.Add(tc.after))
			x := second.Explain()
			spread := second.Endpoint.Address != "a:1"
			if spread != tc.wantSpread {
				t.Errorf("the second ABCD went to %s; want spread off a:1: %v", second.Endpoint.Address, tc.wantSpread)
			}
			a := x.Candidates[0]
			if a.Address != "a:1" {
				t.Fatalf("first candidate %s, want a:1", a.Address)
			}
			if a.OverWait != tc.wantJoining || a.Joining != tc.wantJoining {
				t.Errorf("a:1 explained over the wait bound %v, joining %v; want both %v", a.OverWait, a.Joining, tc.wantJoining)
			}
			if tc.join > 0 {
				want := 0.048
				if tc.answered {
					want = 0.032 // ABCD's own tokens left a:1's queue at its first byte
				}
				if a.GuardWaitSeconds == nil || math.Abs(*a.GuardWaitSeconds-want) > 1e-9 {
					t.Errorf("a:1's wait %v, want %v s", a.GuardWaitSeconds, want)
				}
			}
			wantPicks := 0.0
			if tc.wantSpread {
				wantPicks = 1
			}
			if got := joinSpreadPicks(t, reg); got != wantPicks {
				t.Errorf("%v join-spread picks, want %v", got, wantPicks)
			}
			for _, d := range []*scheduler.Decision{second, first, long} {
				d.Done(scheduler.Outcome{})
			}
		})
	}
}

// TestPendingJoins: the set of joins in progress is bounded by count and
// by age, forgets only the endpoint that answered, and drops the entries
// of endpoints that left the pool.
func TestPendingJoins(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var q pendingJoins
	if _, ok := q.computing(1, t0); ok {
		t.Fatal("the empty set reports a join")
	}
	for i := range maxPendingJoins + 10 {
		q.add(uint64(i), 7, t0)
	}
	if n := len(q.byHash); n != maxPendingJoins || q.n.Load() != maxPendingJoins {
		t.Fatalf("%d entries (count %d) after %d adds, want the bound %d", n, q.n.Load(), maxPendingJoins+10, maxPendingJoins)
	}
	if _, ok := q.computing(9, t0); ok {
		t.Error("one of the ten oldest entries is still tracked past the bound")
	}
	if id, ok := q.computing(10, t0); !ok || id != 7 {
		t.Errorf("entry 10: %v %v, want endpoint 7", id, ok)
	}
	if _, ok := q.computing(10, t0.Add(pendingJoinTTL+time.Nanosecond)); ok {
		t.Error("an entry past the TTL reports a join")
	}
	// A new entry past the TTL of every other clears them all.
	q.add(1<<40, 8, t0.Add(pendingJoinTTL+time.Second))
	if n := len(q.byHash); n != 1 || q.n.Load() != 1 {
		t.Errorf("%d entries after an add past everyone's TTL, want 1", n)
	}
	q.answered(1<<40, 7)
	if _, ok := q.computing(1<<40, t0); !ok {
		t.Error("another endpoint's first byte removed the entry")
	}
	q.answered(1<<40, 8)
	if _, ok := q.computing(1<<40, t0); ok || q.n.Load() != 0 {
		t.Error("the computing endpoint's first byte left the entry")
	}
	// A hash re-added after it left the ring's order is not dropped by
	// its older slot.
	q.add(5, 1, t0)
	q.answered(5, 1)
	q.add(5, 2, t0.Add(time.Second))
	for i := range maxPendingJoins - 2 {
		q.add(uint64(100+i), 3, t0.Add(time.Second))
	}
	if id, ok := q.computing(5, t0.Add(time.Second)); !ok || id != 2 {
		t.Errorf("re-added entry: %v %v, want endpoint 2", id, ok)
	}
	q.forget([]uint32{2, 9})
	if _, ok := q.computing(5, t0.Add(time.Second)); ok {
		t.Error("forget kept an entry of a forgotten endpoint")
	}
	if _, ok := q.computing(100, t0.Add(time.Second)); !ok {
		t.Error("forget dropped another endpoint's entry")
	}
}
