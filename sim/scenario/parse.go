package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"
)

// Validate checks the scenario; errors name the field.
// maxAdapters bounds workload.adapters.
const MaxAdapters = 4096

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
	if err := s.SLO.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := s.Engine.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, s.Workload.validate("workload.", s.Load.Mode)...)
	errs = append(errs, s.validateFlow()...)
	if rt := s.Routers; rt != nil {
		if rt.Replicas < 1 || rt.Replicas > 64 {
			bad("routers.replicas: %d, want 1…64", rt.Replicas)
		}
		if rt.Spread != SpreadRoundRobin && rt.Spread != SpreadClientHash {
			bad("routers.spread: %q, want %s or %s", rt.Spread, SpreadRoundRobin, SpreadClientHash)
		}
		if rt.SyncDelay < 0 {
			bad("routers.sync_delay: %v, want ≥ 0", rt.SyncDelay)
		}
		if rt.SyncInterval <= 0 {
			bad("routers.sync_interval: %v, want > 0", rt.SyncInterval)
		}
	}
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
	switch s.Load.Arrivals {
	case "", ArrivalsPoisson:
	case ArrivalsConstant:
		if s.Load.Mode != ModeOpen {
			bad("load.arrivals: constant applies to load.mode open only")
		}
	default:
		bad("load.arrivals: %q, want %s or %s", s.Load.Arrivals, ArrivalsPoisson, ArrivalsConstant)
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
		if p == "" {
			bad("policies[%d]: must name a policy", i)
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
		switch w.Order {
		case "", OrderRandom:
		case OrderGroupMajor:
			if w.HotFraction > 0 || w.Tenancy == TenancyClient {
				bad("order: group-major takes no hot_fraction and no client tenancy")
			}
		default:
			bad("order: %q, want %s or %s", w.Order, OrderRandom, OrderGroupMajor)
		}
	case KindChat:
		if w.Groups < 1 {
			bad("groups: must be ≥ 1")
		}
		if w.Turns < 1 {
			bad("turns: must be ≥ 1")
		}
	case KindUniform:
	case KindAgentic:
		w.validateAgentic(bad)
	case KindTrace:
		if w.Trace == "" {
			bad("trace: must be set for kind trace")
		}
		if w.TraceTokensPerID < 1 {
			bad("trace_tokens_per_id: must be ≥ 1")
		}
	default:
		bad("kind: %q, want one of shared-prefix, chat, uniform, agentic, trace", w.Kind)
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
	if w.Adapters < 0 || w.Adapters > MaxAdapters {
		bad("adapters: %d, must be in [0, %d]", w.Adapters, MaxAdapters)
	}
	if w.AdapterZipf < 0 || w.AdapterZipf > 10 {
		bad("adapter_zipf: %v, must be in [0, 10]", w.AdapterZipf)
	}
	switch {
	case mode == ModeTrace && w.Kind != KindTrace:
		bad("kind: load.mode trace needs workload kind trace")
	case mode != ModeTrace && w.Kind == KindTrace:
		bad("kind: a trace workload replays its own arrivals; set load.mode: trace")
	}
	return errs
}

// Parse decodes one scenario from YAML (unknown fields are errors),
// applies defaults and validates it. dir resolves a relative trace path.
func Parse(data []byte, dir string) (*Scenario, error) {
	s := &Scenario{
		ScrapeInterval: 50 * time.Millisecond,
		Timeout:        60 * time.Second,
		SLO:            DefaultSLO(),
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

// LoadFile reads a scenario file; a relative trace path resolves against the
// file's directory.
func LoadFile(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	abs, _ := filepath.Abs(filepath.Dir(path))
	return Parse(data, abs)
}

// ParseFS reads the scenario at name in fsys. Its relative paths (a
// trace) resolve inside fsys, so a scenario embedded in a binary runs from
// any directory.
func ParseFS(fsys fs.FS, name string) (*Scenario, error) {
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	s, err := Parse(data, path.Dir(name))
	if err != nil {
		return nil, err
	}
	s.fsys = fsys
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
	if rt := s.Routers; rt != nil {
		rt.SetDefaults()
	}
	s.resolveStreams()
	s.Engine.SetDefaults()
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
