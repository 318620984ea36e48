package scenario

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// KindAgentic is the agentic workload kind: sessions of tool calls on a
// few long scaffolds (see AgenticWorkload).
const KindAgentic = "agentic"

// Agent APIs of an agentic workload (AgenticWorkload.API).
const (
	// AgentAPIMessages resends the whole conversation every turn
	// (Anthropic Messages, chat completions): the router sees what the
	// engine prefills.
	AgentAPIMessages = "messages"
	// AgentAPIResponses continues by previous_response_id (OpenAI
	// Responses with stored responses): the server rebuilds the history,
	// so the engine prefills the whole conversation while the router sees
	// only the scaffold and the turn's new items.
	AgentAPIResponses = "responses"
)

// Session keys of an agentic workload (AgenticWorkload.SessionKeys).
const (
	// SessionKeysHeader: every request carries its session's id, as a
	// client sending x-session-id.
	SessionKeysHeader = "header"
	// SessionKeysLineage: no id; the request carries the key the proxy
	// derives from the conversation's lineage (scheduler.LineageKey of its
	// scaffold and first turn, which the proxy passes down a Responses
	// previous_response_id chain).
	SessionKeysLineage = "lineage"
	// SessionKeysNone: no id and no derived key except what a proxy
	// keying by previous_response_id would give: every continuation the
	// id of the response before it, a new session each turn.
	SessionKeysNone = "none"
)

// AgenticWorkload holds the agentic kind's fields of a Workload. An agent
// session starts on one of Groups scaffolds (system prompt and tool
// definitions, SystemTokens long) with a task of QuestionTokens; each turn
// the model answers with a tool call (OutputTokens), the tool runs for
// ToolLatency (the client's pause) and its result (ToolOutputTokens) is
// the next turn's new input, so the context grows every turn. Closed-loop
// clients form teams of 1 + FanOut: the lead runs sessions of Turns turns,
// the others run sub-agents of SubAgentTurns turns in parallel with it on
// the team's scaffold, each with a task of its own.
type AgenticWorkload struct {
	// ToolOutputTokens is the mean length of a tool result (≥ 1).
	ToolOutputTokens int `yaml:"tool_output_tokens"`
	// ToolLatency is the mean of a tool call's duration, the pause before
	// the next turn (exponentially distributed; 0: none).
	ToolLatency time.Duration `yaml:"tool_latency"`
	// FanOut is the number of sub-agents beside each lead (≥ 0).
	FanOut int `yaml:"fan_out"`
	// SubAgentTurns is the turns of a sub-agent session (default: half of
	// Turns, at least 1).
	SubAgentTurns int `yaml:"sub_agent_turns"`
	// API is messages (default) or responses.
	API string `yaml:"api"`
	// SessionKeys is header (default), lineage or none.
	SessionKeys string `yaml:"session_keys"`
}

func (w *Workload) validateAgentic(bad func(string, ...any)) {
	if w.Groups < 1 {
		bad("groups: must be ≥ 1")
	}
	if w.SystemTokens < 1 {
		bad("system_tokens: an agentic workload needs a scaffold, ≥ 1")
	}
	if w.Turns < 1 {
		bad("turns: must be ≥ 1")
	}
	if w.ToolOutputTokens < 1 {
		bad("tool_output_tokens: must be ≥ 1")
	}
	if w.ToolLatency < 0 {
		bad("tool_latency: must be ≥ 0")
	}
	if w.FanOut < 0 || w.FanOut > 64 {
		bad("fan_out: must be in 0…64")
	}
	if w.SubAgentTurns < 0 {
		bad("sub_agent_turns: must be ≥ 0 (0: half of turns)")
	}
	switch w.API {
	case "", AgentAPIMessages, AgentAPIResponses:
	default:
		bad("api: %q, want %s or %s", w.API, AgentAPIMessages, AgentAPIResponses)
	}
	switch w.SessionKeys {
	case "", SessionKeysHeader, SessionKeysLineage, SessionKeysNone:
	default:
		bad("session_keys: %q, want %s, %s or %s", w.SessionKeys, SessionKeysHeader, SessionKeysLineage, SessionKeysNone)
	}
}

