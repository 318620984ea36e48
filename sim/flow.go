package sim

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"time"

	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// Flow control in a run. When the policy's profile has flow.enabled, each
// router replica owns a real flow.Controller on the run's virtual clock:
// an arrival goes through Controller.Offer instead of scheduler.Pick; a
// request that must wait holds a Ticket, and its decision comes back
// through notify when the dispatcher (Controller.Drain, which the run
// calls where serve's Run goroutine would: after a request ends, and every
// flow.poll while requests wait) finds it room or drops it. A request's
// lease is released when it ends, as the proxy does after Decision.Done.
// A client timeout while a request waits takes it out of the queue.

// Event indexes of evFlow.
const (
	flowWake = iota // a request ended: run the dispatcher now
	flowPoll        // the dispatcher's poll while requests wait
)

// streamClient0 is the client index arrive takes for stream 0's
// requests; stream k is streamClient0 − k.
const streamClient0 = -2

// flowDecision is a decision the controller delivered through notify.
type flowDecision struct {
	q     *simReq
	gen   uint32
	d     *scheduler.Decision
	lease flow.Lease
	err   error
}

// classRun is one class of the run: its results and, per router, the
// class flow control gives its requests.
type classRun struct {
	spec *scenario.RequestClass
	res  ClassResult
}

// streamRun is one stream's state.
type streamRun struct {
	gen    scenario.Generator
	rng    *rand.Rand
	issued int
	slot   int
	class  int
}

// virtualClock is the run's virtual time as a clock.WithTicker. The
// controller only reads it: the simulator runs the dispatcher itself, so
// nothing waits on a timer or ticker.
type virtualClock struct{ r *runner }

