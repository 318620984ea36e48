package scorertest

import (
	"context"
	"testing"

	"github.com/go-viper/mapstructure/v2"

	"github.com/trimtab/trimtab/scheduler"
)

// Harness drives one scorer through a real scheduler: scheduler.CycleState
// can only be made by the scheduler, and going through Pick exercises
// Score, Picked, Done and PoolChanged exactly as production does.
type Harness struct {
	S    *scheduler.Scheduler
	Sc   scheduler.Scorer
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

// NewHarness returns a harness whose scheduler runs sc (weight 1) over the
// pool eps.
func NewHarness(tb testing.TB, sc scheduler.Scorer, eps []scheduler.Endpoint) *Harness {
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
	return &Harness{S: s, Sc: sc, grab: g}
}

// Pick runs one decision and returns the scorer's score per candidate (in
// pool order: the harness has no filters) and the chosen address.
func (h *Harness) Pick(tb testing.TB, req *scheduler.Request) ([]float64, string) {
	tb.Helper()
	d, err := h.S.Pick(context.Background(), req)
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

// PickDone runs one decision and finishes it.
func (h *Harness) PickDone(tb testing.TB, req *scheduler.Request) {
	tb.Helper()
	d, err := h.S.Pick(context.Background(), req)
	if err != nil {
		tb.Fatal(err)
	}
	d.Done(scheduler.Outcome{})
}

// CycleState returns a CycleState whose current slot is the scorer's, from
// a decision that is never finished (so never recycled). After Pick the
// scheduler leaves the state on its last PickObserver, the scorer under
// test, which is why this only works for scorers implementing Picked.
func (h *Harness) CycleState(tb testing.TB) *scheduler.CycleState {
	tb.Helper()
	if _, ok := h.Sc.(scheduler.PickObserver); !ok {
		tb.Fatal("cycleState needs a PickObserver scorer")
	}
	if _, err := h.S.Pick(context.Background(), &scheduler.Request{Model: "m"}); err != nil {
		tb.Fatal(err)
	}
	return h.grab.cs
}

// Decoder returns a decode function like the one cmd builds from YAML:
// mapstructure with unknown keys rejected and durations from strings.
func Decoder(params map[string]any) func(any) error {
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

// Eps builds endpoints from addresses, all fresh and serving "m".
func Eps(addrs ...string) []scheduler.Endpoint {
	out := make([]scheduler.Endpoint, len(addrs))
	for i, a := range addrs {
		out[i] = scheduler.Endpoint{Address: a, Models: []string{"m"}}
	}
	return out
}
