package scenario

import (
	"fmt"
	"io/fs"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/trimtab/trimtab/sim/engine"
)

// OpenChatSlots is how many chat sessions (and client tenants) an
// open-loop workload interleaves.
const OpenChatSlots = 128

// Workload kinds.
const (
	KindSharedPrefix = "shared-prefix"
	KindChat         = "chat"
	KindUniform      = "uniform"
	KindTrace        = "trace"
)

// Orders of a shared-prefix workload.
const (
	OrderRandom     = "random"
	OrderGroupMajor = "group-major"
)

// Arrival processes of an open-loop load.
const (
	ArrivalsPoisson  = "poisson"
	ArrivalsConstant = "constant"
)

// Tenancies of a shared-prefix workload.
const (
	TenancyRequest = "request"
	TenancyClient  = "client"
)

// Load modes.
const (
	ModeClosed = "closed" // levels are concurrencies (clients in a loop)
	ModeOpen   = "open"   // levels are Poisson arrival rates (req/s)
	ModeTrace  = "trace"  // levels are replay speed-ups of the trace clock
)

// Scenario is one simulated experiment: a fleet, a workload, a load sweep
// and the policies to compare. It is read from YAML (see
// sim/scenarios/*.yaml); durations are Go duration strings.
type Scenario struct {
	// Name identifies the scenario in reports.
	Name string `yaml:"name"`
	// Description is one paragraph for the report.
	Description string `yaml:"description"`
	// Duration is the simulated time during which requests are issued;
	// requests still in flight then are drained (they finish or time out).
	// With phases it is their sum (and may be omitted). A trace replays
	// the entries whose timestamps fall within Duration of trace time, at
	// every speed-up (a speed-up of k plays them in Duration/k).
	Duration time.Duration `yaml:"duration"`
	// Warmup is excluded from the statistics.
	Warmup time.Duration `yaml:"warmup"`
	// Servers is the number of simulated model servers. With Classes it
	// is their total count (and may be omitted).
	Servers int `yaml:"servers"`
	// Classes, when set, splits the servers into groups of one capacity:
	// a server of capacity c has c times the KV cache and runs every step
	// in 1/c of the time (a larger GPU or tensor parallelism), and its
	// endpoint declares Capacity c to the router. Default: Servers of
	// capacity 1.
	Classes []ServerClass `yaml:"classes"`
	// Timeout is the client timeout of one request (end to end). A
	// measured request that fails or times out counts in the latency
	// percentiles at this value (see Latencies).
	Timeout time.Duration `yaml:"timeout"`
	// SLO is the service level goodput counts against (default
	// DefaultSLO: TTFT ≤ 2 s, TPOT ≤ 100 ms); a field left out keeps its
	// default.
	SLO SLO `yaml:"slo"`
	// ScrapeInterval is how often the router sees fresh server metrics.
	ScrapeInterval time.Duration `yaml:"scrape_interval"`
	// Model is the served model name.
	Model string `yaml:"model"`
	// Engine overrides the engine defaults (engine.DefaultConfig); an
	// engine calibration (LoadEngine, trimtab sim --engine) replaces it.
	Engine EngineOverrides `yaml:"engine"`
	// EngineName names the calibration that replaced Engine, for reports
	// ("": the scenario's own engine section).
	EngineName string `yaml:"-"`
	// Workload says what requests look like.
	Workload Workload `yaml:"workload"`
	// Load says how many arrive.
	Load Load `yaml:"load"`
	// Phases split the run into named, consecutive periods, each with its
	// own load level and workload overrides; per-phase statistics are
	// reported. Names starting with "calm" mark phases without a hot spot,
	// in which the adaptive loop must stay calm. Default: one phase named
	// "run" covering Duration at the sweep level.
	Phases []Phase `yaml:"phases"`
	// Events change the fleet during the run (a pod dies, a pod joins).
	Events []Event `yaml:"events"`
	// Policies to compare (names of built-in policies); empty = all.
	Policies []string `yaml:"policies"`
	// Headline is the load level whose row the summary highlights (0: the
	// highest level).
	Headline float64 `yaml:"headline"`
	// Routers, when set, puts several router replicas in front of the
	// pool (nil: one router, as always).
	Routers *Routers `yaml:"routers"`
	// Streams are further sources of requests, each with its own class,
	// workload and arrivals (see Stream).
	Streams []Stream `yaml:"streams"`

	// dir is the directory of the scenario file, for relative trace paths
	// (in fsys when that is set).
	dir string
	// fsys is the file system the scenario came from (ParseFS; nil: the
	// operating system's).
	fsys fs.FS
	// traceData, when set, is the trace itself (TraceScenarioData); the
	// workload's trace names it and is never opened.
	traceData []byte
}

