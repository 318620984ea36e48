package fleet

import (
	"math"

	"github.com/trimtab/trimtab/scheduler"
)

// admissionKV is the scraped KV-cache utilisation at or above which an
// endpoint with requests waiting is taken to be admission-bound.
const admissionKV = 0.9

// admissionBound says o's request was picked while its endpoint was
// admission-bound by its fresh scraped metrics: requests waiting and the
// KV cache (nearly) full, so the engine admits a request only when
// another frees its blocks and the first byte measures that wait rather
// than prefill. Unknown (stale) metrics say nothing.
func admissionBound(o *scheduler.Observation) bool {
	return o.Scraped && o.Waiting > 0 && o.KVUtil >= admissionKV
}

// points fills e.xs and e.ys with the prefill points of e's live samples
// (e.live, in pick order) that were not admission-bound: the time to
// first byte against the prefill work the request waited for, its own
// uncached tokens plus the work ahead of it at the pick.
//
// The work ahead is rebuilt from the window: every earlier-picked request
// whose first byte came after this pick was ahead, with its reported
// uncached tokens; when rate > 0 (tokens/s) one whose first byte came
// within own/rate of the pick counts only rate × that time, the part it
// had left to prefill. Requests ahead that the window does not hold
// (still running, failed, forgotten) are the recorded queue less what was
// found, in queue units (router-uncached tokens when matched, else prompt
// tokens scaled by share, the endpoint's uncached share).
func (c *Calibrator) points(e *epCal, share, rate float64) {
	e.xs, e.ys = e.xs[:0], e.ys[:0]
	var maxTTFT float64
	for _, i := range e.live {
		maxTTFT = max(maxTTFT, e.win[i].ttft)
	}
	for k, i := range e.live {
		s := &e.win[i]
		if s.admission {
			continue
		}
		if s.pick.IsZero() {
			q := s.queue
			if !s.matched {
				q *= share
			}
			e.xs, e.ys = append(e.xs, q+s.own), append(e.ys, s.ttft)
			continue
		}
		var work, found float64
		for m := k - 1; m >= 0; m-- {
			a := &e.win[e.live[m]]
			if a.pick.IsZero() {
				continue
			}
			if s.pick.Sub(a.pick).Seconds() > maxTTFT {
				break // every earlier one was answered before this pick
			}
			left := a.fb().Sub(s.pick).Seconds()
			if left <= 0 {
				continue // answered before this pick: no longer ahead
			}
			w := a.own
			if rate > 0 {
				w = min(w, rate*left)
			}
			work += w
			if s.matched {
				found += a.rUncached
			} else {
				found += a.rPrompt
			}
		}
		missing := max(s.queue-found, 0)
		if !s.matched {
			missing *= share
		}
		e.xs, e.ys = append(e.xs, work+missing+s.own), append(e.ys, s.ttft)
	}
}

// decodeWindow is how many of the newest samples the decode line is
// fitted to (Theil–Sen is quadratic in them).
const decodeWindow = 128

// prefillQuantile is the quantile of the time to first byte the prefill
// line is fitted to: waits that are not prefill (admission, a step in
// progress, decodes sharing the steps) only add to it, so the line under
// most points is the prefill's.
const prefillQuantile = 0.25

// fitPrefill returns the prefill throughput (tokens/s) of the points:
// the inverse slope of the prefillQuantile regression line of time to
// first byte (ys) on work (xs); 0 when the work varies by less than a
// token or the slope is not positive.
func (c *Calibrator) fitPrefill(xs, ys []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	if hi-lo < 1 {
		return 0
	}
	b := c.quantileSlope(xs, ys, prefillQuantile)
	if !(b > 1e-9) {
		return 0
	}
	return 1 / b
}

