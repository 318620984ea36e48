package sim

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/trimtab/trimtab/sim/engine"
)

//go:embed scenarios/*.yaml scenarios/data/*.jsonl.gz
var shipped embed.FS

// Workload kinds.
const (
	KindSharedPrefix = "shared-prefix"
	KindChat         = "chat"
	KindUniform      = "uniform"
	KindTrace        = "trace"
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
	// Timeout is the client timeout of one request (end to end).
	Timeout time.Duration `yaml:"timeout"`
	// ScrapeInterval is how often the router sees fresh server metrics.
	ScrapeInterval time.Duration `yaml:"scrape_interval"`
	// Model is the served model name.
	Model string `yaml:"model"`
	// Engine overrides the engine defaults (engine.DefaultConfig).
	Engine EngineOverrides `yaml:"engine"`
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

	dir      string // directory of the scenario file, for relative trace paths
	embedded bool   // a shipped scenario: relative paths are in the binary
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

// EngineOverrides are optional replacements for engine defaults.
type EngineOverrides struct {
	BlockSize           int           `yaml:"block_size"`
	NumBlocks           int           `yaml:"num_blocks"`
	MaxNumSeqs          int           `yaml:"max_num_seqs"`
	MaxBatchedTokens    int           `yaml:"max_batched_tokens"`
	StepFixed           time.Duration `yaml:"step_fixed"`
	StepPerPrefillToken time.Duration `yaml:"step_per_prefill_token"`
	StepPerDecodeSeq    time.Duration `yaml:"step_per_decode_seq"`
	StepPerContextToken time.Duration `yaml:"step_per_context_token"`
	PrefillAttention1k  time.Duration `yaml:"prefill_attention_per_1k"`
	DisablePrefixCache  bool          `yaml:"disable_prefix_caching"`
}

// Apply returns base with the non-zero overrides applied.
func (o EngineOverrides) Apply(base engine.Config) engine.Config {
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	setD := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	set(&base.BlockSize, o.BlockSize)
	set(&base.NumBlocks, o.NumBlocks)
	set(&base.MaxNumSeqs, o.MaxNumSeqs)
	set(&base.MaxBatchedTokens, o.MaxBatchedTokens)
	setD(&base.StepFixed, o.StepFixed)
	setD(&base.StepPerPrefillToken, o.StepPerPrefillToken)
	setD(&base.StepPerDecodeSeq, o.StepPerDecodeSeq)
	setD(&base.StepPerContextToken, o.StepPerContextToken)
	setD(&base.PrefillAttentionPer1k, o.PrefillAttention1k)
	if o.DisablePrefixCache {
		base.PrefixCaching = false
	}
	return base
}

// Workload describes the requests. Which fields matter depends on Kind.
type Workload struct {
	// Kind is shared-prefix, chat, uniform or trace.
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
	// OutputTokens is the mean output length.
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

// Validate checks the scenario; errors name the field.
func (s *Scenario) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if s.Name == "" {
		bad("name: must be set")
	}
	if s.Duration <= 0 {
		bad("duration: must be > 0")
	}
	if s.Warmup < 0 || s.Warmup >= s.Duration {
		bad("warmup: must be in [0, duration)")
	}
	if s.Servers < 1 || s.Servers > 4096 {
		bad("servers: must be in 1…4096")
	}
	for i, c := range s.Classes {
		if c.Count < 1 {
			bad("classes[%d].count: must be ≥ 1", i)
		}
		if !(c.Capacity > 0) || c.Capacity > 64 {
			bad("classes[%d].capacity: must be in (0, 64]", i)
		}
	}
	if s.Timeout <= 0 {
		bad("timeout: must be > 0")
	}
	if s.ScrapeInterval <= 0 {
		bad("scrape_interval: must be > 0")
	}
	if err := s.Engine.Apply(engine.DefaultConfig()).Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, s.Workload.validate("workload.", s.Load.Mode)...)
	switch s.Load.Mode {
	case ModeClosed, ModeOpen, ModeTrace:
	default:
		bad("load.mode: %q, want closed, open or trace", s.Load.Mode)
	}
	if len(s.Load.Levels) == 0 {
		bad("load.levels: must list at least one level")
	}
	for i, l := range s.Load.Levels {
		if !(l > 0) {
			bad("load.levels[%d]: must be > 0", i)
		}
		if s.Load.Mode == ModeClosed && l != float64(int(l)) {
			bad("load.levels[%d]: a concurrency must be a whole number", i)
		}
	}
	if s.Load.ThinkTime < 0 {
		bad("load.think_time: must be ≥ 0")
	}
	var sum time.Duration
	for i := range s.Phases {
		ph := &s.Phases[i]
		f := fmt.Sprintf("phases[%d]", i)
		if ph.Name == "" {
			bad("%s.name: must be set", f)
		}
		if ph.Duration <= 0 {
			bad("%s.duration: must be > 0", f)
		}
		sum += ph.Duration
		if ph.Level < 0 || (s.Load.Mode == ModeClosed && ph.Level != float64(int(ph.Level))) {
			bad("%s.level: must be 0 (the sweep level) or a level of load.mode %s", f, s.Load.Mode)
		}
		if s.Load.Mode == ModeTrace && (ph.Level != 0 || !ph.Workload.IsZero()) {
			bad("%s: a trace replays its own arrivals; its phases cannot change level or workload", f)
		}
		errs = append(errs, ph.work.validate(f+".workload.", s.Load.Mode)...)
	}
	if len(s.Phases) > 0 && sum != s.Duration {
		bad("phases: durations sum to %v, but duration is %v", sum, s.Duration)
	}
	for i, ev := range s.Events {
		f := fmt.Sprintf("events[%d]", i)
		if ev.At < 0 || ev.At >= s.Duration {
			bad("%s.at: must be in [0, duration)", f)
		}
		switch ev.Kind {
		case EventPodLoss:
			if ev.Pod < 0 || ev.Pod >= s.Servers {
				bad("%s.pod: must be a server index in [0, %d)", f, s.Servers)
			}
		case EventPodJoin:
			if ev.Pods < 1 || ev.Pods > 256 {
				bad("%s.pods: must be in 1…256", f)
			}
			if !(ev.Capacity > 0) || ev.Capacity > 64 {
				bad("%s.capacity: must be in (0, 64]", f)
			}
		default:
			bad("%s.kind: %q, want %s or %s", f, ev.Kind, EventPodLoss, EventPodJoin)
		}
		if ev.DiscoveryDelay < 0 {
			bad("%s.discovery_delay: must be ≥ 0", f)
		}
	}
	for i, p := range s.Policies {
		if _, ok := builtinPolicy(p); !ok {
			bad("policies[%d]: unknown policy %q (known: %s)", i, p, strings.Join(PolicyNames(), ", "))
		}
	}
	return errors.Join(errs...)
}