// Spreads: how requests are shared among router replicas.
const (
	// SpreadRoundRobin sends each request to the next replica in turn (a
	// Kubernetes Service in front of the replicas, per connection).
	SpreadRoundRobin = "round-robin"
	// SpreadClientHash sends all of one client's requests (closed loop: a
	// client; open loop: a session slot) to one replica.
	SpreadClientHash = "client-hash"
)

// Routers models several replicas of the router in front of one pool,
// each with its own scheduler, scorers (prefix index, in-flight and
// pending-prefill counts) and control loop, and optionally the replica
// sync between them.
type Routers struct {
	// Replicas is the number of routers, ≥ 1 (default 1).
	Replicas int `yaml:"replicas"`
	// Spread is round-robin (default) or client-hash.
	Spread string `yaml:"spread"`
	// Sync shares picks and load between the replicas (on/off; default
	// on): every SyncInterval each replica sends its new picks' prefix
	// chains and its router-local in-flight and pending-prefill counts,
	// which the others apply SyncDelay later.
	Sync *bool `yaml:"sync"`
	// SyncDelay is how long an update takes from one replica to the
	// others (default 20ms).
	SyncDelay time.Duration `yaml:"sync_delay"`
	// SyncInterval is how often a replica sends its batch (default 10ms,
	// the replica package's default flush interval).
	SyncInterval time.Duration `yaml:"sync_interval"`
}

// SyncOn reports whether the replicas sync (unset means on).
func (rt *Routers) SyncOn() bool { return rt.Sync == nil || *rt.Sync }

// String describes the routers for a report, e.g. "3 routers
// (round-robin, sync every 10ms, 20ms delay)".
func (rt *Routers) String() string {
	sync := "no sync"
	if rt.SyncOn() {
		sync = "sync every " + rt.SyncInterval.String() + ", " + rt.SyncDelay.String() + " delay"
	}
	return fmt.Sprintf("%d routers (%s spread, %s)", rt.Replicas, rt.Spread, sync)
}

// ServerClass is a group of servers of one capacity.
type ServerClass struct {
	// Count is the number of servers, ≥ 1.
	Count int `yaml:"count"`
	// Capacity is each server's relative size, > 0 (default 1).
	Capacity float64 `yaml:"capacity"`
}

// Phase is one period of a run.
type Phase struct {
	// Name labels the phase in reports; "calm…" marks a calm phase.
	Name string `yaml:"name"`
	// Duration of the phase, > 0.
	Duration time.Duration `yaml:"duration"`
	// Level is the phase's load level (concurrency or req/s); 0, the
	// default, means the level of the sweep.
	Level float64 `yaml:"level"`
	// Workload overrides fields of the scenario's workload during the
	// phase (e.g. {hot_fraction: 0.9}); the kind may change too.
	Workload yaml.Node `yaml:"workload"`

	work Workload // the scenario's workload with the overrides applied
}

// Calm reports whether the phase is marked calm (no hot spot).
func (p *Phase) Calm() bool { return strings.HasPrefix(p.Name, "calm") }

// Work returns the phase's workload (overrides applied).
func (p *Phase) Work() *Workload { return &p.work }

// Event kinds.
const (
	// EventPodLoss: the server at index Pod dies; its requests in flight
	// fail, requests sent to it fail over to their fallbacks, and its
	// endpoint leaves the pool after DiscoveryDelay.
	EventPodLoss = "pod-loss"
	// EventPodJoin: Pods new servers of Capacity join with empty caches
	// and are added to the pool at once.
	EventPodJoin = "pod-join"
)

// Event changes the fleet at a point of the run.
type Event struct {
	At       time.Duration `yaml:"at"`
	Kind     string        `yaml:"kind"`
	Pod      int           `yaml:"pod"`
	Pods     int           `yaml:"pods"`
	Capacity float64       `yaml:"capacity"`
	// DiscoveryDelay is how long a lost pod stays in the pool (scrapes
	// failing) before discovery drops it; default 1s.
	DiscoveryDelay time.Duration `yaml:"discovery_delay"`
}

