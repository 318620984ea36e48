package scorers

import (
	"context"
	"testing"

	"github.com/go-viper/mapstructure/v2"

	"github.com/trimtab/trimtab/scheduler"
)

// harness drives one scorer through a real scheduler: scheduler.CycleState
// can only be made by the scheduler, and going through Pick exercises
// Score, Picked, Done and PoolChanged exactly as production does.
type harness struct {
	s    *scheduler.Scheduler
	sc   scheduler.Scorer
	grab *csGrabber
}

// csGrabber is a zero-weight scorer that remembers the CycleState it was
// called with, so a benchmark can call a scorer's Score directly.
type csGrabber struct{ cs *scheduler.CycleState }

func (*csGrabber) Category() scheduler.Category { return scheduler.CategoryNone }
func (g *csGrabber) Score(cs *scheduler.CycleState, _ *scheduler.Request, _ []*scheduler.Endpoint, out []float64) {
	g.cs = cs
	clear(out)
}

func newHarness(tb testing.TB, sc scheduler.Scorer, eps []scheduler.Endpoint) *harness {
	tb.Helper()
	g := &csGrabber{}
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{
		{Name: "under-test", Type: "x", Scorer: sc, Weight: 1},
		{Name: "grab", Type: "grab", Scorer: g, Weight: 0},
	}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	s.SetEndpoints(eps)
	return &harness{s: s, sc: sc, grab: g}
}

// pick runs one decision and returns the scorer's score per candidate (in
// pool order: the harness has no filters) and the chosen address.
func (h *harness) pick(tb testing.TB, req *scheduler.Request) ([]float64, string) {
	tb.Helper()
	d, err := h.s.Pick(context.Background(), req)
	if err != nil {
		tb.Fatal(err)
	}
	scores := make([]float64, len(d.Candidates()))
	for i := range scores {
		scores[i] = d.Score(0, i)
	}
	chosen := d.Endpoint.Address
	d.Done(scheduler.Outcome{})
	return scores, chosen
}

func (h *harness) pickDone(tb testing.TB, req *scheduler.Request) {
	d, err := h.s.Pick(context.Background(), req)
	if err != nil {
		tb.Fatal(err)
	}
	d.Done(scheduler.Outcome{})
}

// cycleState returns a CycleState whose current slot is the scorer's, from
// a decision that is never finished (so never recycled). After Pick the
// scheduler leaves the state on its last PickObserver, the scorer under
// test, which is why this only works for scorers implementing Picked.
func (h *harness) cycleState(tb testing.TB) *scheduler.CycleState {
	tb.Helper()
	if _, ok := h.sc.(scheduler.PickObserver); !ok {
		tb.Fatal("cycleState needs a PickObserver scorer")
	}
	if _, err := h.s.Pick(context.Background(), &scheduler.Request{Model: "m"}); err != nil {
		tb.Fatal(err)
	}
	return h.grab.cs
}

func (h *harness) prefix(tb testing.TB) *Prefix {
	p, ok := h.sc.(*Prefix)
	if !ok {
		tb.Fatal("not a prefix scorer")
	}
	return p
}

func mustPrefix(tb testing.TB, cfg PrefixConfig) *Prefix {
	tb.Helper()
	p, err := NewPrefix("prefix", cfg, Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// decoder returns a decode function like the one cmd builds from YAML:
// mapstructure with unknown keys rejected and durations from strings.
func decoder(params map[string]any) func(any) error {
	return func(into any) error {
		d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
			Result:      into,
			ErrorUnused: true,
			DecodeHook:  mapstructure.StringToTimeDurationHookFunc(),
		})
		if err != nil {
			return err
		}
		return d.Decode(params)
	}
}

// eps builds endpoints from addresses, all fresh and serving "m".
func eps(addrs ...string) []scheduler.Endpoint {
	out := make([]scheduler.Endpoint, len(addrs))
	for i, a := range addrs {
		out[i] = scheduler.Endpoint{Address: a, Models: []string{"m"}}
	}
	return out
}