// quantileSlope returns the slope b of the tau quantile regression line
// y ≈ a + b·x, 0 ≤ b ≤ 0.01 s per token (at least 100 tokens/s): it
// minimises the check loss Σ ρ_tau(y − a − b·x)
// with a the tau quantile of y − b·x, a convex function of b, by golden
// section search.
func (c *Calibrator) quantileSlope(xs, ys []float64, tau float64) float64 {
	loss := func(b float64) float64 {
		r := c.scratch[:0]
		for i := range xs {
			r = append(r, ys[i]-b*xs[i])
		}
		c.scratch = r[:0]
		a := selectK(r, int(tau*float64(len(r)-1)))
		var l float64
		for i := range xs {
			if d := ys[i] - b*xs[i] - a; d >= 0 {
				l += tau * d
			} else {
				l -= (1 - tau) * d
			}
		}
		return l
	}
	const phi = 0.6180339887498949
	lo, hi := 0.0, 0.01
	m1, m2 := hi-phi*(hi-lo), lo+phi*(hi-lo)
	f1, f2 := loss(m1), loss(m2)
	for range 48 {
		if f1 <= f2 {
			hi, m2, f2 = m2, m1, f1
			m1 = hi - phi*(hi-lo)
			f1 = loss(m1)
		} else {
			lo, m1, f1 = m1, m2, f2
			m2 = lo + phi*(hi-lo)
			f2 = loss(m2)
		}
	}
	b := (lo + hi) / 2
	// The optimum passes through two of the points: snap to the slope of
	// the pair through the point nearest the line closest to b, when that
	// loses nothing (exact on exact data).
	r := c.scratch[:0]
	for i := range xs {
		r = append(r, ys[i]-b*xs[i])
	}
	a := selectK(r, int(tau*float64(len(r)-1)))
	c.scratch = r[:0]
	at, near := 0, math.Inf(1)
	for i := range xs {
		if d := math.Abs(ys[i] - b*xs[i] - a); d < near {
			at, near = i, d
		}
	}
	snap, gap := b, math.Inf(1)
	for j := range xs {
		if dx := xs[j] - xs[at]; math.Abs(dx) >= 1 {
			if sl := (ys[j] - ys[at]) / dx; math.Abs(sl-b) < gap {
				snap, gap = sl, math.Abs(sl-b)
			}
		}
	}
	if snap >= 0 && snap <= 0.01 && loss(snap) <= loss(b) {
		b = snap
	}
	return b
}

// pool sets each endpoint's published prefill throughput. Endpoints of
// the same class (declared capacity and models) run the same engine, so
// each publishes its class's rate, the median of its members' own fits,
// which outvotes an endpoint whose traffic shows prefill badly; an
// endpoint alone in its class, or whose class has no fit, keeps its own.
// Either is blended with the prior, in seconds per token (the unit costs
// add in), with weight min(1, points/min_samples). Then each asks for the
// probes its estimate lacks (probes, Calibration.Probes).
func (c *Calibrator) pool(eps []EndpointCalibration, class []string) {
	members := map[string][]int{}
	for i := range eps {
		if eps[i].PrefillSamples > 0 {
			members[class[i]] = append(members[class[i]], i)
		}
	}
	type fit struct {
		r float64
		n int
	}
	fits := map[string]fit{}
	for k, m := range members {
		if len(m) < 2 {
			continue
		}
		// The class's rate is the median of its members' own fits, one
		// vote per endpoint (members with at least half of min_samples
		// points vote when any has): the members share the engine but
		// not their traffic, and an endpoint whose requests are nearly
		// all cached (the holder of a hot prefix) fits its few uncached
		// tokens badly however many points it has, which a fit of the
		// pooled points, weighted by count, would follow.
		votes, n, least := c.scratch[:0], 0, max(c.cfg.MinSamples/2, 1)
		for pass := 0; pass < 2 && len(votes) == 0; pass++ {
			for _, i := range m {
				if e := &eps[i]; e.LearnedPrefillTokensPerSecond > 0 && (pass == 1 || e.PrefillSamples >= least) {
					votes = append(votes, e.LearnedPrefillTokensPerSecond)
				}
			}
		}
		for _, i := range m {
			n += eps[i].PrefillSamples
		}
		if r := medianOf(votes); r > 0 {
			fits[k] = fit{r, n}
		}
		c.scratch = votes[:0]
	}
	c.poolDecode(eps, class)
	for i := range eps {
		e := &eps[i]
		r, n := e.LearnedPrefillTokensPerSecond, e.PrefillSamples
		if f, ok := fits[class[i]]; ok {
			r, n, e.Pooled = f.r, f.n, true
		}
		e.Calibration.PrefillTokensPerSecond = e.priorR
		if ec := c.eps[e.Address]; ec != nil {
			ec.rate = r
		}
		e.Source, e.Calibration.Samples = "prior", 0
		if r > 0 {
			w := min(1, float64(n)/float64(c.cfg.MinSamples))
			e.Calibration.PrefillTokensPerSecond = 1 / ((1-w)/e.priorR + w/r)
			e.Source, e.Calibration.Samples = "blended", n
			if n >= c.cfg.MinSamples {
				e.Source = "learned"
			}
		}
	}
	c.probes(eps, class)
}

