package scenario

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// reqSpec is one synthesised request before it is rendered to bytes.
type Request struct {
	Segs      []Segment // prompt, in order
	Out       Segment   // the output the server will generate
	SessionID string
	Arrival   time.Duration // trace only
	// Agentic workloads: the session key derived without an id (0: none),
	// the prompt the router sees when it is not segs (nil: segs), and
	// whether the request continues a session.
	SessionKey   uint64
	RouterSegs   []Segment
	Continuation bool
	Agent        uint64 // the agent session (0: not agentic)
}

func (r *Request) PromptTokens() int {
	n := 0
	for _, s := range r.Segs {
		n += s.Tokens
	}
	return n
}

// generator produces requests. client is the closed-loop client issuing
// it, or the arrival index in open-loop mode. Generators are deterministic
// given rng and the call sequence.
type Generator interface {
	Next(rng *rand.Rand, client int, r *Request)
}

func NewGenerator(s *Scenario, w *Workload, seed uint64, traceOverride string) (Generator, error) {
	switch w.Kind {
	case KindSharedPrefix:
		return &sharedPrefixGen{w: w, seed: seed}, nil
	case KindChat:
		return &chatGen{w: w, seed: seed}, nil
	case KindUniform:
		return &uniformGen{w: w, seed: seed}, nil
	case KindAgentic:
		return &agenticGen{w: w, seed: seed}, nil
	case KindTrace:
		entries, err := s.LoadTrace(traceOverride)
		if err != nil {
			return nil, err
		}
		return &TraceGen{w: w, seed: seed, entries: entries}, nil
	}
	return nil, fmt.Errorf("workload.kind: %q unknown", w.Kind)
}

// jitter draws mean·[1−j, 1+j], at least 1.
func jitter(rng *rand.Rand, mean int, j float64) int {
	if j == 0 {
		return max(1, mean)
	}
	v := float64(mean) * (1 - j + 2*j*rng.Float64())
	return max(1, int(v+0.5))
}

func capPrompt(w *Workload, r *Request) {
	if w.MaxPromptTokens <= 0 {
		return
	}
	left := w.MaxPromptTokens
	for i := range r.Segs {
		if r.Segs[i].Tokens >= left {
			r.Segs[i].Tokens = left
			r.Segs = r.Segs[:i+1]
			return
		}
		left -= r.Segs[i].Tokens
	}
}

// sharedPrefixGen: groups of prompts sharing a system prompt; optionally
// a hot group taking a fixed fraction of the traffic.
type sharedPrefixGen struct {
	w    *Workload
	seed uint64
	n    uint64
}

func (g *sharedPrefixGen) Next(rng *rand.Rand, client int, r *Request) {
	w := g.w
	g.n++
	r.Segs = r.Segs[:0]
	var group uint64
	sys := w.SystemTokens
	var hot bool
	if w.Order == OrderGroupMajor {
		i := g.n - 1
		ppg := uint64(w.PromptsPerGroup)
		group = i / ppg % uint64(w.Groups)
		if sys > 0 {
			r.Segs = append(r.Segs, Segment{MixKey(g.seed, 1, group), sys})
		}
		g.question(rng, group, i%ppg, r)
		return
	}
	if w.Tenancy == TenancyClient {
		// The golden-ratio sequence frac(c·φ) spreads the hot tenants evenly
		// over client indexes, so any number of clients has close to
		// hot_fraction of them hot.
		_, f := math.Modf(float64(client) * 0.6180339887498949)
		hot = f < w.HotFraction
		group = uint64(client % w.Groups)
	} else if hot = w.HotFraction > 0 && rng.Float64() < w.HotFraction; !hot {
		group = uint64(rng.IntN(w.Groups))
	}
	if hot {
		group = 1<<62 + uint64(w.HotID) // the hot group
		sys = w.HotSystemTokens
	}
	q := uint64(rng.IntN(w.PromptsPerGroup))
	if sys > 0 {
		r.Segs = append(r.Segs, Segment{MixKey(g.seed, 1, group), sys})
	}
	g.question(rng, group, q, r)
}

// question appends question q of group to r and draws the output.
func (g *sharedPrefixGen) question(rng *rand.Rand, group, q uint64, r *Request) {
	w := g.w
	// The question's length is a function of the question so a repeated
	// question is a repeated prompt.
	qrng := rand.New(rand.NewPCG(MixKey(g.seed, 2, group, q), 0))
	r.Segs = append(r.Segs, Segment{MixKey(g.seed, 3, group, q), jitter(qrng, w.QuestionTokens, w.Jitter)})
	r.Out = Segment{MixKey(g.seed, 4, g.n), jitter(rng, w.OutputTokens, w.Jitter)}
	r.SessionID = ""
	capPrompt(w, r)
}

// chatGen: multi-turn sessions. Each client (or, open loop, each arrival
// slot) runs sessions of Turns turns; turn t's prompt is the system prompt,
// then every earlier question and answer, then the new question.
type chatGen struct {
	w        *Workload
	seed     uint64
	sessions []chatSession // by client
	nextID   uint64
}

type chatSession struct {
	id   uint64
	sid  string
	turn int
	hist []Segment // system prompt + earlier questions and answers
}

