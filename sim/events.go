package sim

import (
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim/scenario"
)

// fleetEvent applies scenario event i.
func (r *runner) fleetEvent(i int) {
	ev := r.sc.Events[i]
	switch ev.Kind {
	case scenario.EventPodLoss:
		r.podLoss(ev.Pod)
		r.h.push(event{at: r.now + r.at(ev.DiscoveryDelay), kind: evDrop, idx: int32(ev.Pod)})
	case scenario.EventPodJoin:
		for range ev.Pods {
			if err := r.addServer(ev.Capacity); err != nil {
				panic(err) // the scenario's engine config validated at parse time
			}
		}
		r.setEndpoints()
	}
}

// podLoss kills server i. Its requests that have no first token yet are
// retried on their fallbacks (the proxy saw the connection fail before
// the first byte); those already streaming fail. Its endpoint stays in the
// pool, with stale metrics, until discovery drops it.
func (r *runner) podLoss(i int) {
	if r.dead[i] {
		return
	}
	r.dead[i] = true
	var lost []*simReq
	for _, q := range r.active {
		if q.server == i {
			lost = append(lost, q)
		}
	}
	for _, q := range lost {
		r.servers[i].Abort(&q.seq)
		r.leave(q)
		if q.seq.Generated > 0 {
			q.dec.Done(scheduler.Outcome{Kind: scheduler.OutcomeError, Status: 502})
			q.dec = nil
			r.fail(q)
			continue
		}
		h, p, o := q.seq.Hashes, q.seq.PromptTokens, q.seq.OutputTokens
		q.seq.Reset()
		q.seq.Hashes, q.seq.PromptTokens, q.seq.OutputTokens, q.seq.Data = h, p, o, q
		r.res.Retried++
		if !q.dec.Advance() {
			r.fail(q)
			continue
		}
		r.dispatch(q)
	}
}

// dropEndpoint removes dead server i's endpoint from the pool.
func (r *runner) dropEndpoint(i int) {
	if j := r.poolIndex(i); j >= 0 {
		r.eps = append(r.eps[:j], r.eps[j+1:]...)
		r.setEndpoints()
	}
}
