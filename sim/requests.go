package sim

import (
	"context"
	"time"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim/engine"
	"github.com/trimtab/trimtab/sim/scenario"
)

// A request's life in a run: arrival, dispatch through the real scheduler,
// engine events, completion, failure and timeout.

// next lets closed-loop client c issue its next request, or retire.
func (r *runner) next(c int) {
	if c < 0 {
		return
	}
	if c >= r.clients || r.now >= r.end {
		r.busy--
		return
	}
	var think time.Duration
	if m := r.sc.Load.ThinkTime; m > 0 {
		think = time.Duration(r.arng.ExpFloat64() * float64(m))
	}
	if t, ok := r.gens[r.phase].(scenario.Thinker); ok {
		think += t.ThinkTime(c)
	}
	r.h.push(event{at: r.now + think, kind: evArrival, idx: int32(c)})
}

func (r *runner) getReq() *simReq {
	if n := len(r.free); n > 0 {
		q := r.free[n-1]
		r.free = r.free[:n-1]
		return q
	}
	return &simReq{}
}

func (r *runner) putReq(q *simReq) {
	q.live = false
	q.dec = nil
	q.gen++
	r.free = append(r.free, q)
}

// arrive issues one request from client c (−1: open loop).
func (r *runner) arrive(c int) {
	if c >= 0 && (c >= r.clients || r.now >= r.end) {
		r.busy--
		return
	}
	q := r.getReq()
	q.client, q.arrival, q.live, q.phase = c, r.now, true, r.phase
	q.measured = r.now >= r.warm && r.now < r.end
	q.stream, q.timeout = 0, r.sc.Timeout
	slot := c
	switch {
	case c <= streamClient0:
		slot = r.streamSpec(q, streamClient0-c)
	case c < 0:
		// Open loop: arrivals cycle over a pool of sessions / tenants.
		slot = r.openN % scenario.OpenChatSlots
		r.openN++
	}
	if q.stream == 0 {
		r.gens[r.phase].Next(r.wrng, slot, &q.spec)
	}
	q.buf = q.buf[:0]
	for _, s := range q.spec.Segs {
		q.buf = r.segs.Append(q.buf, s)
	}
	promptBytes := len(q.buf)
	q.buf = scenario.AppendSegment(q.buf, q.spec.Out)
	q.seq.Reset()
	q.seq.Hashes = scenario.BlockHashes(q.seq.Hashes, q.buf, r.sc.EngineConfig().BlockSize)
	q.seq.PromptTokens = promptBytes / scenario.BytesPerToken
	q.seq.OutputTokens = q.spec.Out.Tokens
	q.seq.Data = q
	q.req = scheduler.Request{
		Model:      r.sc.Model,
		Prompt:     q.buf[:promptBytes],
		SessionID:  q.spec.SessionID,
		SessionKey: q.spec.SessionKey,
		Arrival:    Epoch.Add(r.now),
	}
	if d := r.drawLoRA[r.phase]; d != nil {
		// vLLM keys cached blocks by adapter: another adapter's blocks
		// never match.
		k := d.draw(r.wrng)
		for i := range q.seq.Hashes {
			q.seq.Hashes[i] ^= d.salts[k]
		}
		q.seq.LoRA, q.req.LoRA = d.names[k], d.names[k]
	}
	if len(q.spec.RouterSegs) > 0 {
		q.rbuf = q.rbuf[:0]
		for _, s := range q.spec.RouterSegs {
			q.rbuf = r.segs.Append(q.rbuf, s)
		}
		q.req.Prompt = q.rbuf
	}
	r.res.Issued++
	if q.measured {
		r.res.Measured++
		r.res.Phases[q.phase].Measured++
	}
	r.inflight++
	if i := r.classOf(q); i >= 0 {
		r.classes[i].res.Issued++
	}
	rt := r.route(slot)
	q.win = nil
	if r.retune != nil && rt == r.routers[0] {
		q.win, q.wi = r.retune.win, r.retune.win.record(r.now, q.req.Prompt)
	}
	if rt.flow != nil {
		r.offer(rt, q)
		return
	}
	dec, err := rt.sched.Pick(context.Background(), &q.req)
	if err != nil {
		r.fail(q)
		return
	}
	q.dec = dec
	if r.dispatch(q) {
		r.h.push(event{at: r.now + q.timeout, kind: evTimeout, r: q, gen: q.gen})
	}
}

