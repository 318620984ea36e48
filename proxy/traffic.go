package proxy

import (
	"bufio"
	"cmp"
	"io"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/zeebo/xxh3"

	"github.com/trimtab/trimtab/proxy/settings"
	"github.com/trimtab/trimtab/scheduler"
)

// Trace block geometry: a Mooncake trace has one hash id per 512-token
// block of the input, and trimtab estimates tokens as 4 prompt bytes each
// (the prefix scorer's bytes_per_token default, the simulator's
// BytesPerToken), so one id stands for 2048 prompt bytes.
const (
	TraceBlockTokens   = 512
	TraceBytesPerToken = 4
	traceBlockBytes    = TraceBlockTokens * TraceBytesPerToken
	// maxTraceIDs bounds the ids of one request: 256 blocks, 128k tokens,
	// the prefix scorer's default reach. A longer prompt keeps its whole
	// input_length and its first 256 ids; a replay gives the rest unique
	// bytes.
	maxTraceIDs = 256
)

// Reasons a request is left out of the window
// (trimtab_trace_dropped_requests_total{reason}).
const (
	dropWindow   = "window"       // arrived after the window's span
	dropRequests = "max_requests" // the window holds max_requests
	dropBlocks   = "max_blocks"   // the window's block ids are used up
)

// TrafficRecorder keeps a bounded window of the scheduled requests as a
// Mooncake-format trace (settings.RecordConfig): per request its arrival
// relative to the window's first request, its input length in tokens
// (prompt bytes ÷ 4) and one chained hash per 512-token block of the
// prompt, so two requests that share their first k ids share their first
// k × 512 tokens. The prompt itself is never kept. WriteTrace renumbers
// the hashes to small integers in order of first appearance, as Mooncake
// ids are, so a downloaded trace reveals the sharing and nothing of the
// content. The output length is the one the request's TraceSlot was given
// when it completed: the output tokens the endpoint reported, else its
// token-bearing stream events; 0 (unknown) until then, and for a request
// that failed or was cancelled or whose response said nothing of its
// output. The simulator replays unknown lengths with its workload's
// output_tokens.
//
// Record never blocks and allocates nothing: a request reserves its record
// and its ids with atomic adds in fixed arrays and is dropped and counted
// when they are used up or the window's span has passed. Safe for
// concurrent use; a nil *TrafficRecorder records nothing.
type TrafficRecorder struct {
	cfg     settings.RecordConfig
	win     atomic.Pointer[trafficWindow]
	noted   prometheus.Counter
	dropped [3]prometheus.Counter // window, max_requests, max_blocks
}

// trafficWindow is one window's storage; Restart replaces it whole, so a
// Record still writing into the old one never touches the new one.
type trafficWindow struct {
	start atomic.Int64 // arrival of the first request, Unix ns; 0 before it
	recs  []trafficRec
	nrec  atomic.Int64 // records reserved (may pass len(recs))
	ids   []uint64
	nids  atomic.Int64 // ids reserved (may pass len(ids))
}

type trafficRec struct {
	at     int64 // arrival − window start, ns (≥ 0)
	input  int32 // tokens
	off    int32 // ids[off : off+n]
	n      int32
	ready  atomic.Bool  // the fields above are written
	output atomic.Int32 // output tokens; 0 unknown
}

// TraceSlot is one recorded request's record, to which its output length
// is added when it completes. The zero TraceSlot (a request not recorded)
// ignores it. A plain value; copying it is free.
type TraceSlot struct{ rec *trafficRec }

// SetOutput records the request's output length in tokens (≤ 0 leaves it
// unknown; larger than 2³¹−1 is clamped). Allocation-free; safe for
// concurrent use with WriteTrace.
func (s TraceSlot) SetOutput(tokens int64) {
	if s.rec != nil && tokens > 0 {
		s.rec.output.Store(int32(min(tokens, 1<<31-1)))
	}
}

// NewTrafficRecorder returns a recorder for cfg (validated by
// settings.Config.Validate) with its metrics on reg (nil registers
// nothing). Disabled, it records nothing and holds no window storage.
func NewTrafficRecorder(cfg settings.RecordConfig, reg prometheus.Registerer) *TrafficRecorder {
	r := &TrafficRecorder{cfg: cfg}
	r.noted = prometheus.NewCounter(prometheus.CounterOpts{Name: "trimtab_trace_recorded_requests_total",
		Help: "Requests recorded into the traffic window of /debug/trace (server.admin.record)."})
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trimtab_trace_dropped_requests_total",
		Help: "Requests left out of the traffic window: reason window (arrived after its span), max_requests or max_blocks (its storage was full)."}, []string{"reason"})
	for i, reason := range []string{dropWindow, dropRequests, dropBlocks} {
		r.dropped[i] = dropped.WithLabelValues(reason)
	}
	if reg != nil {
		reg.MustRegister(r.noted, dropped)
	}
	if cfg.Enabled {
		r.win.Store(r.newWindow())
	}
	return r
}

func (r *TrafficRecorder) newWindow() *trafficWindow {
	return &trafficWindow{recs: make([]trafficRec, r.cfg.MaxRequests), ids: make([]uint64, r.cfg.MaxBlocks)}
}

// Enabled reports whether the recorder records.
func (r *TrafficRecorder) Enabled() bool { return r != nil && r.win.Load() != nil }