// Workload describes the requests. Which fields matter depends on Kind.
type Workload struct {
	// Kind is shared-prefix, chat, uniform, agentic or trace.
	Kind string `yaml:"kind"`
	// Groups is the number of distinct system prompts (shared-prefix,
	// chat).
	Groups int `yaml:"groups"`
	// PromptsPerGroup is the number of distinct questions per group
	// (shared-prefix); a repeated question is a full-prompt cache hit.
	PromptsPerGroup int `yaml:"prompts_per_group"`
	// SystemTokens is the length of each group's system prompt.
	SystemTokens int `yaml:"system_tokens"`
	// QuestionTokens is the mean length of the user part of a prompt
	// (uniform: the whole prompt).
	QuestionTokens int `yaml:"question_tokens"`
	// OutputTokens is the mean output length; for a trace, the output
	// length of entries whose output_length is 0 (unknown, as in a trace
	// recorded by trimtab serve).
	OutputTokens int `yaml:"output_tokens"`
	// Jitter spreads question and output lengths uniformly over
	// mean·[1−jitter, 1+jitter]; 0 ≤ jitter < 1.
	Jitter float64 `yaml:"jitter"`
	// HotFraction of requests (shared-prefix) use the hot system prompt of
	// HotSystemTokens tokens instead of one of the groups.
	HotFraction     float64 `yaml:"hot_fraction"`
	HotSystemTokens int     `yaml:"hot_system_tokens"`
	// HotID picks which hot system prompt is hot: phases with different
	// ids have different hot prefixes (a hot prompt that rotates).
	HotID int `yaml:"hot_id"`
	// Tenancy is how requests choose their group (shared-prefix):
	// "request" (default) draws the group, and hot or not, afresh for
	// every request; "client" ties each closed-loop client (or open-loop
	// session slot) to one tenant: client c uses group c mod groups, and
	// the first hot_fraction of the clients send only hot requests.
	Tenancy string `yaml:"tenancy"`
	// Order is how shared-prefix requests pick their prompt: "random"
	// (default) draws the group and question of every request; "group-
	// major" cycles through all groups × prompts_per_group prompts in
	// order, a group's prompts back to back (group 0's questions 0…n−1,
	// then group 1's …), as inference-perf's shared_prefix data does. The
	// cycle runs on across phases that do not override the workload.
	// Group-major takes no hot prompt and no client tenancy.
	Order string `yaml:"order"`
	// Turns per chat session; the next turn's prompt repeats the whole
	// conversation so far (chat).
	Turns int `yaml:"turns"`
	// Trace is the Mooncake-format JSONL file (trace), resolved relative
	// to the scenario file unless absolute.
	Trace string `yaml:"trace"`
	// TraceTokensPerID is how many tokens one hash id stands for (512 in
	// the Mooncake traces).
	TraceTokensPerID int `yaml:"trace_tokens_per_id"`
	// TraceMaxRequests limits the replay (0: all).
	TraceMaxRequests int `yaml:"trace_max_requests"`
	// MaxPromptTokens truncates longer prompts (0: no limit); the engine
	// rejects prompts that could never fit its KV cache anyway.
	MaxPromptTokens int `yaml:"max_prompt_tokens"`
	// AgenticWorkload holds the agentic kind's fields.
	AgenticWorkload `yaml:",inline"`
	// Adapters, when > 0, gives every request one of that many LoRA
	// adapters (lora-1 … lora-N), drawn with Zipf popularity: adapter k
	// with probability ∝ 1/k^AdapterZipf (0: uniform). An adapter's
	// requests share no KV cache with other adapters' (vLLM keys cached
	// blocks by adapter). The engine models adapter slots when
	// engine.max_loras > 0.
	Adapters    int     `yaml:"adapters"`
	AdapterZipf float64 `yaml:"adapter_zipf"`
	// Class is the requests' class: band, tenant and TTL for flow control
	// and the per-class results (nil: none).
	Class *RequestClass `yaml:"class"`
}

// Load describes the arrival process and its sweep.
type Load struct {
	// Mode is closed (concurrency), open (Poisson rate) or trace
	// (speed-up).
	Mode string `yaml:"mode"`
	// Levels are swept in turn: concurrencies, rates in req/s, or trace
	// speed-ups.
	Levels []float64 `yaml:"levels"`
	// Burst, when set, applies the level only during [start, end) and
	// Base outside it: shorthand for the phases calm (base), burst (the
	// level) and calm-after (base).
	Burst *Burst `yaml:"burst"`
	// Arrivals is the open-loop arrival process: "poisson" (default,
	// exponential gaps) or "constant" (evenly spaced, 1/rate apart).
	Arrivals string `yaml:"arrivals"`
	// ThinkTime is the mean of a closed-loop client's pause between a
	// response and its next request (exponentially distributed; 0: none).
	ThinkTime time.Duration `yaml:"think_time"`
}

