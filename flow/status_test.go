package flow

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// /debug/flow shows what the metrics count. One endpoint full at two
// requests (testConfig: 2 × 100 tokens ≥ 0.8 × 250), max_queue 1:
//
//	x, standard: dispatched, dispatched       standard dispatched 2, wait count 2 (0 s each)
//	y, standard: queued                       standard queued 1
//	z, interactive: queue full                interactive drops {queue-full: 1}
//	x's first ends 3 s later, drain: y goes   standard dispatched 3, wait count 3, wait sum 0+0+3 = 3 s
func TestStatusIsTheMetrics(t *testing.T) {
	cfg := testConfig()
	cfg.MaxQueue = 1
	r := newRig(t, cfg, ep("a"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var held []picked
	for range 2 {
		d, l, err := r.c.Pick(ctx, req(), Class{Band: 1, Tenant: "x"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, picked{d, l, nil})
	}
	ch := r.pickAsync(ctx, req(), Class{Band: 1, Tenant: "y"})
	r.waitQueued(t, 1)
	if _, _, err := r.c.Pick(ctx, req(), Class{Band: 0, Tenant: "z"}, 0); err != ErrQueueFull {
		t.Fatalf("interactive with the queue full: %v, want %v", err, ErrQueueFull)
	}

	srv := httptest.NewServer(r.c.Handler())
	defer srv.Close()
	get := func() Status {
		t.Helper()
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := get()
	if !st.Enabled || st.Queued != 1 || st.MaxQueue != 1 || len(st.Bands) != 3 {
		t.Fatalf("status %+v: want enabled, 1 of 1 queued, 3 bands", st)
	}
	std, inter := st.Bands[1], st.Bands[0]
	if std.Name != BandStandard || std.Queued != 1 || std.Dispatched != 2 || std.WaitCount != 2 || std.WaitSeconds != 0 {
		t.Errorf("standard %+v: want 1 queued, 2 dispatched, 2 waits of 0 s", std)
	}
	if len(std.Tenants) != 2 || std.Tenants[0] != (TenantStatus{Name: "x", Dispatched: 2}) || std.Tenants[1] != (TenantStatus{Name: "y", Queued: 1}) {
		t.Errorf("standard tenants %+v: want x (2 dispatched), y (1 queued)", std.Tenants)
	}
	if inter.Drops[ReasonQueueFull] != 1 || len(inter.Tenants) != 1 || inter.Tenants[0].Dropped != 1 {
		t.Errorf("interactive %+v: want one queue-full drop, by z", inter)
	}
	// The same numbers as the registry's.
	for _, m := range []struct {
		name string
		got  float64
		want float64
	}{
		{"dispatches{standard,x}", float64(std.Tenants[0].Dispatched), testutil.ToFloat64(r.c.m.dispatchN.WithLabelValues(BandStandard, "x"))},
		{"depth{standard,y}", float64(std.Tenants[1].Queued), testutil.ToFloat64(r.c.m.depth.WithLabelValues(BandStandard, "y"))},
		{"drops{interactive,z,queue-full}", float64(inter.Drops[ReasonQueueFull]), testutil.ToFloat64(r.c.m.drops.WithLabelValues(BandInteractive, "z", ReasonQueueFull))},
	} {
		if m.got != m.want {
			t.Errorf("%s: status %v, metric %v", m.name, m.got, m.want)
		}
	}

	r.clk.Step(3 * time.Second)
	finish(held[0])
	r.c.Drain()
	p := recv(t, ch)
	if p.err != nil {
		t.Fatal(p.err)
	}
	finish(p)
	finish(held[1])
	std = get().Bands[1]
	if std.Queued != 0 || std.Dispatched != 3 || std.WaitCount != 3 || std.WaitSeconds != 3 {
		t.Errorf("standard after the drain %+v: want 0 queued, 3 dispatched, 3 waits summing 3 s", std)
	}
}

func TestOffHandler(t *testing.T) {
	rec := httptest.NewRecorder()
	OffHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathFlow, nil))
	var st Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Enabled {
		t.Fatalf("off: %q (%v), want enabled false", rec.Body.String(), err)
	}
}