func (c virtualClock) Now() time.Time                  { return Epoch.Add(c.r.now) }
func (c virtualClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (virtualClock) After(time.Duration) <-chan time.Time {
	panic("sim: the virtual clock has no timers")
}
func (virtualClock) NewTimer(time.Duration) clock.Timer {
	panic("sim: the virtual clock has no timers")
}
func (virtualClock) Sleep(time.Duration) { panic("sim: the virtual clock cannot sleep") }
func (virtualClock) Tick(time.Duration) <-chan time.Time {
	panic("sim: the virtual clock has no tickers")
}
func (virtualClock) NewTicker(time.Duration) clock.Ticker {
	panic("sim: the virtual clock has no tickers")
}

// buildFlow returns the flow controller of a router whose scheduler is
// sched when the policy's profile enables flow control, else nil.
func (r *runner) buildFlow(sched *scheduler.Scheduler) (*flow.Controller, error) {
	if r.cfg.Policy.Profile == nil {
		return nil, nil
	}
	if r.flowCfg == nil {
		f, err := r.cfg.Policy.Profile()
		if err != nil {
			return nil, err
		}
		r.flowCfg = &f.Flow
	}
	if !r.flowCfg.Enabled {
		return nil, nil
	}
	r.flowPoll = r.flowCfg.Poll
	return flow.New(*r.flowCfg, flow.Deps{Scheduler: sched, Clock: virtualClock{r}})
}

// setupClasses lists the scenario's classes (the workload's, its phases'
// and the streams', by name) and the streams, and classifies each class
// with every router's flow controller.
func (r *runner) setupClasses() {
	sc := r.sc
	index := func(c *scenario.RequestClass) int {
		name := c.ClassName()
		for i := range r.classes {
			if r.classes[i].res.Name == name {
				return i
			}
		}
		r.classes = append(r.classes, classRun{spec: c, res: ClassResult{Name: name}})
		return len(r.classes) - 1
	}
	named := sc.Workload.Class != nil || len(sc.Streams) > 0
	for i := range sc.Phases {
		if sc.Phases[i].Work().Class != nil {
			named = true
		}
	}
	if !named {
		return
	}
	for i := range sc.Phases {
		r.phaseClass = append(r.phaseClass, index(sc.Phases[i].Work().Class))
	}
	for k := range sc.Streams {
		st := &sc.Streams[k]
		g, err := scenario.NewGenerator(sc, &st.Workload, r.cfg.Seed^uint64(k+1)*0x2545f4914f6cdd1d, "")
		if err != nil {
			panic(err) // kinds validated at parse time
		}
		r.streams = append(r.streams, streamRun{gen: g, rng: rand.New(rand.NewPCG(r.cfg.Seed, 0x5700+uint64(k))), class: index(&st.RequestClass)})
		at := r.at(st.Start)
		if st.Rate > 0 {
			r.h.push(event{at: at, kind: evStream, idx: int32(k), gen: 1})
			continue
		}
		for range st.Concurrency {
			r.h.push(event{at: at, kind: evStream, idx: int32(k)})
		}
	}
	for _, rt := range r.routers {
		if rt.flow == nil {
			continue
		}
		cls := rt.flow.Classifier()
		for i := range r.classes {
			rt.flowClass = append(rt.flowClass, cls.Classify(r.sc.Model, r.classes[i].spec.Header))
		}
	}
}

// classOf returns q's class index (−1: the run has no classes).
func (r *runner) classOf(q *simReq) int {
	if q.stream > 0 {
		return r.streams[q.stream-1].class
	}
	if len(r.phaseClass) == 0 {
		return -1
	}
	return r.phaseClass[q.phase]
}

// streamEvent handles stream k's event: a closed-loop client's next
// request, or an open-loop arrival (open), which schedules the next.
func (r *runner) streamEvent(k int, open bool) {
	st := &r.sc.Streams[k]
	s := &r.streams[k]
	if r.now >= r.end && !st.Job() || st.Requests > 0 && s.issued >= st.Requests {
		return
	}
	s.issued++
	r.arrive(streamClient0 - k)
	if open {
		gap := time.Duration(s.rng.ExpFloat64() / st.Rate * float64(time.Second))
		if at := r.now + gap; at < r.end {
			r.h.push(event{at: at, kind: evStream, idx: int32(k), gen: 1})
		}
	}
}

// streamSpec draws stream k's next request into q and returns the slot
// it is routed by.
func (r *runner) streamSpec(q *simReq, k int) int {
	s := &r.streams[k]
	q.stream, q.client, q.timeout = k+1, -1, r.sc.Streams[k].Timeout
	slot := s.slot
	s.slot = (s.slot + 1) % scenario.OpenChatSlots
	s.gen.Next(s.rng, slot, &q.spec)
	return slot
}

// offer sends q through rt's flow controller.
func (r *runner) offer(rt *router, q *simReq) {
	cl := flow.Class{Band: -1, Tenant: flow.DefaultTenant}
	if i := r.classOf(q); i >= 0 {
		cl = rt.flowClass[i]
	}
	if q.notify == nil {
		q.notify = func(d *scheduler.Decision, l flow.Lease, err error) {
			r.flowReady = append(r.flowReady, flowDecision{q: q, gen: q.gen, d: d, lease: l, err: err})
		}
	}
	r.h.push(event{at: r.now + q.timeout, kind: evTimeout, r: q, gen: q.gen})
	t, d, l, err := rt.flow.Offer(context.Background(), &q.req, cl, 0, q.notify)
	switch {
	case t != nil:
		q.ticket = t
		r.schedulePoll()
	case err != nil:
		q.dropped = errors.As(err, new(*flow.DropError))
		r.fail(q)
	default:
		q.dec, q.lease = d, l
		r.dispatch(q)
	}
	r.flowDecided() // an Offer can shed a queued request
}

// flowDecided acts on the decisions the controllers delivered: dispatch
// the request, or fail it when it was dropped.
func (r *runner) flowDecided() {
	for i := 0; i < len(r.flowReady); i++ {
		fd := r.flowReady[i]
		r.flowReady[i] = flowDecision{}
		q := fd.q
		if !q.live || q.gen != fd.gen {
			fd.lease.Release() // cannot happen: a waiting request leaves the queue before it ends
			continue
		}
		q.ticket = nil
		if fd.err != nil {
			q.dropped = true
			r.fail(q)
			continue
		}
		q.dec, q.lease = fd.d, fd.lease
		r.dispatch(q)
	}
	r.flowReady = r.flowReady[:0]
}

// flowEvent runs every router's dispatcher.
func (r *runner) flowEvent(kind int) {
	if kind == flowWake {
		r.flowWoken = false
	} else {
		r.flowPolling = false
	}
	waiting := false
	for _, rt := range r.routers {
		if rt.flow == nil {
			continue
		}
		rt.flow.Drain()
		r.flowDecided()
		waiting = waiting || rt.flow.Len() > 0
	}
	if waiting {
		r.schedulePoll()
	}
}

func (r *runner) schedulePoll() {
	if !r.flowPolling {
		r.flowPolling = true
		r.h.push(event{at: r.now + r.flowPoll, kind: evFlow, idx: flowPoll})
	}
}

// timeoutQueued ends q, which waited in the router until its client gave
// up.
func (r *runner) timeoutQueued(q *simReq) {
	q.ticket.Cancel()
	q.ticket = nil
	r.res.TimedOut++
	if q.measured {
		r.res.MeasuredTimedOut++
	}
	r.miss(q)
	r.ended(q, endTimedOut)
	r.inflight--
	c := q.client
	r.putReq(q)
	r.next(c)
}

// How a request ended.
const (
	endCompleted = iota
	endFailed
	endTimedOut
)

// ended is called once when q ends, before it is recycled: it releases
// q's lease (waking the dispatcher), records q in its class and lets a
// closed-loop stream client send its next request.
func (r *runner) ended(q *simReq, how int) {
	if q.lease != (flow.Lease{}) {
		q.lease.Release()
		q.lease = flow.Lease{}
		if !r.flowWoken {
			r.flowWoken = true
			r.h.push(event{at: r.now, kind: evFlow, idx: flowWake})
		}
	}
	if i := r.classOf(q); i >= 0 {
		c := &r.classes[i].res
		switch {
		case how == endCompleted:
			c.Completed++
		case how == endTimedOut:
			c.TimedOut++
		case q.dropped:
			c.Dropped++
		default:
			c.Failed++
		}
		if q.measured {
			c.Measured++
			if how == endCompleted {
				c.Complete(q.seq.FirstTokenAt-q.arrival, r.now-q.arrival, q.seq.OutputTokens, r.sc.SLO)
			} else {
				var ttft time.Duration
				if q.seq.Generated > 0 {
					ttft = q.seq.FirstTokenAt - q.arrival
				}
				c.Miss(ttft, q.timeout)
			}
		}
	}
	q.dropped = false
	if q.stream > 0 && r.sc.Streams[q.stream-1].Concurrency > 0 {
		r.h.push(event{at: r.now, kind: evStream, idx: int32(q.stream - 1)})
	}
}

// ClassResult is one class's share of a run.
type ClassResult struct {
	Name string
	// Issued counts the class's requests over the whole run (the warm-up
	// included: a batch job is judged on all of it); Completed, Dropped
	// (refused by flow control: queue full, shed, TTL), TimedOut and
	// Failed (otherwise) split them.
	Issued, Completed, Dropped, TimedOut, Failed int
	// Measured counts the class's requests in the measurement window, and
	// Latencies their latencies, misses included (see Result).
	Measured int
	report.Latencies
	// Goodput is the measured requests within the SLO per second of the
	// window.
	Goodput float64
}

// finishClasses copies the classes into the result.
func (r *runner) finishClasses() {
	for i := range r.classes {
		c := r.classes[i].res
		c.Sort()
		c.Goodput = math.NaN()
		if win := r.end - r.warm; win > 0 {
			c.Goodput = c.Latencies.Goodput(win)
		}
		r.res.Classes = append(r.res.Classes, c)
	}
}