// Burst shapes the load over time.
type Burst struct {
	Base  float64       `yaml:"base"`
	Start time.Duration `yaml:"start"`
	End   time.Duration `yaml:"end"`
}

// Scaled returns a copy of the scenario played in d instead of Duration:
// the warm-up, every phase, every event and every stream's start keep
// their share of the run.
func (s *Scenario) Scaled(d time.Duration) *Scenario {
	c := *s
	f := float64(d) / float64(s.Duration)
	scale := func(x time.Duration) time.Duration { return time.Duration(float64(x) * f) }
	c.Duration = d
	c.Warmup = scale(s.Warmup)
	c.Phases = append([]Phase(nil), s.Phases...)
	var sum time.Duration
	for i := range c.Phases {
		c.Phases[i].Duration = max(scale(s.Phases[i].Duration), time.Millisecond)
		sum += c.Phases[i].Duration
	}
	c.Phases[len(c.Phases)-1].Duration += d - sum // rounding
	c.Events = append([]Event(nil), s.Events...)
	for i := range c.Events {
		c.Events[i].At = scale(s.Events[i].At)
	}
	c.Streams = append([]Stream(nil), s.Streams...)
	for i := range c.Streams {
		c.Streams[i].Start = scale(s.Streams[i].Start)
	}
	return &c
}

// PhaseStart returns the offset at which phase i begins.
func (s *Scenario) PhaseStart(i int) time.Duration {
	var start time.Duration
	for j := 0; j < i && j < len(s.Phases); j++ {
		start += s.Phases[j].Duration
	}
	return start
}

// Capacities returns each initial server's capacity, in server order.
func (s *Scenario) Capacities() []float64 {
	out := make([]float64, 0, s.Servers)
	for _, c := range s.Classes {
		for range c.Count {
			out = append(out, c.Capacity)
		}
	}
	for len(out) < s.Servers {
		out = append(out, 1)
	}
	return out
}

// EngineFor returns the engine configuration of a server of capacity c: c
// times the KV blocks, every step cost divided by c. With engine classes
// it is the base engine's; ServerEngine gives each server its class's.
func (s *Scenario) EngineFor(c float64) engine.Config {
	return scaleEngine(s.EngineConfig(), c)
}

// ServerEngine returns the engine of server i (in the order servers
// start), whose scenario class has capacity c, and the capacity its
// endpoint declares to the router. Without engine classes that is
// EngineFor(c) and c. With them, server i belongs to engine class
// ClassOf(i): it runs the base engine with that class's overrides,
// scaled by c, and declares c × the class's capacity.
func (s *Scenario) ServerEngine(i int, c float64) (engine.Config, float64) {
	k := s.Engine.ClassOf(i)
	if k < 0 {
		return s.EngineFor(c), c
	}
	cl := &s.Engine.Classes[k]
	return scaleEngine(cl.EngineOverrides.Apply(s.EngineConfig()), c), c * cl.Capacity
}

func scaleEngine(e engine.Config, c float64) engine.Config {
	if c == 1 {
		return e
	}
	e.NumBlocks = int(float64(e.NumBlocks) * c)
	div := func(d time.Duration) time.Duration { return time.Duration(float64(d) / c) }
	e.StepFixed = max(div(e.StepFixed), 1)
	e.StepPerPrefillToken = div(e.StepPerPrefillToken)
	e.StepPerDecodeSeq = div(e.StepPerDecodeSeq)
	e.StepPerContextToken = div(e.StepPerContextToken)
	e.PrefillAttentionPer1k = div(e.PrefillAttentionPer1k)
	return e
}

// EngineConfig returns the engine configuration of a server of capacity 1.
func (s *Scenario) EngineConfig() engine.Config {
	return s.Engine.Apply(engine.DefaultConfig())
}

// SetDefaults fills the fields left zero: one replica, round-robin
// spread, a 20ms sync delay every 10ms. Sync stays unset (on).
func (rt *Routers) SetDefaults() {
	if rt.Replicas == 0 {
		rt.Replicas = 1
	}
	if rt.Spread == "" {
		rt.Spread = SpreadRoundRobin
	}
	if rt.SyncDelay == 0 {
		rt.SyncDelay = 20 * time.Millisecond
	}
	if rt.SyncInterval == 0 {
		rt.SyncInterval = 10 * time.Millisecond
	}
}

// LevelUnit names what a load level means for the scenario's mode.
func (s *Scenario) LevelUnit() string {
	switch s.Load.Mode {
	case ModeOpen:
		return "req/s"
	case ModeTrace:
		return "× trace speed"
	default:
		return "concurrency"
	}
}
