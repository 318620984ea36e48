package flow

import (
	"context"

	"github.com/trimtab/trimtab/scheduler"
)

// Ticket is a request Offer queued. Its decision comes later, through the
// notify function given to Offer, unless Cancel takes it out first.
type Ticket struct {
	c  *Controller
	it *Item[*waiter]
	cl Class
}

// Offer is Pick for a caller that must not block, such as the simulator
// stepping the controller on virtual time. When req can be dispatched
// now, or is refused at once, Offer returns its decision, lease or error
// and a nil Ticket, and notify is not called. Otherwise req waits in the
// queue and Offer returns its Ticket; notify receives the decision
// (dispatched with its lease, or a *DropError) exactly once, from
// whichever call decides it: Drain (Run's dispatcher) or a later Offer
// that sheds it. notify runs under the controller's lock: it must not
// block or call the controller; it should record the decision for the
// caller to act on after that call returns. ctx is passed to the
// scheduler's Pick; its end does not take the request out of the queue
// (Cancel does).
func (c *Controller) Offer(ctx context.Context, req *scheduler.Request, cl Class, output int, notify func(*scheduler.Decision, Lease, error)) (*Ticket, *scheduler.Decision, Lease, error) {
	w := &waiter{ctx: ctx, req: req, output: output, notify: notify}
	it, r := c.submit(w, &cl)
	if it == nil {
		return nil, r.d, r.lease, r.err
	}
	return &Ticket{c: c, it: it, cl: cl}, nil, Lease{}, nil
}

// Cancel takes t's request out of the queue, as when its client goes
// away (counted as client-gone), and reports true. It reports false when
// the request was already decided: notify has been called.
func (t *Ticket) Cancel() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !t.it.Queued() {
		return false
	}
	c.q.Remove(t.it)
	c.m.queued(t.cl, -1)
	c.m.drop(t.cl, ReasonClientGone)
	return true
}
