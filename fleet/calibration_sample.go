package fleet

import (
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// sample is one observation as the estimator keeps it.
type sample struct {
	at       time.Time
	pick     time.Time // the request's arrival at the router; zero: unknown
	seq      uint64    // the endpoint's pick ordinal (orders equal picks)
	prompt   float64   // prompt tokens (the server's count when reported)
	own      float64   // own uncached tokens
	queue    float64   // pending tokens ahead, as recorded (see Observation)
	matched  bool      // queue is in uncached tokens
	reported bool      // own comes from the server's cached_tokens
	// rPrompt and rUncached are the router's own counts of the request
	// (the units of a later request's queue, unmatched and matched).
	rPrompt, rUncached float64
	// admission says the request was picked while the endpoint was
	// admission-bound (see admissionBound): its first byte measures
	// waiting for KV, not prefill.
	admission bool
	ttft      float64 // seconds; 0: none
	batch     float64 // in-flight at the pick + 1
	itl       float64 // seconds per output token after the first; 0: unknown
	out       float64 // output tokens (reported, else the stream's chunks); 0: unknown
}

// fb returns the time the sample's first byte reached the router.
func (s *sample) fb() time.Time {
	return s.pick.Add(time.Duration(s.ttft * float64(time.Second)))
}

// epCal is one endpoint's window of samples (a ring), its last known KV
// configuration, and the prefill points of the last step (for pooling).
type epCal struct {
	win              []sample
	next, n          int
	blockSize, block int // last scraped cache config (kept when metrics go stale)
	live             []int
	spans            []span // decode intervals of the live samples (see decodeBeside)
	xs, ys           []float64
	rate             float64 // the prefill rate published last (tokens/s; 0: none learned)
	// perSeq is the decode step line's slope the window last identified
	// (seconds per decoding sequence; < 0: never), kept while the
	// window's batches are too alike to identify it (lineOr).
	perSeq float64
	// eng holds the engine line's terms as last identified (engineLine;
	// perSeq and perCtx < 0: never), kept likewise; seqCtx is the median
	// context per sequence of the window that identified eng.perSeq,
	// which that term holds while perCtx was never identified.
	eng    engineTerms
	seqCtx float64
}

func (e *epCal) add(s sample) {
	e.win[e.next] = s
	e.next = (e.next + 1) % len(e.win)
	e.n = min(e.n+1, len(e.win))
}

// toSample turns an observation into the estimator's terms: own work is
// the server's uncached count (prompt − cached) when it reported one,
// else the router's.
func toSample(now time.Time, o *scheduler.Observation) sample {
	s := sample{
		at:        now,
		pick:      o.Arrival,
		seq:       o.Seq,
		prompt:    float64(o.PromptTokens),
		own:       float64(o.UncachedTokens),
		queue:     float64(max(o.QueueTokens, 0)),
		matched:   o.Matched,
		rPrompt:   float64(max(o.PromptTokens, 0)),
		rUncached: float64(max(o.UncachedTokens, 0)),
		admission: admissionBound(o),
		ttft:      o.TTFT.Seconds(),
		batch:     float64(max(o.InFlight, 0)) + 1,
	}
	if u := o.Usage; u.PromptTokens > 0 {
		s.prompt = float64(u.PromptTokens)
		if !o.Matched {
			s.own = s.prompt
		}
		if u.CachedReported {
			s.own = float64(max(u.PromptTokens-max(u.CachedTokens, 0), 0))
			s.reported = true
		}
	}
	// Uncached tokens beyond the prompt are a wrong count.
	s.own = min(s.own, s.prompt)
	out := o.Usage.OutputTokens
	if out <= 0 {
		out = o.Usage.Chunks
	}
	if out > 0 {
		s.out = float64(out)
	}
	if out >= 2 && o.Latency > o.TTFT {
		s.itl = (o.Latency - o.TTFT).Seconds() / float64(out-1)
	}
	return s
}
