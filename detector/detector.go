package detector

import (
	"math"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/trimtab/trimtab/scheduler"
)

// Gate is the reason a signal was held at 0; "" when it was not.
type Gate string

// Gates, in the order they are checked.
const (
	GateNone Gate = ""
	// GateTooFewEndpoints: fewer than Config.MinEndpoints fresh endpoints.
	GateTooFewEndpoints Gate = "too_few_endpoints"
	// GateLowLoad: total load below Config.MinLoad.
	GateLowLoad Gate = "low_load"
	// GateZeroMean: the mean load is (numerically) zero, so the CV is
	// undefined. Only reachable with min_load 0.
	GateZeroMean Gate = "zero_mean"
)

// zeroMean is the mean load below which the CV is treated as undefined.
const zeroMean = 1e-9

// Signal is one detector output with every number it was computed from.
// The zero value is a valid "no imbalance" signal.
type Signal struct {
	// At is the step's time (the now passed to Step).
	At time.Time
	// Value is what the configurator consumes, in [0,1]: Smoothed, or
	// exactly 0 when Gate is set.
	Value float64
	// RequestCV is the normalised CV of per-endpoint load
	// ((running + waiting [+ in-flight]) / capacity), in [0,1], with the
	// chance imbalance of Requests randomly placed requests subtracted
	// (NoiseCorrected) when Config.SubtractNoise is set. 0 when gated.
	RequestCV float64
	// RequestCVUncorrected is the normalised CV before that subtraction
	// (equal to RequestCV without SubtractNoise). 0 when gated.
	RequestCVUncorrected float64
	// Requests is Σ (running + waiting [+ in-flight]) over the fresh
	// endpoints: raw counts, not capacity-divided; the noise correction's
	// sample size. Endpoints whose capacity makes their load undefined
	// (load read as 0) are left out. Reported even when gated.
	Requests float64
	// KVCV is the normalised CV of per-endpoint KV utilisation times
	// KVMax, in [0,1]; 0 when gated or when KVUsed is false. Scaling by the
	// fullest endpoint's utilisation keeps a spread of 1 % against 5 %
	// (no endpoint near full, nothing to relieve) from reading as a hot
	// spot; one endpoint full and the rest empty still reads 1.
	KVCV float64
	// KVMax is the highest KV utilisation of a fresh endpoint, in [0,1].
	// Reported even when gated.
	KVMax float64
	// KVUsed is false when every fresh endpoint reports zero KV
	// utilisation (the server does not export it, or the pool is empty of
	// sequences); Raw is then RequestCV alone, whatever the rule.
	KVUsed bool
	// Raw is RequestCV and KVCV combined by Config.Combine, in [0,1];
	// 0 when gated.
	Raw float64
	// Smoothed is the EWMA after this step: α·Raw + (1−α)·previous. While
	// gated Raw is 0, so Smoothed decays towards 0.
	Smoothed float64
	// Pressure is Σ waiting / Σ (running + waiting) over the fresh
	// endpoints (raw counts, not capacity-divided), in [0,1]; 0 when
	// nothing runs or waits. Reported even when gated.
	Pressure float64
	// Endpoints is the number of fresh endpoints used.
	Endpoints int
	// TotalLoad is Σ load_i over the fresh endpoints.
	TotalLoad float64
	// Herd is the share of the smoothed picks whose calm-weights choice
	// was over the load guard's bound, in [0,1] (SignalHerd). Reported
	// with either signal; 0 when no pick was guarded.
	Herd float64
	// Picks is the number of picks in the herd window (exponentially
	// weighted, time constant HerdWindow), scaled to the pool's when
	// replica sync reports other routers' in-flight requests: this
	// router's picks × (in-flight with peers ÷ its own in-flight), both
	// averaged over the same window. The min_picks gate reads it, so N
	// replicas, each seeing 1/N of the picks, gate as one router would.
	// Reported even when gated.
	Picks float64
	// Gate says why Value was held at 0 ("" when it was not).
	Gate Gate
}

// Gates lists every gate that holds a signal, in check order.
var Gates = [...]Gate{GateTooFewEndpoints, GateLowLoad, GateZeroMean}

// Units of Components, as they appear in metric names.
const (
	UnitRatio     = "ratio"     // a number in [0,1]
	UnitEndpoints = "endpoints" // a count of endpoints
	UnitRequests  = "requests"  // requests, raw or capacity-divided
	UnitPicks     = "picks"     // picks, exponentially weighted over the herd window
)

// Component is one named number a Signal was computed from.
type Component struct {
	// Name is the snake_case name used in logs, metrics and /debug/history.
	Name string
	// Value is the number, in Unit.
	Value float64
	// Unit is one of UnitRatio, UnitEndpoints, UnitRequests, UnitPicks.
	Unit string
}

// NumComponents is len(Signal.Components()).
const NumComponents = 12

