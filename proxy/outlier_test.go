package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/scheduler"
)

// TestHTTPOutlierEjection drives the HTTP proxy against a loopback
// upstream that answers 500 to everything and one that works: after
// outlier.consecutive_failures (5) answers of 500 the failing endpoint is
// ejected, traffic moves to the working one, /debug/endpoints and
// /metrics say so, and once base_ejection (30s) has passed on the fake
// clock the endpoint is tried again.
func TestHTTPOutlierEjection(t *testing.T) {
	bad, good := newUpstream(t), newUpstream(t)
	bad.status = http.StatusInternalServerError
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sc := &testScorer{prefer: preferOrder(bad.addr, good.addr), done: make(chan scheduler.Outcome, 64)}
	reg := prometheus.NewRegistry()
	s, err := scheduler.New(scheduler.DefaultConfig(),
		[]scheduler.ScorerEntry{{Name: "test", Type: "test", Scorer: sc, Weight: 1}},
		[]scheduler.Filter{scheduler.ModelFilter{}, scheduler.HealthyFilter{}}, scheduler.MaxScore{},
		scheduler.Deps{Registerer: reg, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	setPool(s, bad.addr, good.addr)
	f := &fixture{sched: s, scorer: sc, reg: reg, rec: NewRecorder(64, 0)}
	deps := f.deps(t)
	deps.Clock = clk
	h, err := NewHTTP(DefaultConfig(), deps)
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, _ := start(t, h)
	adeps := f.deps(t)
	adeps.Clock = clk
	a, err := NewAdmin(DefaultConfig(), adeps)
	if err != nil {
		t.Fatal(err)
	}
	adminAddr, _ := start(t, a)

	send := func() (int, string) {
		t.Helper()
		resp := post(t, "http://"+proxyAddr+"/v1/completions", `{"model":"m","prompt":"x"}`, nil)
		readAll(t, resp.Body)
		resp.Body.Close()
		f.outcome(t) // Done has run: the outcome is counted
		return resp.StatusCode, resp.Header.Get(HeaderEndpoint)
	}
	for i := 1; i <= 5; i++ {
		if code, from := send(); code != 500 || from != bad.addr {
			t.Fatalf("request %d: %d from %s, want 500 from the failing %s", i, code, from, bad.addr)
		}
	}
	for i := 0; i < 3; i++ {
		if code, from := send(); code != 200 || from != good.addr {
			t.Fatalf("after 5 failures: %d from %s, want 200 from %s", code, from, good.addr)
		}
	}

	var view struct {
		Endpoints []EndpointView `json:"endpoints"`
	}
	resp, err := http.Get("http://" + adminAddr + "/debug/endpoints")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(resp.Body).Decode(&view); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	until := clk.Now().Add(30 * time.Second)
	for _, e := range view.Endpoints {
		switch e.Address {
		case bad.addr:
			if !e.Ejected || e.EjectedUntil == nil || !e.EjectedUntil.Equal(until) || e.Ejections != 1 {
				t.Errorf("/debug/endpoints for the failing endpoint: %+v, want ejected until %v, 1 ejection", e, until)
			}
		case good.addr:
			if e.Ejected || e.EjectedUntil != nil || e.Ejections != 0 {
				t.Errorf("/debug/endpoints for the working endpoint: %+v, want in service", e)
			}
		}
	}
	want := `
# HELP trimtab_scheduler_endpoint_ejected 1 while an endpoint is ejected (left out of picks after consecutive failures), else 0.
# TYPE trimtab_scheduler_endpoint_ejected gauge
trimtab_scheduler_endpoint_ejected{endpoint="BAD"} 1
trimtab_scheduler_endpoint_ejected{endpoint="GOOD"} 0
# HELP trimtab_scheduler_ejections_total Outlier ejections of an endpoint after consecutive failures, since this router first saw it.
# TYPE trimtab_scheduler_ejections_total counter
trimtab_scheduler_ejections_total{endpoint="BAD"} 1
trimtab_scheduler_ejections_total{endpoint="GOOD"} 0
`
	want = strings.NewReplacer("BAD", bad.addr, "GOOD", good.addr).Replace(want)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "trimtab_scheduler_endpoint_ejected", "trimtab_scheduler_ejections_total"); err != nil {
		t.Error(err)
	}

	clk.Step(30 * time.Second)
	if code, from := send(); code != 500 || from != bad.addr {
		t.Errorf("after base_ejection: %d from %s, want the endpoint tried again (500 from %s)", code, from, bad.addr)
	}
	if n := bad.hits.Load(); n != 6 {
		t.Errorf("the failing upstream got %d requests, want 5 + 1 after the ejection", n)
	}
	f.waitIdle(t)
}