// dispatch sends q to its decision's endpoint, moving along the fallbacks
// while the endpoint is down (connection refused, as the proxies retry).
// It reports whether q is now in an engine; if not, q has failed.
func (r *runner) dispatch(q *simReq) bool {
	for {
		i := r.addrIdx[q.dec.Endpoint.Address]
		if !r.dead[i] {
			q.server = i
			if err := r.servers[i].Add(&q.seq); err != nil {
				r.fail(q)
				return false
			}
			q.active = len(r.active)
			r.active = append(r.active, q)
			r.kick(i)
			return true
		}
		r.res.Retried++
		if !q.dec.Advance() {
			r.fail(q)
			return false
		}
	}
}

// leave removes q from the active list (it left its engine).
func (r *runner) leave(q *simReq) {
	last := r.active[len(r.active)-1]
	r.active[q.active] = last
	last.active = q.active
	r.active = r.active[:len(r.active)-1]
}

// miss records measured request q, which did not complete, in the
// latency statistics at the client timeout (Latencies.Miss).
func (r *runner) miss(q *simReq) {
	if !q.measured {
		return
	}
	var ttft time.Duration
	if q.seq.Generated > 0 {
		ttft = q.seq.FirstTokenAt - q.arrival
	}
	r.res.Miss(ttft, q.timeout)
	r.res.Phases[q.phase].Miss(ttft, q.timeout)
}

func (r *runner) fail(q *simReq) {
	r.res.Failed++
	if q.measured {
		r.res.MeasuredFailed++
	}
	r.miss(q)
	if q.dec != nil {
		q.dec.Done(scheduler.Outcome{Kind: scheduler.OutcomeError, Status: 503})
	}
	r.ended(q, endFailed)
	r.inflight--
	c := q.client
	r.putReq(q)
	r.next(c)
}

func (r *runner) timeout(q *simReq) {
	if q.ticket != nil {
		r.timeoutQueued(q)
		return
	}
	r.servers[q.server].Abort(&q.seq)
	r.leave(q)
	r.res.TimedOut++
	if q.measured {
		r.res.MeasuredTimedOut++
	}
	r.miss(q)
	o := scheduler.Outcome{Kind: scheduler.OutcomeCanceled, Latency: r.now - q.arrival}
	if q.seq.Generated > 0 {
		o.TTFT = q.seq.FirstTokenAt - q.arrival
	}
	q.dec.Done(o)
	r.ended(q, endTimedOut)
	r.inflight--
	c := q.client
	s := q.server
	r.putReq(q)
	r.next(c)
	r.kick(s)
}

func (r *runner) kick(i int) {
	e := r.servers[i]
	if r.dead[i] || e.Busy() {
		return
	}
	if d, ok := e.StartStep(); ok {
		r.h.push(event{at: r.now + d, kind: evStepEnd, idx: int32(i)})
	}
}

func (r *runner) stepEnd(i int) {
	if r.dead[i] {
		return // the step died with the server
	}
	r.servers[i].FinishStep(r.now, r.emit[i])
	r.kick(i)
}

// onEvent handles engine events; it only schedules, never re-enters the
// engine.
func (r *runner) onEvent(ev engine.Event) {
	q := ev.Seq.Data.(*simReq)
	if ev.Kind == engine.EventFirstToken {
		// The first token is the first response byte a proxy would see:
		// the prompt stops counting as pending prefill on the endpoint.
		q.dec.FirstByte()
	}
	if ev.Kind != engine.EventFinished {
		return
	}
	ttft := q.seq.FirstTokenAt - q.arrival
	e2e := r.now - q.arrival
	if q.win != nil {
		q.win.setOutput(q.wi, q.seq.OutputTokens)
	}
	if q.measured {
		slo := r.sc.SLO
		if q.spec.Continuation {
			r.res.ContinuationPromptTokens += int64(q.seq.PromptTokens)
			r.res.ContinuationCachedTokens += int64(q.seq.CachedTokens)
		}
		r.res.Complete(ttft, e2e, q.seq.OutputTokens, slo)
		r.res.Phases[q.phase].Complete(ttft, e2e, q.seq.OutputTokens, slo)
	}
	r.res.Completed++
	q.dec.Done(scheduler.Outcome{Kind: scheduler.OutcomeSuccess, Status: 200, TTFT: ttft, Latency: e2e, Usage: usage(&q.seq)})
	r.ended(q, endCompleted)
	r.leave(q)
	r.inflight--
	c := q.client
	r.putReq(q)
	r.next(c)
}