// validate checks a workload; field names start with prefix.
func (w *Workload) validate(prefix, mode string) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(prefix+format, a...)) }
	switch w.Kind {
	case KindSharedPrefix:
		if w.Groups < 1 {
			bad("groups: must be ≥ 1")
		}
		if w.PromptsPerGroup < 1 {
			bad("prompts_per_group: must be ≥ 1")
		}
		if w.HotFraction < 0 || w.HotFraction > 1 {
			bad("hot_fraction: must be in [0,1]")
		}
		if w.HotFraction > 0 && w.HotSystemTokens < 1 {
			bad("hot_system_tokens: must be ≥ 1 when hot_fraction > 0")
		}
		if w.Tenancy != "" && w.Tenancy != TenancyRequest && w.Tenancy != TenancyClient {
			bad("tenancy: %q, want %s or %s", w.Tenancy, TenancyRequest, TenancyClient)
		}
	case KindChat:
		if w.Groups < 1 {
			bad("groups: must be ≥ 1")
		}
		if w.Turns < 1 {
			bad("turns: must be ≥ 1")
		}
	case KindUniform:
	case KindTrace:
		if w.Trace == "" {
			bad("trace: must be set for kind trace")
		}
		if w.TraceTokensPerID < 1 {
			bad("trace_tokens_per_id: must be ≥ 1")
		}
	default:
		bad("kind: %q, want one of shared-prefix, chat, uniform, trace", w.Kind)
	}
	if w.Kind != KindTrace {
		if w.QuestionTokens < 1 {
			bad("question_tokens: must be ≥ 1")
		}
		if w.OutputTokens < 1 {
			bad("output_tokens: must be ≥ 1")
		}
	}
	if w.Jitter < 0 || w.Jitter >= 1 {
		bad("jitter: must be in [0,1)")
	}
	if w.SystemTokens < 0 || w.MaxPromptTokens < 0 {
		bad("token counts must be ≥ 0")
	}
	switch {
	case mode == ModeTrace && w.Kind != KindTrace:
		bad("kind: load.mode trace needs workload kind trace")
	case mode != ModeTrace && w.Kind == KindTrace:
		bad("kind: a trace workload replays its own arrivals; set load.mode: trace")
	}
	return errs
}