// Components returns the numbers the signal was computed from, in a fixed
// order, without allocating: the one list logs, metrics and the status
// history are built from.
func (s *Signal) Components() [NumComponents]Component {
	return [NumComponents]Component{
		{"request_cv", s.RequestCV, UnitRatio},
		{"request_cv_uncorrected", s.RequestCVUncorrected, UnitRatio},
		{"kv_cv", s.KVCV, UnitRatio},
		{"kv_max", s.KVMax, UnitRatio},
		{"raw", s.Raw, UnitRatio},
		{"smoothed", s.Smoothed, UnitRatio},
		{"pressure", s.Pressure, UnitRatio},
		{"endpoints", float64(s.Endpoints), UnitEndpoints},
		{"total_load", s.TotalLoad, UnitRequests},
		{"requests", s.Requests, UnitRequests},
		{"herd", s.Herd, UnitRatio},
		{"picks", s.Picks, UnitPicks},
	}
}

// Detector turns endpoint views into imbalance signals. See the package
// documentation for the maths.
type Detector struct {
	cfg   Config
	alpha float64 // the herd averages' factor per step: 1 − e^(−Interval/HerdWindow)

	// Step state: the EWMAs, the counters seen at the previous step and
	// scratch buffers reused across steps.
	smoothed            float64
	herdNum, herdDen    float64
	lastHerd, lastPicks uint64
	loads, kv           []float64
	// EWMAs (the herd averages' factor) of Σ in-flight with peers' counts
	// and of this router's own: their ratio scales this router's picks to
	// the pool's for the min_picks gate.
	inPool, inLocal float64
}

// New returns a detector with an EWMA state of 0. It fails if cfg is
// invalid.
func New(cfg Config) (*Detector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Detector{cfg: cfg, alpha: -math.Expm1(-float64(cfg.Interval) / float64(cfg.HerdWindow))}, nil
}

// Config returns the detector's configuration.
func (d *Detector) Config() Config { return d.cfg }

// Step measures eps at now and returns the signal. Endpoints that are nil
// or not StateFresh are left out. Negative, NaN or infinite counts are read
// as 0 and KV utilisation is clamped to [0,1], so a misbehaving server
// cannot produce a signal outside [0,1].
//
// Step is deterministic: two detectors with the same Config fed the same
// sequence of (now, eps) return the same sequence of signals. now is only
// recorded in Signal.At; the EWMA advances once per call, whatever the
// time between calls. Step does not allocate once its buffers have grown
// to the pool size. It is not safe for concurrent use.
func (d *Detector) Step(now time.Time, eps []*scheduler.Endpoint) Signal {
	d.loads, d.kv = d.loads[:0], d.kv[:0]
	var total, requests, waiting, busy, kvSum, kvMax float64
	var herd, picks uint64
	var inPool, inLocal float64
	for _, e := range eps {
		if e == nil {
			continue
		}
		herd += e.HerdPicks()
		picks += e.Picks()
		inPool += float64(max(e.InFlight(), 0))
		inLocal += float64(max(e.LocalInFlight(), 0))
		if e.State != scheduler.StateFresh {
			continue
		}
		r, w := count(e.Running), count(e.Waiting)
		n := r + w
		if d.cfg.IncludeInFlight {
			n += float64(max(e.InFlight(), 0))
		}
		l := n / e.CapacityOrOne()
		if math.IsInf(l, 0) || math.IsNaN(l) { // capacity NaN/Inf guard
			l, n = 0, 0
		}
		requests += n
		kv := scheduler.Clamp01(e.KVUtil)
		d.loads = append(d.loads, l)
		d.kv = append(d.kv, kv)
		total += l
		kvSum += kv
		kvMax = max(kvMax, kv)
		waiting += w
		busy += r + w
	}
	sig := Signal{At: now, Endpoints: len(d.loads), TotalLoad: total, Requests: requests, KVMax: kvMax}
	if busy > 0 {
		sig.Pressure = waiting / busy
	}
	// Herd counters are cumulative per endpoint; an endpoint leaving the
	// pool takes its counts with it, so a step never counts backwards.
	dh, dp := herd-min(herd, d.lastHerd), picks-min(picks, d.lastPicks)
	d.lastHerd, d.lastPicks = herd, picks
	h := d.alpha
	d.herdNum = h*float64(min(dh, dp)) + (1-h)*d.herdNum
	d.herdDen = h*float64(dp) + (1-h)*d.herdDen
	d.inPool = h*inPool + (1-h)*d.inPool
	d.inLocal = h*inLocal + (1-h)*d.inLocal
	sig.Picks = d.herdDen / h
	if d.inLocal > 0 && d.inPool > d.inLocal {
		sig.Picks *= d.inPool / d.inLocal
	}
	if d.herdDen > 0 {
		sig.Herd = scheduler.Clamp01(d.herdNum / d.herdDen)
	}
	herdSignal := d.cfg.Signal == SignalHerd
	switch {
	case sig.Endpoints < d.cfg.MinEndpoints:
		sig.Gate = GateTooFewEndpoints
	case herdSignal && sig.Picks < d.cfg.MinPicks:
		sig.Gate = GateLowLoad
	case !herdSignal && total < d.cfg.MinLoad:
		sig.Gate = GateLowLoad
	case !herdSignal && total/float64(sig.Endpoints) <= zeroMean:
		sig.Gate = GateZeroMean
	}
	if sig.Gate == GateNone {
		sig.RequestCVUncorrected = NormalisedCV(d.loads)
		sig.RequestCV = sig.RequestCVUncorrected
		if d.cfg.SubtractNoise {
			sig.RequestCV = NoiseCorrected(sig.RequestCV, requests)
		}
		sig.KVUsed = kvSum/float64(sig.Endpoints) > zeroMean
		sig.Raw = sig.RequestCV
		if sig.KVUsed {
			sig.KVCV = NormalisedCV(d.kv) * kvMax
			switch d.cfg.Combine {
			case CombineMax:
				sig.Raw = max(sig.RequestCV, sig.KVCV)
			case CombineMin:
				sig.Raw = min(sig.RequestCV, sig.KVCV)
			case CombineWeighted:
				sig.Raw = (1-d.cfg.KVWeight)*sig.RequestCV + d.cfg.KVWeight*sig.KVCV
			}
		}
	}
	a := d.cfg.Smoothing
	d.smoothed = scheduler.Clamp01(a*sig.Raw + (1-a)*d.smoothed)
	sig.Smoothed = d.smoothed
	switch {
	case sig.Gate != GateNone:
	case herdSignal:
		sig.Value = sig.Herd
	default:
		sig.Value = sig.Smoothed
	}
	return sig
}