// probes asks for probe requests (Calibration.Probes) where a published
// prefill rate rests on fewer than min_samples points. A class with a
// class fit (Pooled) shares its shortfall over its members, rounded up; an
// endpoint that publishes its own estimate, or its prior, asks for its
// own (a member of a learned class that was sent nothing has no class fit
// until it has points of its own, so it asks). Requests that give no
// point (prompts of one length on an idle endpoint fit no line) still
// count against a cap: once the window holds 2 × min_samples requests —
// the class's for a class fit, else the endpoint's — it asks for none,
// since more of the same would not fit either.
func (c *Calibrator) probes(eps []EndpointCalibration, class []string) {
	type pooled struct{ observed, size int }
	by := map[string]*pooled{}
	for i := range eps {
		if !eps[i].Pooled {
			continue
		}
		k := by[class[i]]
		if k == nil {
			k = &pooled{}
			by[class[i]] = k
		}
		k.observed += eps[i].Observed
		k.size++
	}
	for i := range eps {
		e := &eps[i]
		short, observed, size := c.cfg.MinSamples-e.Calibration.Samples, e.Observed, 1
		if k := by[class[i]]; e.Pooled && k != nil {
			observed, size = k.observed, k.size
		}
		short = min(short, 2*c.cfg.MinSamples-observed)
		e.Calibration.Probes = 0
		if short > 0 {
			e.Calibration.Probes = (short + size - 1) / size
		}
	}
}

// poolDecode publishes, for every endpoint of a class of two or more, the
// median of its members' decode step lines, intercept and slope each (one
// vote per member with at least half of min_samples decode samples, or
// per member with any when none has). The members share the engine; a
// member's own slope is identified only by the spread of the batches it
// decoded in, which routing that evens the batch takes away (its slope
// then reads noise or 0), and a member sent nothing has only the prior.
func (c *Calibrator) poolDecode(eps []EndpointCalibration, class []string) {
	members := map[string][]int{}
	for i := range eps {
		members[class[i]] = append(members[class[i]], i)
	}
	least := max(c.cfg.MinSamples/2, 1)
	for _, m := range members {
		if len(m) < 2 {
			continue
		}
		voters := votersOf(m, least, func(i int) int { return eps[i].DecodeSamples })
		if len(voters) == 0 {
			continue
		}
		votes := c.scratch[:0]
		for _, i := range voters {
			votes = append(votes, eps[i].DecodeStepFixedSeconds)
		}
		fixed := medianOf(votes)
		votes = votes[:0]
		for _, i := range voters {
			votes = append(votes, eps[i].DecodeStepPerSeqSeconds)
		}
		perSeq := medianOf(votes)
		// The engine line's votes: members with half of min_samples
		// decodes in it (with two when none has). Not only those that
		// identified the context term: in a saturated pool few windows
		// do, and the median of those few moved the batch cost across
		// batch_on where the median over all did not (the A100's
		// Mooncake trace at 2×, 3 m, seeds 1–3: TTFT p99 +36–43 % with
		// configs/adaptive-decode.yaml, against +5–6 %).
		engVoters := votersOf(m, least, func(i int) int { return eps[i].EngineDecodeSamples })
		var eng [4]float64
		for k, term := range []func(*EndpointCalibration) float64{
			func(e *EndpointCalibration) float64 { return e.EngineStepFixedSeconds },
			func(e *EndpointCalibration) float64 { return e.EngineStepPerSeqSeconds },
			func(e *EndpointCalibration) float64 { return e.EngineStepPerContextTokenSeconds },
			func(e *EndpointCalibration) float64 { return e.EngineStepBatchSeconds },
		} {
			votes = votes[:0]
			for _, i := range engVoters {
				votes = append(votes, term(&eps[i]))
			}
			eng[k] = max(medianOf(votes), 0)
		}
		c.scratch = votes[:0]
		for _, i := range m {
			cal := &eps[i].Calibration
			cal.DecodeFixedSeconds, cal.DecodeSecondsPerSeq = fixed, max(perSeq, 0)
			if len(engVoters) > 0 {
				cal.EngineDecodeFixedSeconds, cal.EngineDecodeSecondsPerSeq, cal.EngineDecodeSecondsPerContextToken = eng[0], eng[1], eng[2]
				cal.EngineDecodeBatchSeconds = eng[3]
			}
		}
	}
}

