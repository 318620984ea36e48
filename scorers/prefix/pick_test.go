package prefix_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// The prefix scorer among the other in-tree scorers: the whole profile's
// allocation checks, concurrency, and which index replica sync shares.

func TestPickAllocatesNothing(t *testing.T) {
	if scorertest.RaceEnabled {
		t.Skip("allocation counts need a build without -race (sync.Pool drops items at random under it)")
	}
	s, _ := benchScheduler(t, scorertest.BenchEndpoints(64, 1))
	reqs := scorertest.BenchWorkload(8<<10, 16, 8, 256, 1)
	scorertest.Warm(t, s, reqs)
	i := 0
	allocs := testing.AllocsPerRun(500, func() {
		scorertest.PickDone(t, s, &reqs[i%len(reqs)])
		i++
	})
	if allocs != 0 {
		t.Errorf("Pick+Done with all six scorers allocates %v times per request, want 0", allocs)
	}
}

func TestPickWithPickLogAllocatesNothing(t *testing.T) {
	if scorertest.RaceEnabled {
		t.Skip("allocation counts need a build without -race (sync.Pool drops items at random under it)")
	}
	s, p := benchScheduler(t, scorertest.BenchEndpoints(64, 1))
	reqs := scorertest.BenchWorkload(8<<10, 16, 8, 256, 1)
	scorertest.Warm(t, s, reqs)
	log, err := prefix.NewPickLog(1024, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	p.SetPickLog(log)
	// Size the drain buffer once, as the sync layer's reused buffer is.
	for i := range 512 {
		scorertest.PickDone(t, s, &reqs[i%len(reqs)])
	}
	buf := log.Drain(nil)
	i := 0
	allocs := testing.AllocsPerRun(500, func() {
		scorertest.PickDone(t, s, &reqs[i%len(reqs)])
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

// TestPrefixConcurrent races picks (scoring and recording), pool changes,
// metric scrapes and the fill law's read of the index (Fill), and with
// learn: join_new the join gate's lock-free read of the index's fill and
// the joins in progress (join_spread_fill, under the scheduler's join
// bound); run it with -race.
func TestPrefixConcurrent(t *testing.T) {
	t.Run(prefix.LearnFirstByte, func(t *testing.T) { prefixConcurrent(t, prefix.LearnFirstByte) })
	t.Run(prefix.LearnJoinNew, func(t *testing.T) { prefixConcurrent(t, prefix.LearnJoinNew) })
}

func prefixConcurrent(t *testing.T, learn string) {
	reg := prometheus.NewRegistry()
	cfg := prefix.SmallConfig()
	cfg.Capacity = 256
	sc := scheduler.DefaultConfig()
	if cfg.Learn = learn; learn == prefix.LearnJoinNew {
		cfg.JoinCacheFill, cfg.JoinSpreadFill = 0.01, 1
		sc.Guard = scheduler.GuardConfig{Factor: 2.5, Slack: 6, PrefillTokensPerSecond: 1000, JoinFactor: 1.5}
	}
	p, err := prefix.New("prefix", cfg, prefix.Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := scorers.NewSession("session", scorers.DefaultSessionConfig(), scorers.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(sc, []scheduler.ScorerEntry{
		{Name: "prefix", Scorer: p, Weight: 3},
		{Name: "session", Scorer: sess, Weight: 1},
	}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	pools := [][]scheduler.Endpoint{
		scorertest.Eps("a:1", "b:1", "c:1", "d:1"),
		scorertest.Eps("a:1", "c:1", "e:1"),
		scorertest.Eps("b:1", "d:1", "e:1", "f:1", "g:1"),
	}
	s.SetEndpoints(pools[0])
	var pickers, changer sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		pickers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 400 {
				// Block 0 from 26 letters: many new prefixes, so the join
				// gate reads the index's fill often.
				pr := prefix.Prompt(string(rune('A'+rng.IntN(26))) + strings.Repeat(string(rune('A'+rng.IntN(4))), rng.IntN(8)))
				req := &scheduler.Request{Prompt: pr, SessionID: fmt.Sprint("s", rng.IntN(50))}
				d, err := s.Pick(t.Context(), req)
				if err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					d.Advance()
				}
				if i%2 == 0 {
					d.FirstByte()
				}
				d.Done(scheduler.Outcome{})
			}
		})
	}
	changer.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s.SetEndpoints(pools[i%len(pools)])
			_ = p.Stats()
			if f, ok := p.Fill(s.Pool().Pointers()); ok && !(f >= 0 && f <= 1) {
				t.Errorf("Fill %v, want a share in [0,1]", f)
			}
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
			}
		}
	})
	pickers.Wait()
	close(stop)
	changer.Wait()
	prefix.CheckIndex(t, p)
	if st := p.Stats(); st.Blocks > st.Capacity {
		t.Errorf("%d blocks over capacity %d", st.Blocks, st.Capacity)
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
				entries = append(entries, scheduler.ScorerEntry{Name: "inflight", Scorer: &scorers.InFlight{}, Weight: -w})
				continue
			}
			p, err := prefix.New("prefix", prefix.DefaultConfig(), prefix.Deps{})
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, scheduler.ScorerEntry{Name: "prefix", Scorer: p, Weight: w})
		}
		p, at := prefix.Synced(entries)
		if at != tt.want || (at >= 0 && p != entries[at].Scorer) || (at < 0 && p != nil) {
			t.Errorf("%s: Synced at %d, want %d", tt.name, at, tt.want)
		}
	}
}