// NormalisedCV returns CV / sqrt(N − 1) of the non-negative values x,
// clamped to [0,1], where CV = σ/μ with σ the population standard
// deviation. It returns 0 when N < 2 or μ ≤ 1e-9.
//
// Why the population deviation makes the range exactly [0,1] for every N:
// let μ = Σx/N > 0 and p_i = x_i/(Nμ) the shares (p_i ≥ 0, Σp_i = 1). The
// population variance is σ² = Σx_i²/N − μ², so
//
//	CV² = σ²/μ² = N·Σp_i² − 1.
//
// Since 0 ≤ p_i ≤ 1, p_i² ≤ p_i and Σp_i² ≤ Σp_i = 1, with equality iff
// one p_i is 1 and the others 0 (all load on one endpoint): then
// CV² = N − 1 and CV/sqrt(N−1) = 1. By Cauchy–Schwarz Σp_i² ≥ (Σp_i)²/N =
// 1/N, with equality iff all p_i = 1/N (even load): then CV = 0. With the
// sample deviation (divide by N − 1) the maximum would be sqrt(N) instead,
// and the normalisation would not hit 1. The result depends only on the
// shares, so scaling every value by c > 0 does not change it.
//
// In between, r² = (N/N_eff − 1)/(N − 1) with N_eff = 1/Σp_i² the
// effective number of endpoints carrying the load; e.g. k endpoints sharing
// all load evenly give r = sqrt((N/k − 1)/(N − 1)).
func NormalisedCV(x []float64) float64 {
	n := len(x)
	if n < 2 {
		return 0
	}
	mean, std := stat.PopMeanStdDev(x, nil)
	if !(mean > zeroMean) {
		return 0
	}
	return scheduler.Clamp01(std / mean / math.Sqrt(float64(n-1)))
}

// NoiseCorrected returns the normalised CV r ∈ [0,1] of a load spread made
// of n requests with the imbalance that chance alone gives n requests
// removed, in [0,1]:
//
//	r' = sqrt(max(0, r² − 1/n) / (1 − 1/n)),   0 when n ≤ 1 or r is NaN.
//
// Why 1/n: place n requests on N endpoints independently and uniformly at
// random. Each count X_i is binomial with mean μ = n/N and variance
// μ(1 − 1/N), and the counts sum to n, so the population variance has
// expectation E[σ²] = μ(1 − 1/N) and E[CV²] = (1 − 1/N)/μ = (N − 1)/n,
// i.e. E[r²] = 1/n, whatever N. That is the reading of a pool with no
// preference at all: 0.35 for 8 requests, 0.1 for 100. More generally, if
// each request goes to endpoint i with probability p_i, whose own
// normalised CV is r_p, then E[r²] = r_p² + (1 − r_p²)/n, so
// (r² − 1/n)/(1 − 1/n) is an unbiased estimate of r_p²: the correction
// measures the placement's preference, not the dice. It maps the
// no-preference expectation to 0, keeps 1 (all requests on one endpoint)
// at 1, and shrinks readings in between, most when n is small; for n in
// the thousands it changes nothing. With capacity weights or in-flight counts
// (which the server may also count) the model is approximate.
func NoiseCorrected(r, n float64) float64 {
	if !(n > 1) {
		return 0
	}
	return scheduler.Clamp01(math.Sqrt(max(0, r*r-1/n) / (1 - 1/n)))
}

// count reads a scraped count: NaN, infinite or negative values become 0.
func count(v float64) float64 {
	if !(v >= 0) || math.IsInf(v, 1) {
		return 0
	}
	return v
}