// votersOf returns the members whose samples(i) reach least, or, when
// none does, those with two or more.
func votersOf(members []int, least int, samples func(i int) int) []int {
	voters := make([]int, 0, len(members))
	for pass := 0; pass < 2 && len(voters) == 0; pass++ {
		for _, i := range members {
			if n := samples(i); n >= 2 && (pass == 1 || n >= least) {
				voters = append(voters, i)
			}
		}
	}
	return voters
}

// theilSen returns the Theil–Sen slope of y against x over the pairs of
// samples whose x differ by at least minDx (> 0): the median of their
// slopes, which tolerates up to 29 % of arbitrary outliers; and how many
// samples are in at least one such pair. 0, 0 when there is none.
func (c *Calibrator) theilSen(xs, ys []float64, minDx float64) (slope float64, n int) {
	sl := c.scratch[:0]
	used := c.used[:0]
	for range xs {
		used = append(used, false)
	}
	for i := range xs {
		for j := i + 1; j < len(xs); j++ {
			if dx := xs[j] - xs[i]; dx >= minDx || -dx >= minDx {
				sl = append(sl, (ys[j]-ys[i])/dx)
				used[i], used[j] = true, true
			}
		}
	}
	for _, u := range used {
		if u {
			n++
		}
	}
	c.scratch, c.used = sl[:0], used[:0]
	if len(sl) == 0 {
		return 0, 0
	}
	return medianOf(sl), n
}

// line fits y ≈ a + b·x robustly: b the Theil–Sen slope (0 when no two x
// differ by half or more), a the median of y − b·x; both at least 0.
func (c *Calibrator) line(xs, ys []float64) (a, b float64) {
	a, b, _ = c.lineOr(xs, ys, -1, 0)
	return a, b
}

// lineOr is line with a known slope for a window that does not identify
// one: when fewer than least samples are in a pair whose x differ by half
// or more (every request decoded at about one batch, which routing that
// evens the batches brings about), b is known (when ≥ 0) and a the median
// of y − known·x. An engine's cost per decoding sequence does not change
// because its batches stopped differing. ok reports whether the window
// identified the slope. A few requests at another batch pair with every
// other sample and count as identifying it (a stricter rule, least samples
// half a sequence from the median batch, read worse: docs/calibration.md).
func (c *Calibrator) lineOr(xs, ys []float64, known float64, least int) (a, b float64, ok bool) {
	// Pairs whose batches differ by half a sequence or more: the batch
	// over a decode is a mean (decodeBeside), and two nearly equal ones
	// give a slope of their noise.
	b, n := c.theilSen(xs, ys, 0.5)
	ok = n > 0 && n >= least
	if !ok && known >= 0 {
		b = known
	}
	b = max(b, 0)
	res := c.scratch[:0]
	for i := range xs {
		res = append(res, ys[i]-b*xs[i])
	}
	a = max(medianOf(res), 0)
	c.scratch = res[:0]
	return a, b, ok
}

// medianOf returns the median of v (the mean of the middle two for an
// even count), reordering v; 0 for none. Quickselect, O(len(v)).
func medianOf(v []float64) float64 {
	n := len(v)
	if n == 0 {
		return 0
	}
	hi := selectK(v, n/2)
	if n%2 == 1 {
		return hi
	}
	lo := v[0]
	for _, x := range v[:n/2] {
		lo = math.Max(lo, x)
	}
	return (lo + hi) / 2
}

// selectK reorders v so that v[k] is the k-th smallest, everything before
// it ≤ and after it ≥, and returns v[k].
func selectK(v []float64, k int) float64 {
	lo, hi := 0, len(v)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Median of three as the pivot.
		if v[mid] < v[lo] {
			v[mid], v[lo] = v[lo], v[mid]
		}
		if v[hi] < v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[hi] < v[mid] {
			v[hi], v[mid] = v[mid], v[hi]
		}
		pivot := v[mid]
		i, j := lo, hi
		for i <= j {
			for v[i] < pivot {
				i++
			}
			for v[j] > pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return v[k]
		}
	}
	return v[k]
}
