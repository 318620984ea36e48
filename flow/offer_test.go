package flow

import (
	"context"
	"errors"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
)

// offered records what Offer's notify received.
type offered struct{ got []picked }

func (o *offered) notify(d *scheduler.Decision, l Lease, err error) {
	o.got = append(o.got, picked{d, l, err})
}

// Offer dispatches at once while there is room, queues without blocking
// when there is none, and notifies once Drain finds room; Cancel takes a
// queued request out, and reports false once the request was decided.
func TestOfferQueuesWithoutBlocking(t *testing.T) {
	r := newRig(t, testConfig(), ep("a"))
	var o offered
	bg := context.Background()
	var held []picked
	for range 2 { // a's ledger: 2 × (100/4 + 75) = 200 ≥ 0.8 × 250: saturated
		tk, d, l, err := r.c.Offer(bg, req(), Class{Band: 1}, 0, o.notify)
		if tk != nil || err != nil || d == nil {
			t.Fatalf("offer with room: ticket %v, err %v, decision %v; want a decision", tk, err, d)
		}
		held = append(held, picked{d, l, nil})
	}
	first, d, _, err := r.c.Offer(bg, req(), Class{Band: 1, Tenant: "x"}, 0, o.notify)
	if first == nil || d != nil || err != nil {
		t.Fatalf("offer to a saturated pool: ticket %v, decision %v, err %v; want a ticket", first, d, err)
	}
	second, _, _, _ := r.c.Offer(bg, req(), Class{Band: 1, Tenant: "y"}, 0, o.notify)
	if second == nil || r.c.Len() != 2 {
		t.Fatalf("queue holds %d, want 2", r.c.Len())
	}
	r.c.Drain()
	if len(o.got) != 0 {
		t.Fatalf("Drain with a still saturated: %d notified, want 0", len(o.got))
	}
	finish(held[0]) // a's ledger 100 < 200: room for one
	r.c.Drain()
	if len(o.got) != 1 || o.got[0].err != nil || o.got[0].d.Endpoint.Address != "a" {
		t.Fatalf("after one release: notified %+v, want one dispatch to a", o.got)
	}
	if first.Cancel() {
		t.Fatal("Cancel of the dispatched request reported true")
	}
	if !second.Cancel() || r.c.Len() != 0 {
		t.Fatalf("Cancel of the queued request: queue holds %d, want 0", r.c.Len())
	}
	r.c.Drain()
	if len(o.got) != 1 {
		t.Fatalf("a cancelled request was notified: %+v", o.got)
	}
	finish(o.got[0])
	finish(held[1])
	if r.c.Load("a") != 0 {
		t.Fatalf("ledger after all finished: %d, want 0", r.c.Load("a"))
	}
}

// A queued request whose TTL runs out is notified with ErrExpired.
func TestOfferExpires(t *testing.T) {
	cfg := testConfig()
	r := newRig(t, cfg, ep("a"))
	var o offered
	bg := context.Background()
	for range 2 {
		if _, _, _, err := r.c.Offer(bg, req(), Class{Band: 1}, 0, o.notify); err != nil {
			t.Fatal(err)
		}
	}
	tk, _, _, _ := r.c.Offer(bg, req(), Class{Band: 1, TTL: cfg.Poll}, 0, o.notify)
	if tk == nil {
		t.Fatal("not queued")
	}
	r.clk.Step(cfg.Poll)
	r.c.Drain()
	if len(o.got) != 1 || !errors.Is(o.got[0].err, ErrExpired) {
		t.Fatalf("after its TTL: notified %+v, want ErrExpired", o.got)
	}
}
