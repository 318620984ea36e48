// Package engine models one vLLM-like inference server on virtual time:
// a paged KV cache of fixed-size blocks with automatic prefix caching
// (blocks stay reusable after their sequence finishes until LRU eviction),
// continuous batching with a sequence limit and a per-step token budget
// (chunked prefill), a FIFO waiting queue, and preemption by recompute
// when the KV cache runs out.
//
// The engine is a passive state machine: the caller adds sequences, starts
// a step (which fixes the batch and returns its duration) and finishes it
// at the virtual time the step ends. It never reads a clock, so the
// simulator drives it on virtual time and the fake server on a scaled wall
// clock. An Engine is not safe for concurrent use.
package engine

import (
	"errors"
	"fmt"
	"time"
)

// EventKind says what happened to a sequence at the end of a step.
type EventKind uint8

const (
	// EventFirstToken: the sequence produced its first output token.
	EventFirstToken EventKind = iota
	// EventToken: the sequence produced a further output token (only when
	// the engine was built WithTokenEvents).
	EventToken
	// EventFinished: the sequence produced its last token and left the
	// engine; its blocks are released (hashed ones stay cached).
	EventFinished
)

// Event is one thing that happened at the end of a step.
type Event struct {
	Kind EventKind
	Seq  *Seq
}

// ErrTooLong is returned by Add for a sequence that can never fit in the
// KV cache (prompt + output blocks > num_blocks).
var ErrTooLong = errors.New("engine: sequence longer than the KV cache")

type seqState uint8

const (
	stateNew seqState = iota
	stateWaiting
	stateRunning
	stateDone
)

// Seq is one request inside the engine. The caller fills the exported
// input fields, keeps the Seq alive until it finished or was aborted, and
// reads the result fields after the corresponding events. A Seq may be
// reused after Reset.
type Seq struct {
	// ID is the caller's identifier; the engine does not interpret it.
	ID uint64
	// Hashes are the chained hashes of the sequence's full BlockSize-token
	// blocks, prompt first, optionally followed by the blocks of the
	// output the sequence will generate (so a later turn that repeats the
	// answer hits the cache). Block i is cached under Hashes[i] once
	// computed. Read-only while the sequence is in the engine.
	Hashes []uint64
	// PromptTokens ≥ 1 and OutputTokens ≥ 1 are the request's lengths.
	PromptTokens, OutputTokens int
	// LoRA is the adapter the sequence runs with ("" for the base model).
	LoRA string
	// Data is free for the caller.
	Data any

	// Generated is the number of output tokens produced so far.
	Generated int
	// CachedTokens is the number of prompt tokens found in the prefix
	// cache when the sequence was first admitted.
	CachedTokens int
	// Preemptions counts how often the sequence was preempted.
	Preemptions int
	// FirstTokenAt and FinishedAt are the virtual times of the events.
	FirstTokenAt, FinishedAt time.Duration

	state    seqState
	admitted bool
	computed int     // tokens whose KV is computed
	hashed   int     // leading blocks already registered in the cache
	blocks   []int32 // block table
}

// Reset clears the sequence for reuse, keeping its buffers.
func (s *Seq) Reset() {
	blocks := s.blocks[:0]
	*s = Seq{Hashes: s.Hashes[:0], blocks: blocks}
}

// Active reports whether the sequence is waiting or running in an engine.
func (s *Seq) Active() bool { return s.state == stateWaiting || s.state == stateRunning }

func (s *Seq) tokens() int { return s.PromptTokens + s.Generated }

type block struct {
	hash       uint64
	hasHash    bool
	ref        int32
	prev, next int32 // free-list links, -1 terminated
}

type scheduled struct {
	s *Seq
	n int
}

// Stats is the engine's observable state and its cumulative counters.
type Stats struct {
	// Waiting and Running are the current queue and batch sizes.
	Waiting, Running int
	// KVUtil is the fraction of blocks in use by sequences, in [0,1]
	// (cached blocks nobody uses count as free, as in vLLM).
	KVUtil float64
	// BlockSize and NumBlocks echo the cache configuration.
	BlockSize, NumBlocks int
	// PrefixQueries and PrefixHits are prompt tokens looked up in and
	// found in the prefix cache, at first admission.
	PrefixQueries, PrefixHits int64
	// PromptTokens and GenerationTokens are tokens processed (prefill,
	// including recompute) and produced.
	PromptTokens, GenerationTokens int64
	// Preemptions and Finished count those events.
	Preemptions, Finished int64
	// Steps counts finished steps; BusyTime sums their durations.
	Steps    int64
	BusyTime time.Duration
	// AdapterLoads counts adapters loaded into a GPU slot (from the CPU
	// cache or from disk), AdapterDiskLoads those loaded from disk, and
	// AdapterEvictions adapters moved out of a GPU slot to make room.
	AdapterLoads, AdapterDiskLoads, AdapterEvictions int64
}

