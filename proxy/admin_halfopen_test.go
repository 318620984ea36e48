package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/scheduler"
)

// TestAdminEndpointsHalfOpen: /debug/endpoints says when an ejected
// endpoint is half-open (its server answered a scrape again after the
// ejection), and stops saying it once a trial readmits it.
func TestAdminEndpointsHalfOpen(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{{Name: "test", Type: "test", Scorer: &testScorer{}, Weight: 1}},
		nil, scheduler.MaxScore{}, scheduler.Deps{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	pool := func(recovered time.Time) []scheduler.Endpoint {
		return []scheduler.Endpoint{{Address: "a:1", RecoveredAt: recovered}, {Address: "b:1"}}
	}
	s.SetEndpoints(pool(time.Time{}))
	request := func(addr string, o scheduler.Outcome) {
		t.Helper()
		d, err := s.Pick(context.Background(), &scheduler.Request{Subset: []string{addr}, Arrival: clk.Now()})
		if err != nil {
			t.Fatal(err)
		}
		d.Done(o)
	}
	for range 5 { // outlier.consecutive_failures
		request("a:1", scheduler.Outcome{Kind: scheduler.OutcomeError, Status: 500})
	}
	a, err := NewAdmin(DefaultConfig(), Deps{View: s, Recorder: NewRecorder(8, 1), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	view := func() EndpointView {
		t.Helper()
		w := httptest.NewRecorder()
		a.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/debug/endpoints", nil))
		var v struct{ Endpoints []EndpointView }
		if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
			t.Fatalf("%v: %s", err, w.Body.String())
		}
		for _, e := range v.Endpoints {
			if e.Address == "a:1" {
				return e
			}
		}
		t.Fatalf("no a:1 in %s", w.Body.String())
		return EndpointView{}
	}
	if e := view(); !e.Ejected || e.HalfOpen {
		t.Fatalf("after 5 failures: ejected %v half-open %v, want ejected, not half-open", e.Ejected, e.HalfOpen)
	}
	clk.Step(2 * time.Second)
	s.SetEndpoints(pool(t0.Add(time.Second)))
	if e := view(); !e.Ejected || !e.HalfOpen {
		t.Fatalf("after a recovery: ejected %v half-open %v, want both", e.Ejected, e.HalfOpen)
	}
	request("a:1", scheduler.Outcome{Kind: scheduler.OutcomeSuccess, Status: 200})
	if e := view(); e.Ejected || e.HalfOpen {
		t.Errorf("after a successful trial: ejected %v half-open %v, want neither", e.Ejected, e.HalfOpen)
	}
}