// agenticGen generates agentic sessions, one per client slot at a time.
type agenticGen struct {
	w      *Workload
	seed   uint64
	agents []agentState // by client
	nextID uint64
}

type agentState struct {
	id    uint64
	sid   string
	turn  int
	turns int
	// hist is the conversation the engine prefills: scaffold, task, then
	// every earlier tool call and tool result.
	hist  []Segment
	root  uint64        // the lineage key (scaffold + task)
	prev  uint64        // the previous turn's response id (none mode)
	think time.Duration // the pending tool call's duration
}

func (g *agenticGen) Next(rng *rand.Rand, client int, r *Request) {
	w := g.w
	for len(g.agents) <= client {
		g.agents = append(g.agents, agentState{})
	}
	a := &g.agents[client]
	team, member := client, 0
	if client >= 0 {
		team, member = client/(1+w.FanOut), client%(1+w.FanOut)
	}
	if a.turn >= a.turns {
		g.nextID++
		a.id, a.turn = g.nextID, 0
		a.turns = w.Turns
		if member > 0 {
			a.turns = w.SubAgentTurns
			if a.turns == 0 {
				a.turns = max(1, w.Turns/2)
			}
		}
		a.sid = "agent-" + strconv.FormatUint(a.id, 10)
		scaffold := Segment{MixKey(g.seed, 41, uint64(team%w.Groups)), w.SystemTokens}
		task := Segment{MixKey(g.seed, 42, a.id), jitter(rng, w.QuestionTokens, w.Jitter)}
		a.hist = append(a.hist[:0], scaffold, task)
		a.root = scheduler.LineageKey(AppendSegment(AppendSegment(nil, scaffold), task))
		a.prev = 0
	}
	r.Segs = append(r.Segs[:0], a.hist...)
	r.RouterSegs = r.RouterSegs[:0]
	if w.API == AgentAPIResponses && a.turn > 0 {
		// The router sees the scaffold and the new tool result only.
		r.RouterSegs = append(r.RouterSegs, a.hist[0], a.hist[len(a.hist)-1])
	}
	call := Segment{MixKey(g.seed, 43, a.id, uint64(a.turn)), jitter(rng, w.OutputTokens, w.Jitter)}
	result := Segment{MixKey(g.seed, 44, a.id, uint64(a.turn)), jitter(rng, w.ToolOutputTokens, w.Jitter)}
	r.Out = call
	r.Continuation = a.turn > 0
	r.Agent = a.id
	r.SessionID, r.SessionKey = "", 0
	switch w.SessionKeys {
	case "", SessionKeysHeader:
		r.SessionID = a.sid
	case SessionKeysLineage:
		r.SessionKey = a.root
	case SessionKeysNone:
		if w.API == AgentAPIResponses {
			r.SessionKey = a.prev // 0 on the first turn: no key
		}
	}
	a.prev = MixKey(g.seed, 45, a.id, uint64(a.turn)) | 1
	a.hist = append(a.hist, call, result)
	a.turn++
	a.think = 0
	if w.ToolLatency > 0 && a.turn < a.turns {
		a.think = time.Duration(rng.ExpFloat64() * float64(w.ToolLatency))
	}
	capPrompt(w, r)
}

// thinkTime implements thinker: the tool call the client's last turn
// started.
func (g *agenticGen) ThinkTime(client int) time.Duration {
	if client < 0 || client >= len(g.agents) {
		return 0
	}
	return g.agents[client].think
}

// thinker is a generator whose clients pause between turns for a time it
// chose (a tool call), on top of the load's think time.
type Thinker interface {
	ThinkTime(client int) time.Duration
}