// ParseScenario decodes one scenario from YAML (unknown fields are errors),
// applies defaults and validates it. dir resolves a relative trace path.
func ParseScenario(data []byte, dir string) (*Scenario, error) {
	s := &Scenario{
		ScrapeInterval: 50 * time.Millisecond,
		Timeout:        60 * time.Second,
		Model:          "llama-3.1-8b-instruct",
	}
	s.Workload.TraceTokensPerID = 512
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(s); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	if err := s.resolve(); err != nil {
		return nil, fmt.Errorf("scenario %q: %w", s.Name, err)
	}
	s.dir = dir
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %q: %w", s.Name, err)
	}
	return s, nil
}

// resolve fills what the YAML leaves implicit: the load mode, the server
// count of the classes, phases from a burst or the whole run, the
// phases' workloads, event defaults.
func (s *Scenario) resolve() error {
	if s.Load.Mode == "" {
		s.Load.Mode = ModeClosed
		if s.Workload.Kind == KindTrace {
			s.Load.Mode = ModeTrace
		}
	}
	if len(s.Classes) > 0 {
		n := 0
		for i := range s.Classes {
			if s.Classes[i].Capacity == 0 {
				s.Classes[i].Capacity = 1
			}
			n += s.Classes[i].Count
		}
		if s.Servers != 0 && s.Servers != n {
			return fmt.Errorf("servers: %d, but classes count %d", s.Servers, n)
		}
		s.Servers = n
	}
	if s.Servers == 0 {
		s.Servers = 16
	}
	if len(s.Phases) > 0 {
		var sum time.Duration
		for _, p := range s.Phases {
			sum += p.Duration
		}
		if s.Duration == 0 {
			s.Duration = sum
		}
	}
	if b := s.Load.Burst; b != nil {
		if len(s.Phases) > 0 {
			return errors.New("load.burst: set phases or burst, not both")
		}
		if b.Base <= 0 || b.Start < 0 || b.End <= b.Start || b.End > s.Duration {
			return errors.New("load.burst: want base > 0 and 0 ≤ start < end ≤ duration")
		}
		if b.Start > 0 {
			s.Phases = append(s.Phases, Phase{Name: "calm", Duration: b.Start, Level: b.Base})
		}
		s.Phases = append(s.Phases, Phase{Name: "burst", Duration: b.End - b.Start})
		if b.End < s.Duration {
			s.Phases = append(s.Phases, Phase{Name: "calm-after", Duration: s.Duration - b.End, Level: b.Base})
		}
	}
	if len(s.Phases) == 0 {
		s.Phases = []Phase{{Name: "run", Duration: s.Duration}}
	}
	for i := range s.Phases {
		ph := &s.Phases[i]
		ph.work = s.Workload
		if !ph.Workload.IsZero() {
			if err := decodeStrict(&ph.Workload, &ph.work); err != nil {
				return fmt.Errorf("phases[%d].workload: %w", i, err)
			}
		}
	}
	for i := range s.Events {
		ev := &s.Events[i]
		if ev.Kind == EventPodJoin {
			if ev.Pods == 0 {
				ev.Pods = 1
			}
			if ev.Capacity == 0 {
				ev.Capacity = 1
			}
		}
		if ev.DiscoveryDelay == 0 {
			ev.DiscoveryDelay = time.Second
		}
	}
	return nil
}