// Engine is one simulated server.
type Engine struct {
	cfg         Config
	tokenEvents bool

	blocks             []block
	freeHead, freeTail int32
	free               int
	cache              map[uint64]int32

	waiting deque
	running []*Seq
	batch   []scheduled
	busy    bool
	stepDur time.Duration

	adapters  []adapter // the CPU cache, GPU-resident adapters included
	loras     []string  // the batch's distinct adapters, while forming it
	skipped   []*Seq    // waiting sequences passed over for lack of a slot
	loraClock int64

	st Stats
}

// Option configures an Engine.
type Option func(*Engine)

// WithTokenEvents makes FinishStep report every output token, for
// streaming servers. Off by default (the simulator only needs the first
// and the last).
func WithTokenEvents() Option { return func(e *Engine) { e.tokenEvents = true } }

// New builds an idle engine with an empty cache.
func New(cfg Config, opts ...Option) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:    cfg,
		blocks: make([]block, cfg.NumBlocks),
		cache:  make(map[uint64]int32, cfg.NumBlocks),
	}
	for _, o := range opts {
		o(e)
	}
	// All blocks start on the free list, in index order.
	for i := range e.blocks {
		e.blocks[i].prev = int32(i - 1)
		e.blocks[i].next = int32(i + 1)
	}
	e.blocks[len(e.blocks)-1].next = -1
	e.freeHead, e.freeTail, e.free = 0, int32(len(e.blocks)-1), len(e.blocks)
	e.st.BlockSize, e.st.NumBlocks = cfg.BlockSize, cfg.NumBlocks
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Busy reports whether a step is in progress (between StartStep and
// FinishStep).
func (e *Engine) Busy() bool { return e.busy }

// Idle reports whether the engine has nothing to do.
func (e *Engine) Idle() bool { return len(e.running) == 0 && e.waiting.len() == 0 }

// Stats returns the current state and counters.
func (e *Engine) Stats() Stats {
	st := e.st
	st.Waiting, st.Running = e.waiting.len(), len(e.running)
	st.KVUtil = float64(e.cfg.NumBlocks-e.free) / float64(e.cfg.NumBlocks)
	return st
}

// Add queues s at the tail of the waiting queue. It fails for a sequence
// without prompt or output tokens, one already in an engine, and one that
// could never fit in the KV cache (ErrTooLong).
func (e *Engine) Add(s *Seq) error {
	if s.PromptTokens < 1 || s.OutputTokens < 1 {
		return fmt.Errorf("engine: sequence %d: prompt %d and output %d tokens, want ≥ 1", s.ID, s.PromptTokens, s.OutputTokens)
	}
	if s.state == stateWaiting || s.state == stateRunning {
		return fmt.Errorf("engine: sequence %d already queued", s.ID)
	}
	if need := ceilDiv(s.PromptTokens+s.OutputTokens, e.cfg.BlockSize); need > e.cfg.NumBlocks {
		return fmt.Errorf("sequence %d needs %d blocks of %d: %w", s.ID, need, e.cfg.NumBlocks, ErrTooLong)
	}
	s.state = stateWaiting
	e.waiting.pushBack(s)
	return nil
}

// Abort removes s from the engine (a client gave up) and releases its
// blocks. If s is part of the step in progress, that step ignores it.
// Aborting a sequence that is not in the engine does nothing.
func (e *Engine) Abort(s *Seq) {
	switch s.state {
	case stateWaiting:
		e.waiting.remove(s)
		e.releaseBlocks(s)
	case stateRunning:
		for i, r := range e.running {
			if r == s {
				e.running = append(e.running[:i], e.running[i+1:]...)
				break
			}
		}
		e.releaseBlocks(s)
	default:
		return
	}
	s.state = stateDone
}

// StartStep forms the next batch — running sequences first, in admission
// order, each taking its next chunk (a decode is one token), then waiting
// sequences in FIFO order while the sequence limit, the token budget and
// the KV cache allow — and returns the step's duration. When a running
// sequence cannot get a block, the most recently admitted running
// sequence is preempted (recompute: its blocks are released and it goes
// back to the head of the queue), and no new sequence is admitted in that
// step. ok is false when there is nothing to run; the engine then stays
// idle. With adapters (MaxLoRAs > 0) a waiting sequence whose adapter
// would exceed MaxLoRAs distinct adapters in the running set is passed
// over, keeping its place, and the step first loads the running set's
// adapters that are not on the GPU (LoRALoadCPU or LoRALoadDisk each).
// StartStep panics if a step is already in progress.
func (e *Engine) StartStep() (d time.Duration, ok bool) {
	if e.busy {
		panic("engine: StartStep during a step")
	}
	budget := e.cfg.MaxBatchedTokens
	e.batch = e.batch[:0]
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(s.tokens()-s.computed, budget)
		for !e.ensure(s, s.computed+n) {
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == s {
				s = nil
				break
			}
		}
		if s == nil {
			break
		}
		e.batch = append(e.batch, scheduled{s, n})
		budget -= n
	}
	if e.loraOn() {
		e.batchLoRAs()
	}
	for !preempted && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs && e.waiting.len() > 0 {
		s := e.waiting.front()
		if e.loraOn() && !e.loraFits(s) {
			e.skipped = append(e.skipped, e.waiting.popFront())
			continue
		}
		if s.computed == 0 && len(s.blocks) == 0 {
			e.lookup(s)
		}
		n := min(s.tokens()-s.computed, budget)
		if !e.ensure(s, s.computed+n) {
			// Not enough KV for even this chunk: leave it at the head.
			e.releaseBlocks(s)
			break
		}
		if !s.admitted {
			s.admitted = true
			e.st.PrefixQueries += int64(s.PromptTokens)
			e.st.PrefixHits += int64(s.CachedTokens)
		}
		e.waiting.popFront()
		s.state = stateRunning
		e.running = append(e.running, s)
		e.batch = append(e.batch, scheduled{s, n})
		budget -= n
		if e.loraOn() {
			e.addBatchLoRA(s.LoRA)
		}
	}
	for i := len(e.skipped) - 1; i >= 0; i-- {
		e.waiting.pushFront(e.skipped[i])
	}
	clear(e.skipped)
	e.skipped = e.skipped[:0]
	if len(e.batch) == 0 {
		return 0, false
	}
	var load time.Duration
	if e.loraOn() {
		load = time.Duration(e.loadLoRAs())
	}
	var prefill, decodes, ctx int
	var pairs float64 // prefill (token, earlier token) pairs
	for _, b := range e.batch {
		if b.n == 1 && b.s.Generated > 0 {
			decodes++
			ctx += b.s.computed
		} else {
			prefill += b.n
			// Positions c … c+n−1 attend to c … c+n−1 earlier tokens.
			c, n := float64(b.s.computed), float64(b.n)
			pairs += n*c + n*(n-1)/2
		}
	}
	d = e.cfg.StepFixed +
		time.Duration(prefill)*e.cfg.StepPerPrefillToken +
		time.Duration(pairs/1000*float64(e.cfg.PrefillAttentionPer1k)) +
		time.Duration(decodes)*e.cfg.StepPerDecodeSeq +
		time.Duration(ctx)*e.cfg.StepPerContextToken + load
	e.st.PromptTokens += int64(prefill)
	e.busy, e.stepDur = true, d
	return d, true
}

