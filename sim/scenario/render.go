package scenario

import (
	"cmp"
	"math/rand/v2"
	"time"
)

// Rendered is one request of a scenario as bytes: what `trimtab bench`
// sends to a real server for the request the simulator would issue.
type Rendered struct {
	// Prompt is the prompt text: the request's segments in order, 4 bytes
	// (BytesPerToken) per token, so two requests share exactly the leading
	// bytes their segments share.
	Prompt []byte
	// OutputTokens is the output length to ask for (max_tokens).
	OutputTokens int
	// SessionID is the chat session ("" outside chat workloads).
	SessionID string
	// Arrival is a trace entry's arrival offset in trace time (0 unless
	// the load mode is trace).
	Arrival time.Duration
	// Agent describes an agentic workload's turn (nil for other kinds).
	Agent *AgentTurn
}

// AgentTurn is one turn of an agent session (workload kind agentic): how
// Prompt splits into the scaffold, the task and the earlier turns, so a
// client can send it in an agent API's own shape.
type AgentTurn struct {
	// API is the workload's agent API: AgentAPIMessages (the client
	// resends the conversation) or AgentAPIResponses (a continuation
	// names the previous response and sends the new tool result).
	API string
	// Session identifies the agent session: the same on each of its
	// turns, distinct between the sessions of a renderer (each phase
	// starts sessions of its own).
	Session uint64
	// Turn counts the session's earlier turns (0: the session's first
	// request; > 0: a continuation).
	Turn int
	// Parts are the byte lengths of Prompt's parts in order: the scaffold
	// (system prompt and tool definitions), the task, then each earlier
	// turn's tool call and tool result (2 + 2·Turn parts summing to
	// len(Prompt); fewer, the last one cut, when workload.max_prompt_tokens
	// cut the prompt).
	Parts []int
	// Pause is the tool call this turn's answer starts: a closed-loop
	// client waits this long after the response before its next request,
	// on top of Think (0 after a session's last turn).
	Pause time.Duration
}

// Renderer renders a scenario's requests with the simulator's own
// generators and seeds, so `trimtab sim` and `trimtab bench` draw the same
// workload. Salt is mixed into every segment's key: a run with another
// salt gets prompts of the same lengths and the same sharing structure
// (which requests share which leading segments) but different bytes, so it
// cannot hit a cache an earlier run warmed. Salt 0 renders exactly the
// simulator's bytes. A Renderer is not safe for concurrent use.
type Renderer struct {
	sc    *Scenario
	gens  []Generator
	wrng  *rand.Rand
	arng  *rand.Rand
	salt  uint64
	spec  Request
	openN int
}

// NewRenderer returns a renderer for sc's phases with the run seed seed
// (the seed RunConfig.Seed would be) and a trace override (see
// RunConfig.TracePath).
func NewRenderer(sc *Scenario, seed, salt uint64, tracePath string) (*Renderer, error) {
	r := &Renderer{sc: sc, salt: salt,
		wrng: rand.New(rand.NewPCG(seed, 0x77)), arng: rand.New(rand.NewPCG(seed, 0xa7))}
	for i := range sc.Phases {
		g, err := NewGenerator(sc, sc.Phases[i].Work(), seed, tracePath)
		if err != nil {
			return nil, err
		}
		r.gens = append(r.gens, g)
	}
	return r, nil
}

// Next renders phase's next request for closed-loop client (−1 in open
// loop and trace replay, which cycle over the simulator's session slots).
func (r *Renderer) Next(phase, client int) Rendered {
	slot := client
	if client < 0 {
		slot = r.openN % OpenChatSlots
		r.openN++
	}
	g := r.gens[phase]
	if r.sc.Load.Mode == ModeTrace {
		g = r.gens[0]
	}
	g.Next(r.wrng, slot, &r.spec)
	var buf []byte
	for _, s := range r.spec.Segs {
		if r.salt != 0 {
			s.Key = MixKey(r.salt, s.Key)
		}
		buf = AppendSegment(buf, s)
	}
	out := Rendered{Prompt: buf, OutputTokens: r.spec.Out.Tokens, SessionID: r.spec.SessionID, Arrival: r.spec.Arrival}
	if ag, ok := g.(*agenticGen); ok {
		t := &AgentTurn{API: cmp.Or(ag.w.API, AgentAPIMessages), Session: uint64(phase)<<48 | r.spec.Agent, Turn: ag.agents[slot].turn - 1,
			Pause: ag.ThinkTime(slot)}
		for _, s := range r.spec.Segs {
			t.Parts = append(t.Parts, s.Tokens*BytesPerToken)
		}
		out.Agent = t
	}
	return out
}

// Remaining reports how many trace entries are left to render (−1 when
// the load mode is not trace).
func (r *Renderer) Remaining() int {
	if tg, ok := r.gens[0].(*TraceGen); ok && r.sc.Load.Mode == ModeTrace {
		return tg.Remaining()
	}
	return -1
}

// PeekArrival returns the next trace entry's arrival offset in trace time
// (false when none is left or the mode is not trace).
func (r *Renderer) PeekArrival() (time.Duration, bool) {
	tg, ok := r.gens[0].(*TraceGen)
	if !ok || r.sc.Load.Mode != ModeTrace {
		return 0, false
	}
	return tg.PeekArrival()
}

// Think draws a closed-loop client's think time (exponential with mean
// load.think_time; 0 when that is 0), from the simulator's arrival stream.
func (r *Renderer) Think() time.Duration {
	if m := r.sc.Load.ThinkTime; m > 0 {
		return time.Duration(r.arng.ExpFloat64() * float64(m))
	}
	return 0
}

// Gap draws an open-loop inter-arrival gap at rate req/s (exponential),
// from the simulator's arrival stream.
func (r *Renderer) Gap(rate float64) time.Duration {
	return time.Duration(r.arng.ExpFloat64() / rate * float64(time.Second))
}

// HeadlineLevel returns the scenario's headline level (the highest when
// none is set).
func (s *Scenario) HeadlineLevel() float64 {
	if s.Headline != 0 {
		return s.Headline
	}
	h := 0.0
	for _, l := range s.Load.Levels {
		h = max(h, l)
	}
	return h
}