func (g *chatGen) Next(rng *rand.Rand, client int, r *Request) {
	w := g.w
	for len(g.sessions) <= client {
		g.sessions = append(g.sessions, chatSession{turn: w.Turns})
	}
	cs := &g.sessions[client]
	if cs.turn >= w.Turns {
		g.nextID++
		cs.id, cs.turn = g.nextID, 0
		cs.sid = "s-" + strconv.FormatUint(cs.id, 10)
		cs.hist = cs.hist[:0]
		if w.SystemTokens > 0 {
			group := uint64(rng.IntN(w.Groups))
			cs.hist = append(cs.hist, Segment{MixKey(g.seed, 11, group), w.SystemTokens})
		}
	}
	q := Segment{MixKey(g.seed, 12, cs.id, uint64(cs.turn)), jitter(rng, w.QuestionTokens, w.Jitter)}
	a := Segment{MixKey(g.seed, 13, cs.id, uint64(cs.turn)), jitter(rng, w.OutputTokens, w.Jitter)}
	r.Segs = append(r.Segs[:0], cs.hist...)
	r.Segs = append(r.Segs, q)
	r.Out = a
	r.SessionID = cs.sid
	cs.hist = append(cs.hist, q, a)
	cs.turn++
	capPrompt(w, r)
}

// uniformGen: unique prompts, nothing shared.
type uniformGen struct {
	w    *Workload
	seed uint64
	n    uint64
}

func (g *uniformGen) Next(rng *rand.Rand, _ int, r *Request) {
	g.n++
	r.Segs = append(r.Segs[:0], Segment{MixKey(g.seed, 21, g.n), jitter(rng, g.w.QuestionTokens, g.w.Jitter)})
	r.Out = Segment{MixKey(g.seed, 22, g.n), jitter(rng, g.w.OutputTokens, g.w.Jitter)}
	r.SessionID = ""
	capPrompt(g.w, r)
}

// TraceEntry is one line of a Mooncake-format trace.
type TraceEntry struct {
	Timestamp    int64    `json:"timestamp"` // ms from the start
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// ParseTrace reads Mooncake JSONL: one object per line with timestamp
// (ms), input_length, output_length and hash_ids. Blank lines are
// skipped; max > 0 stops after max entries. Entries must be in timestamp
// order. An output_length of 0 means unknown (a trace recorded by
// `trimtab serve`, whose router never counts output tokens); the replay
// uses the workload's output_tokens for it.
func ParseTrace(sc *bufio.Scanner, max int) ([]TraceEntry, error) {
	var out []TraceEntry
	line := 0
	var last int64
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(trimSpace(b)) == 0 {
			continue
		}
		var e TraceEntry
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		if e.InputLength < 1 || e.OutputLength < 0 || e.Timestamp < 0 {
			return nil, fmt.Errorf("trace line %d: input_length must be ≥ 1, output_length ≥ 0 (0: unknown), timestamp ≥ 0", line)
		}
		if e.Timestamp < last {
			return nil, fmt.Errorf("trace line %d: timestamp %d before %d", line, e.Timestamp, last)
		}
		last = e.Timestamp
		out = append(out, e)
		if max > 0 && len(out) >= max {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("trace: no entries")
	}
	return out, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// traceGen replays trace entries in order; the i-th call returns entry i.
// Hash id h becomes a segment keyed by the run seed and h: within a run
// equal ids mean equal bytes, and another seed gives the same sharing
// structure in other bytes, so the seeds of a trace scenario sample the
// routers' hash-dependent state (which index shard and slot a block
// lands in, and so which entries a full shard evicts) instead of
// replaying one draw of it. The last block is partial when input_length
// is not a multiple.
type TraceGen struct {
	w       *Workload
	seed    uint64
	entries []TraceEntry
	i       int
}

func (g *TraceGen) Next(_ *rand.Rand, _ int, r *Request) {
	e := &g.entries[g.i]
	g.i++
	r.Segs = r.Segs[:0]
	left := e.InputLength
	per := g.w.TraceTokensPerID
	for _, h := range e.HashIDs {
		if left <= 0 {
			break
		}
		n := min(per, left)
		r.Segs = append(r.Segs, Segment{MixKey(g.seed, 31, h), n})
		left -= n
	}
	if left > 0 { // more tokens than ids cover: a unique tail
		r.Segs = append(r.Segs, Segment{MixKey(g.seed, 32, uint64(g.i)), left})
	}
	out := e.OutputLength
	if out == 0 { // unknown: LoadTrace made sure output_tokens is set
		out = g.w.OutputTokens
	}
	r.Out = Segment{MixKey(g.seed, 33, uint64(g.i)), out}
	r.Arrival = time.Duration(e.Timestamp) * time.Millisecond
	r.SessionID = ""
	capPrompt(g.w, r)
}

// Remaining reports how many entries are left to replay.
func (g *TraceGen) Remaining() int { return len(g.entries) - g.i }

// PeekArrival returns the next entry's arrival offset in trace time
// (false when none is left).
func (g *TraceGen) PeekArrival() (time.Duration, bool) {
	if g.i >= len(g.entries) {
		return 0, false
	}
	return time.Duration(g.entries[g.i].Timestamp) * time.Millisecond, true
}
