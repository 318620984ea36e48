package scheduler

import "math"

// probe moves the decision onto a candidate the calibrator wants
// requests for (ProbeConfig): when the chosen endpoint's calibration wants
// none, the first candidate, in candidate order, that
//   - has probes left of its published Calibration.Probes,
//   - has no request in flight (this router's or a peer's),
//   - was not probed in the last Interval, and
//   - would make the request wait for its first token at most WaitFactor
//     times as long as the choice would, by the wait bound's measure
//     (queued and own uncached prompt tokens over the prefill rate), or
//     else is the first such probe in 1/Share of the picks that had a
//     candidate passing the three tests before,
//
// becomes the choice, and the rest of the ranking follows it as fallbacks
// (as many as MaxFallbacks allows). A probe claims one of the endpoint's
// probes, then its probe time, each with an atomic operation, so
// concurrent picks never send one endpoint two probes within Interval;
// a publication (SetCalibration) that lands between the two may grant one
// more than it asked. Time is the request's arrival, else the clock's (as
// for outlier ejection), so the simulator's virtual time paces probes too.
func (s *Scheduler) probe(d *Decision, req *Request, cands []*Endpoint) {
	chosen := cands[d.order[0]]
	if c := chosen.st.calib.Load(); c == nil || c.Probes > 0 {
		return // the choice is unlearned itself: no trade to make
	}
	var now int64
	limit := math.NaN()
	costly := false
	for i, e := range cands {
		if e.st.probes.Load() <= 0 || e.InFlight() != 0 {
			continue
		}
		if now == 0 {
			now = s.now(req.Arrival).UnixNano()
		}
		last := e.st.probe.Load()
		if last != 0 && now-last < int64(s.cfg.Probe.Interval) {
			continue
		}
		if math.IsNaN(limit) {
			// The first candidate that may be probed: this pick counts
			// towards the share (only such picks write the counter).
			limit = s.cfg.Probe.WaitFactor * s.wait(d, chosen)
			costly = s.probeEvery > 0 && s.probeSeen.Add(1) >= s.probeEvery
		}
		free := s.wait(d, e) <= limit
		if !free && !costly {
			continue // the request's first token would wait longer there
		}
		if e.st.probes.Add(-1) < 0 {
			e.st.probes.Add(1)
			continue
		}
		if !e.st.probe.CompareAndSwap(last, now) {
			e.st.probes.Add(1)
			continue
		}
		if !free {
			s.probeSeen.Store(0)
		}
		// i first, then the ranking without it.
		prev := i
		for k := range d.order {
			d.order[k], prev = prev, d.order[k]
			if prev == i {
				break
			}
		}
		d.probed = true
		s.m.probes.Inc()
		return
	}
}

// Probed reports whether the pick was a calibration probe: the request
// went to an idle endpoint the calibrator wanted requests for, not to the
// best-ranked candidate (ProbeConfig).
func (d *Decision) Probed() bool { return d.probed }