// FinishStep applies the step in progress at virtual time now: computed
// tokens are recorded, newly full blocks enter the prefix cache, and
// sequences that completed a chunk produce a token. emit is called for
// every event, in batch order; it must not call back into the engine.
func (e *Engine) FinishStep(now time.Duration, emit func(Event)) {
	if !e.busy {
		panic("engine: FinishStep without a step")
	}
	e.busy = false
	e.st.Steps++
	e.st.BusyTime += e.stepDur
	finished := 0
	for _, b := range e.batch {
		s := b.s
		if s.state != stateRunning {
			continue // aborted or preempted during the step
		}
		s.computed += b.n
		e.register(s)
		if s.computed < s.tokens() {
			continue // a prefill chunk that did not reach the end
		}
		s.Generated++
		e.st.GenerationTokens++
		switch {
		case s.Generated == 1:
			s.FirstTokenAt = now
			emit(Event{EventFirstToken, s})
		case e.tokenEvents && s.Generated < s.OutputTokens:
			emit(Event{EventToken, s})
		}
		if s.Generated >= s.OutputTokens {
			s.FinishedAt = now
			s.state = stateDone
			e.releaseBlocks(s)
			e.st.Finished++
			finished++
			emit(Event{EventFinished, s})
		}
	}
	if finished > 0 {
		j := 0
		for _, s := range e.running {
			if s.state == stateRunning {
				e.running[j] = s
				j++
			}
		}
		clear(e.running[j:])
		e.running = e.running[:j]
	}
	clear(e.batch)
	e.batch = e.batch[:0]
}