// decodeStrict decodes a YAML node into v, rejecting unknown fields.
func decodeStrict(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// Scaled returns a copy of the scenario played in d instead of Duration:
// the warm-up, every phase and every event keep their share of the run.
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
// times the KV blocks, every step cost divided by c.
func (s *Scenario) EngineFor(c float64) engine.Config {
	e := s.EngineConfig()
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

// LoadScenario reads a scenario file. A name without a path separator
// and without a file of that name is looked up among the shipped scenarios
// ("hot-prefix-burst" or "hot-prefix-burst.yaml").
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		abs, _ := filepath.Abs(filepath.Dir(path))
		return ParseScenario(data, abs)
	}
	if !errors.Is(err, fs.ErrNotExist) || strings.ContainsRune(path, os.PathSeparator) {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	sc, serr := ShippedScenario(strings.TrimSuffix(path, ".yaml"))
	if serr != nil {
		return nil, fmt.Errorf("scenario: %w (and no shipped scenario %q; shipped: %s)", err, path, strings.Join(Shipped(), ", "))
	}
	return sc, nil
}

// Shipped returns the names of the embedded scenarios, sorted.
func Shipped() []string {
	ents, _ := shipped.ReadDir("scenarios")
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".yaml") {
			names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
		}
	}
	sort.Strings(names)
	return names
}

// ShippedScenario returns one embedded scenario by name. Its relative
// paths (a trace) resolve inside the binary, so it runs from any
// directory.
func ShippedScenario(name string) (*Scenario, error) {
	data, err := shipped.ReadFile("scenarios/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("scenario: no shipped scenario %q", name)
	}
	sc, err := ParseScenario(data, "")
	if err != nil {
		return nil, err
	}
	sc.embedded = true
	return sc, nil
}

// LoadTrace reads the trace of a trace workload — override when set, else
// the scenario's path (relative to the scenario file, or inside the
// binary for a shipped scenario; ".gz" files are decompressed) — keeping
// the entries whose timestamps fall within Duration and at most
// workload.trace_max_requests of them.
func (s *Scenario) LoadTrace(override string) ([]TraceEntry, error) {
	name := override
	var (
		r   io.ReadCloser
		err error
	)
	switch {
	case override != "":
		r, err = os.Open(override)
	case s.embedded && !filepath.IsAbs(s.Workload.Trace):
		name = "scenarios/" + s.Workload.Trace
		r, err = shipped.Open(name)
	default:
		name = s.Workload.Trace
		if !filepath.IsAbs(name) && s.dir != "" {
			name = filepath.Join(s.dir, name)
		}
		r, err = os.Open(name)
	}
	if err != nil {
		return nil, fmt.Errorf("workload.trace: %w", err)
	}
	defer r.Close()
	var in io.Reader = r
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("workload.trace: %s: %w", name, err)
		}
		defer zr.Close()
		in = zr
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	entries, err := ParseTrace(sc, s.Workload.TraceMaxRequests)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	limit := s.Duration.Milliseconds()
	n := 0
	for n < len(entries) && entries[n].Timestamp < limit {
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: no entry before %v of trace time", name, s.Duration)
	}
	return entries[:n], nil
}

// EngineConfig returns the engine configuration of a server of capacity 1.
func (s *Scenario) EngineConfig() engine.Config {
	return s.Engine.Apply(engine.DefaultConfig())
}
