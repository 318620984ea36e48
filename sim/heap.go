package sim

import "time"

type evKind uint8

const (
	evArrival     evKind = iota // closed-loop client idx issues a request
	evOpen                      // open-loop / trace arrival (idx = generation)
	evStepEnd                   // server idx finishes its step
	evTimeout                   // request r gives up (if gen still matches)
	evScrape                    // publish server metrics to the router
	evControl                   // detector + configurator tick
	evSample                    // record timelines and load integrals
	evPhase                     // phase idx starts
	evOnset                     // sample phase idx's onset window (gen: sample number)
	evFleet                     // scenario event idx (a pod dies or joins)
	evDrop                      // discovery drops dead server idx's endpoint
	evMark                      // warm-up ends (idx 0) or issuing ends (idx 1)
	evSync                      // every replica sends its sync batch
	evSyncDeliver               // a replica's batch (msg) reaches the others
	evRetune                    // the slow loop's run (RunConfig.Retune)
	evCalibrate                 // every replica's calibrator steps and publishes
	evFlow                      // the flow dispatchers run (idx: flowWake or flowPoll)
	evStream                    // stream idx issues a request (gen 1: an open-loop arrival)
)

// event is one scheduled happening. Events at the same time run in the
// order they were scheduled (seq), which keeps runs deterministic.
type event struct {
	at   time.Duration
	seq  uint64
	kind evKind
	idx  int32
	gen  uint32
	r    *simReq
	msg  *syncMsg
}

// eventHeap is a binary min-heap on (at, seq), without interface calls.
type eventHeap struct {
	ev  []event
	seq uint64
}

func (h *eventHeap) len() int { return len(h.ev) }

func (h *eventHeap) less(i, j int) bool {
	a, b := &h.ev[i], &h.ev[j]
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (h *eventHeap) push(e event) {
	h.seq++
	e.seq = h.seq
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	top := h.ev[0]
	n := len(h.ev) - 1
	h.ev[0] = h.ev[n]
	h.ev[n] = event{}
	h.ev = h.ev[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			break
		}
		h.ev[i], h.ev[m] = h.ev[m], h.ev[i]
		i = m
	}
	return top
}
