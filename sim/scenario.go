package sim

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/trimtab/trimtab/sim/engine"
)

//go:embed scenarios/*.yaml
var shipped embed.FS

// Workload kinds.
const (
	KindSharedPrefix = "shared-prefix"
	KindChat         = "chat"
	KindUniform      = "uniform"
	KindTrace        = "trace"
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
	Duration time.Duration `yaml:"duration"`
	// Warmup is excluded from the statistics.
	Warmup time.Duration `yaml:"warmup"`
	// Servers is the number of simulated model servers.
	Servers int `yaml:"servers"`
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
	// Policies to compare (names of built-in policies); empty = all.
	Policies []string `yaml:"policies"`
	// Headline is the load level whose row the summary highlights (0: the
	// highest level).
	Headline float64 `yaml:"headline"`

	dir string // directory of the scenario file, for relative trace paths
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
	// Base outside it (the hot-prefix burst).
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
	if s.Timeout <= 0 {
		bad("timeout: must be > 0")
	}
	if s.ScrapeInterval <= 0 {
		bad("scrape_interval: must be > 0")
	}
	if err := s.Engine.Apply(engine.DefaultConfig()).Validate(); err != nil {
		errs = append(errs, err)
	}
	w := &s.Workload
	switch w.Kind {
	case KindSharedPrefix:
		if w.Groups < 1 {
			bad("workload.groups: must be ≥ 1")
		}
		if w.PromptsPerGroup < 1 {
			bad("workload.prompts_per_group: must be ≥ 1")
		}
		if w.HotFraction < 0 || w.HotFraction > 1 {
			bad("workload.hot_fraction: must be in [0,1]")
		}
		if w.HotFraction > 0 && w.HotSystemTokens < 1 {
			bad("workload.hot_system_tokens: must be ≥ 1 when hot_fraction > 0")
		}
	case KindChat:
		if w.Groups < 1 {
			bad("workload.groups: must be ≥ 1")
		}
		if w.Turns < 1 {
			bad("workload.turns: must be ≥ 1")
		}
	case KindUniform:
	case KindTrace:
		if w.Trace == "" {
			bad("workload.trace: must be set for kind trace")
		}
		if w.TraceTokensPerID < 1 {
			bad("workload.trace_tokens_per_id: must be ≥ 1")
		}
	default:
		bad("workload.kind: %q, want one of shared-prefix, chat, uniform, trace", w.Kind)
	}
	if w.Kind != KindTrace {
		if w.QuestionTokens < 1 {
			bad("workload.question_tokens: must be ≥ 1")
		}
		if w.OutputTokens < 1 {
			bad("workload.output_tokens: must be ≥ 1")
		}
	}
	if w.Jitter < 0 || w.Jitter >= 1 {
		bad("workload.jitter: must be in [0,1)")
	}
	if w.SystemTokens < 0 || w.MaxPromptTokens < 0 {
		bad("workload: token counts must be ≥ 0")
	}
	switch s.Load.Mode {
	case ModeClosed, ModeOpen:
		if w.Kind == KindTrace {
			bad("load.mode: a trace workload replays its own arrivals, want trace")
		}
	case ModeTrace:
		if w.Kind != KindTrace {
			bad("load.mode: trace needs workload.kind trace")
		}
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
	if b := s.Load.Burst; b != nil {
		if b.Base <= 0 {
			bad("load.burst.base: must be > 0")
		}
		if b.Start < 0 || b.End <= b.Start {
			bad("load.burst: want 0 ≤ start < end")
		}
	}
	if s.Load.ThinkTime < 0 {
		bad("load.think_time: must be ≥ 0")
	}
	for i, p := range s.Policies {
		if _, ok := builtinPolicy(p); !ok {
			bad("policies[%d]: unknown policy %q (known: %s)", i, p, strings.Join(PolicyNames(), ", "))
		}
	}
	return errors.Join(errs...)
}

// ParseScenario decodes one scenario from YAML (unknown fields are errors),
// applies defaults and validates it. dir resolves a relative trace path.
func ParseScenario(data []byte, dir string) (*Scenario, error) {
	s := &Scenario{
		ScrapeInterval: 50 * time.Millisecond,
		Timeout:        60 * time.Second,
		Model:          "llama-3.1-8b-instruct",
		Servers:        16,
	}
	s.Workload.TraceTokensPerID = 512
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(s); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	if s.Load.Mode == "" {
		s.Load.Mode = ModeClosed
		if s.Workload.Kind == KindTrace {
			s.Load.Mode = ModeTrace
		}
	}
	s.dir = dir
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %q: %w", s.Name, err)
	}
	return s, nil
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
	name := strings.TrimSuffix(path, ".yaml") + ".yaml"
	data, serr := shipped.ReadFile("scenarios/" + name)
	if serr != nil {
		return nil, fmt.Errorf("scenario: %w (and no shipped scenario %q)", err, name)
	}
	return ParseScenario(data, ShippedDir)
}

// ShippedDir is where the shipped scenarios live in the repository; their
// relative paths (the trace) resolve from it, so run from the repository
// root or pass the trace explicitly.
const ShippedDir = "sim/scenarios"

// Shipped returns the names of the embedded scenarios, sorted.
func Shipped() []string {
	ents, _ := shipped.ReadDir("scenarios")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

// ShippedScenario returns one embedded scenario by name.
func ShippedScenario(name string) (*Scenario, error) {
	data, err := shipped.ReadFile("scenarios/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("scenario: no shipped scenario %q", name)
	}
	return ParseScenario(data, ShippedDir)
}

// TracePath resolves the trace file: override when set, else the
// scenario's path (relative to the scenario file's directory).
func (s *Scenario) TracePath(override string) string {
	if override != "" {
		return override
	}
	p := s.Workload.Trace
	if filepath.IsAbs(p) || s.dir == "" {
		return p
	}
	return filepath.Join(s.dir, p)
}

// EngineConfig returns the engine configuration of every server.
func (s *Scenario) EngineConfig() engine.Config {
	return s.Engine.Apply(engine.DefaultConfig())
}
