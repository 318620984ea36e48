package prefix

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
)

// joinBoundScheduler is a real scheduler over pods a:1, b:1 and c:1 with
// the prefix scorer (learn: join_new, the join always made — with kv > 0,
// made by join_kv_util 0.6 on pods scraped at KV use kv —, spread below
// fill spreadFill) at weight 1, a load guard that never fires and the
// join bound at factor join (0: off), prefill 1,000 tokens/s.
func joinBoundScheduler(t *testing.T, join, spreadFill float64, capacity int, kv float64) (*scheduler.Scheduler, *prometheus.Registry) {
	t.Helper()
	cfg := smallPrefix()
	cfg.Learn, cfg.JoinSpreadFill = LearnJoinNew, spreadFill
	eps := scorertest.Eps("a:1", "b:1", "c:1")
	if kv > 0 {
		cfg.JoinKVUtil = 0.6
		for i := range eps {
			eps[i].KVUtil, eps[i].State = kv, scheduler.StateFresh
		}
	}
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
	s.SetEndpoints(eps)
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
// spread — unless the bound is off or its factor is wider (4 × 16 ms),
// the caches are full (fill ≥ join_spread_fill, or scraped KV use ≥
// join_kv_util), ABCD has answered on a:1 (a computed prefix is never
// spread by this bound), or its entry is past the TTL.
func TestJoinBound(t *testing.T) {
	// The bound with no scorer reporting joins is refused, naming the field.
	sc := scheduler.DefaultConfig()
	sc.Guard = scheduler.GuardConfig{Factor: 2, Slack: 100, PrefillTokensPerSecond: 1000, JoinFactor: 1.5}
	cfg := smallPrefix()
	cfg.Learn = LearnJoinNew
	_, err := scheduler.New(sc, []scheduler.ScorerEntry{{Name: "prefix", Type: Type, Scorer: mustPrefix(t, cfg), Weight: 1}},
		nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err == nil || !strings.Contains(err.Error(), "guard.join_factor") {
		t.Errorf("join_factor with join_spread_fill 0: %v, want an error naming guard.join_factor", err)
	}

	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name        string
		join, fill  float64
		capacity    int     // blocks per endpoint (0: the default)
		kv          float64 // scraped KV use, join_kv_util 0.6 (0: no gate)
		held        string  // prompt recorded on every pod first
		answered    bool    // ABCD's first byte came before the second
		after       time.Duration
		wantSpread  bool
		wantJoining bool
	}{
		{name: "spread", join: 1.5, fill: 0.8, wantSpread: true, wantJoining: true},
		// 48 ms is within 4 × 16 ms: a:1 is joining but within the bound.
		{name: "within the factor", join: 4, fill: 0.8, wantJoining: true},
		{name: "bound off", join: 0, fill: 0.8},
		// Each pod's 10-block cache holds EFGHIJKL (8 blocks) and a:1
		// also WXYZWXYZ and ABCD, evicting: fill (10 + 8 + 8) ÷ 30 ≥ 0.8.
		{name: "caches full", join: 1.5, fill: 0.8, capacity: 10, held: "EFGHIJKL"},
		// The scraped KV use opened the join: the caches are full whatever
		// the index's fill reads.
		{name: "KV full", join: 1.5, fill: 0.8, kv: 0.9},
		{name: "answered", join: 1.5, fill: 0.8, answered: true},
		{name: "past the TTL", join: 1.5, fill: 0.8, after: pendingJoinTTL + time.Second},
		{name: "within the TTL", join: 1.5, fill: 0.8, after: pendingJoinTTL - time.Second, wantSpread: true, wantJoining: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, reg := joinBoundScheduler(t, tc.join, tc.fill, tc.capacity, tc.kv)
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
			if a.OverWait != tc.wantSpread || a.Joining != tc.wantJoining {
				t.Errorf("a:1 explained over the wait bound %v, joining %v; want %v, %v", a.OverWait, a.Joining, tc.wantSpread, tc.wantJoining)
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

// TestPendingJoins: the set of joins in progress is bounded per shard
// (adding to a full ring drops the oldest) and by age, reports the newest
// entry of a prefix, forgets only the endpoint that answered, and drops
// the entries of endpoints that left the pool. Small hashes share shard 0.
func TestPendingJoins(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var q pendingJoins
	if _, ok := q.computing(1, t0); ok {
		t.Fatal("the empty set reports a join")
	}
	for i := range pendingPerShard + 10 {
		q.add(uint64(i), 7, t0)
	}
	if n := q.shard(0).live.Load(); n != pendingPerShard {
		t.Fatalf("%d live entries after %d adds to one shard, want the bound %d", n, pendingPerShard+10, pendingPerShard)
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
	if _, ok := q.computing(10, time.Time{}); !ok {
		t.Error("a request with no arrival time does not see the entry")
	}
	// Another shard is untouched by shard 0's ring.
	far := uint64(1) << 63
	q.add(far, 8, t0)
	if id, ok := q.computing(far, t0); !ok || id != 8 || q.shard(far) == q.shard(0) {
		t.Errorf("entry in another shard: %v %v", id, ok)
	}
	q.answered(far, 7)
	if _, ok := q.computing(far, t0); !ok {
		t.Error("another endpoint's first byte removed the entry")
	}
	q.answered(far, 8)
	if _, ok := q.computing(far, t0); ok || q.shard(far).live.Load() != 0 {
		t.Error("the computing endpoint's first byte left the entry")
	}
	// A prefix added again reports its newest endpoint, and a first
	// byte from the older one leaves the newer.
	q.add(20, 2, t0.Add(time.Second))
	if id, _ := q.computing(20, t0.Add(time.Second)); id != 2 {
		t.Errorf("re-added prefix: endpoint %v, want the newest, 2", id)
	}
	q.answered(20, 7)
	if id, ok := q.computing(20, t0.Add(time.Second)); !ok || id != 2 {
		t.Errorf("after the older endpoint answered: %v %v, want endpoint 2", id, ok)
	}
	q.forget([]uint32{2, 9})
	if _, ok := q.computing(20, t0.Add(time.Second)); ok {
		t.Error("forget kept an entry of a forgotten endpoint")
	}
	if _, ok := q.computing(30, t0); !ok {
		t.Error("forget dropped another endpoint's entry")
	}
}

// TestJoinBoundAllocatesNothing: picks that record new prefixes as joins
// in progress, picks that find them joining, and their first bytes
// allocate nothing once warm.
func TestJoinBoundAllocatesNothing(t *testing.T) {
	if scorertest.RaceEnabled {
		t.Skip("allocation counts need a build without -race (sync.Pool drops items at random under it)")
	}
	s, _ := joinBoundScheduler(t, 1.5, 0.8, 0, 0)
	const n = 2000
	reqs := make([]scheduler.Request, 2*n)
	t0 := time.Unix(1_000_000, 0)
	for i := range n {
		p := []byte(fmt.Sprintf("%016d%s", i, strings.Repeat("q", 48)))
		reqs[2*i] = scheduler.Request{Prompt: p, Arrival: t0}
		reqs[2*i+1] = scheduler.Request{Prompt: p, Arrival: t0}
	}
	i := 0
	step := func() {
		first, err := s.Pick(context.Background(), &reqs[2*i])
		if err != nil {
			t.Fatal(err)
		}
		joiner, err := s.Pick(context.Background(), &reqs[2*i+1])
		if err != nil {
			t.Fatal(err)
		}
		first.FirstByte()
		joiner.FirstByte()
		first.Done(scheduler.Outcome{})
		joiner.Done(scheduler.Outcome{})
		i++
	}
	for range 100 {
		step()
	}
	// The path is the one measured: the joiner's match is joining.
	first, _ := s.Pick(context.Background(), &scheduler.Request{Prompt: []byte(strings.Repeat("w", 64)), Arrival: t0})
	joiner, _ := s.Pick(context.Background(), &scheduler.Request{Prompt: []byte(strings.Repeat("w", 64)), Arrival: t0})
	if !slices.ContainsFunc(joiner.Explain().Candidates, func(c scheduler.CandidateScore) bool { return c.Joining }) {
		t.Fatal("no candidate of the joiner is joining")
	}
	first.Done(scheduler.Outcome{})
	joiner.Done(scheduler.Outcome{})
	if allocs := testing.AllocsPerRun(500, step); allocs != 0 {
		t.Errorf("a new prefix and its joiner allocate %v times per pair, want 0", allocs)
	}
}