// Restart discards the window and opens a new one at the next request.
// It allocates the new window's storage; a no-op when disabled.
func (r *TrafficRecorder) Restart() {
	if r.Enabled() {
		r.win.Store(r.newWindow())
	}
}

// Record adds req (its Arrival, Prompt, Model and CacheSalt) to the
// window. The block hashes are chained from the model and the cache salt,
// as the prefix scorer's are, so prompts of different models or tenants
// never share ids. Called once per scheduled request; the returned slot
// takes the request's output length at completion (the zero TraceSlot
// when the request was not recorded).
func (r *TrafficRecorder) Record(req *scheduler.Request) TraceSlot {
	if r == nil {
		return TraceSlot{}
	}
	w := r.win.Load()
	if w == nil {
		return TraceSlot{}
	}
	now := req.Arrival.UnixNano()
	start := w.start.Load()
	if start == 0 && w.start.CompareAndSwap(0, now) {
		start = now
	} else if start == 0 {
		start = w.start.Load()
	}
	at := max(now-start, 0)
	if at >= int64(r.cfg.Window) {
		r.dropped[0].Inc()
		return TraceSlot{}
	}
	i := w.nrec.Add(1) - 1
	if i >= int64(len(w.recs)) {
		r.dropped[1].Inc()
		return TraceSlot{}
	}
	tokens := max(len(req.Prompt)/TraceBytesPerToken, 1)
	n := min((tokens+TraceBlockTokens-1)/TraceBlockTokens, maxTraceIDs)
	off := w.nids.Add(int64(n)) - int64(n)
	rec := &w.recs[i]
	if off+int64(n) > int64(len(w.ids)) {
		// The record slot is spent; an unready record is never written.
		r.dropped[2].Inc()
		return TraceSlot{}
	}
	traceHashes(w.ids[off:off+int64(n)], req.Prompt, req.Model, req.CacheSalt)
	rec.at, rec.input, rec.off, rec.n = at, int32(min(tokens, 1<<31-1)), int32(off), int32(n)
	rec.ready.Store(true)
	r.noted.Inc()
	return TraceSlot{rec: rec}
}

// traceHashes sets out[j] to the chained hash of the prompt's blocks 0…j
// of traceBlockBytes bytes; the last block is whatever remains (partial,
// or empty when the prompt is shorter than its token estimate implies).
func traceHashes(out []uint64, prompt []byte, model, salt string) {
	h := xxhash.Sum64String(model)
	if salt != "" {
		h = traceLink(h, xxhash.Sum64String(salt)+0x9e3779b97f4a7c15)
	}
	for j := range out {
		lo := min(j*traceBlockBytes, len(prompt))
		hi := min(lo+traceBlockBytes, len(prompt))
		h = traceLink(h, xxh3.Hash(prompt[lo:hi]))
		out[j] = h
	}
}

// traceLink chains digest d onto prefix hash h (a bijection of h for a
// fixed d, so prompts that differ before a block differ at it).
func traceLink(h, d uint64) uint64 {
	h = (h ^ d) * 0x9e3779b97f4a7c15
	return h ^ h>>32
}

// TraceSummary says what a written trace holds.
type TraceSummary struct {
	// Requests written; Blocks distinct ids among them.
	Requests, Blocks int
	// Span is the last arrival's offset from the first.
	Span time.Duration
}

// WriteTrace writes the window's recorded requests to out as Mooncake
// JSONL, one object per line in arrival order: {"timestamp": ms from the
// window's first request, "input_length": tokens, "output_length": tokens
// (0: unknown), "hash_ids": [ids]}, ids renumbered from 0 in order of first appearance.
// Requests still being recorded are left out. It reads a snapshot and
// allocates; call it off the request path.
func (r *TrafficRecorder) WriteTrace(out io.Writer) (TraceSummary, error) {
	var sum TraceSummary
	if !r.Enabled() {
		return sum, nil
	}
	w := r.win.Load()
	n := min(w.nrec.Load(), int64(len(w.recs)))
	recs := make([]*trafficRec, 0, n)
	for i := range n {
		if rec := &w.recs[i]; rec.ready.Load() {
			recs = append(recs, rec)
		}
	}
	slices.SortStableFunc(recs, func(a, b *trafficRec) int { return cmp.Compare(a.at, b.at) })
	ids := make(map[uint64]uint32)
	bw := bufio.NewWriter(out)
	var line []byte
	for _, rec := range recs {
		line = append(line[:0], `{"timestamp": `...)
		line = strconv.AppendInt(line, rec.at/int64(time.Millisecond), 10)
		line = append(line, `, "input_length": `...)
		line = strconv.AppendInt(line, int64(rec.input), 10)
		line = append(line, `, "output_length": `...)
		line = strconv.AppendInt(line, int64(rec.output.Load()), 10)
		line = append(line, `, "hash_ids": [`...)
		for k, h := range w.ids[rec.off : rec.off+rec.n] {
			id, ok := ids[h]
			if !ok {
				id = uint32(len(ids))
				ids[h] = id
			}
			if k > 0 {
				line = append(line, ", "...)
			}
			line = strconv.AppendUint(line, uint64(id), 10)
		}
		line = append(line, "]}\n"...)
		if _, err := bw.Write(line); err != nil {
			return sum, err
		}
	}
	sum.Requests, sum.Blocks = len(recs), len(ids)
	if len(recs) > 0 {
		sum.Span = time.Duration(recs[len(recs)-1].at - recs[0].at)
	}
	return sum, bw.Flush()
}
