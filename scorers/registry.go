package scorers

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// Scorer type strings as used in profiles (the `type` of a scorer entry).
const (
	TypePrefix   = prefix.Type
	TypeQueue    = "queue"
	TypeKVCache  = "kvcache"
	TypeInFlight = "inflight"
	TypeSession  = "session"
	TypeLoRA     = "lora"

	TypePendingPrefill = "pending-prefill"
	TypeTokenLoad      = "token-load"
	TypeTimeCost       = "time-cost"
)

// Deps are a scorer's collaborators. Nil fields get harmless defaults: no
// metrics registered, logs discarded.
type Deps struct {
	// Registerer receives the scorer's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Logger is for construction-time and pool-change messages only;
	// scorers never log on the request path.
	Logger *slog.Logger
}

func (d Deps) logger() *slog.Logger {
	if d.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return d.Logger
}

// Factory builds a scorer named name from its profile params. decode fills
// the scorer's Config struct (which the factory has set to its defaults)
// from the params; it may be nil when there are none. The factory then
// validates the config; every error names the bad field.
type Factory func(name string, decode func(into any) error, deps Deps) (scheduler.Scorer, error)

// InTree returns a fresh registry of every in-tree scorer factory, keyed by
// type string. The caller owns the map and may add out-of-tree factories.
func InTree() map[string]Factory {
	return map[string]Factory{
		TypePrefix:         FactoryOf(prefix.DefaultConfig, newPrefix),
		TypeQueue:          FactoryOf(DefaultQueueConfig, NewQueue),
		TypeKVCache:        FactoryOf(DefaultKVCacheConfig, NewKVCache),
		TypeInFlight:       FactoryOf(DefaultInFlightConfig, NewInFlight),
		TypeSession:        FactoryOf(DefaultSessionConfig, NewSession),
		TypePendingPrefill: FactoryOf(DefaultPendingPrefillConfig, NewPendingPrefill),
		TypeLoRA:           FactoryOf(DefaultLoRAConfig, NewLoRA),
		TypeTokenLoad:      FactoryOf(DefaultTokenLoadConfig, NewTokenLoad),
		TypeTimeCost:       FactoryOf(DefaultTimeCostConfig, NewTimeCost),
	}
}

// newPrefix builds the prefix scorer (package scorers/prefix) with deps.
func newPrefix(name string, cfg prefix.Config, deps Deps) (*prefix.Scorer, error) {
	return prefix.New(name, cfg, prefix.Deps(deps))
}

// FactoryOf adapts a typed constructor to a Factory: the config starts at
// defaults(), the profile's params are decoded over it, and build
// validates it and makes the scorer. Out-of-tree scorers use it too.
func FactoryOf[C any, S scheduler.Scorer](defaults func() C, build func(name string, cfg C, deps Deps) (S, error)) Factory {
	return func(name string, decode func(any) error, deps Deps) (scheduler.Scorer, error) {
		cfg := defaults()
		if decode != nil {
			if err := decode(&cfg); err != nil {
				return nil, fmt.Errorf("scorer %q: params: %w", name, err)
			}
		}
		s, err := build(name, cfg, deps)
		if err != nil {
			return nil, err // not s: a nil *T would make a non-nil Scorer
		}
		return s, nil
	}
}

// Compile-time checks: every scorer is a scheduler.Scorer, with the
// optional interfaces it relies on.
var (
	_ scheduler.Scorer          = (*prefix.Scorer)(nil)
	_ scheduler.PickObserver    = (*prefix.Scorer)(nil)
	_ scheduler.PoolObserver    = (*prefix.Scorer)(nil)
	_ scheduler.Scorer          = (*Session)(nil)
	_ scheduler.PoolObserver    = (*Session)(nil)
	_ scheduler.Scorer          = (*Queue)(nil)
	_ scheduler.Scorer          = (*KVCache)(nil)
	_ scheduler.Scorer          = (*InFlight)(nil)
	_ scheduler.Scorer          = (*PendingPrefill)(nil)
	_ scheduler.Scorer          = (*LoRA)(nil)
	_ scheduler.Scorer          = (*TokenLoad)(nil)
	_ scheduler.MatchConsumer   = (*TokenLoad)(nil)
	_ scheduler.Scorer          = (*TimeCost)(nil)
	_ scheduler.MatchConsumer   = (*TimeCost)(nil)
	_ scheduler.SecondsReporter = (*TimeCost)(nil)
	_ scheduler.MatchProducer   = (*prefix.Scorer)(nil)
	_ scheduler.StateFilter     = (*PrefixAffinity)(nil)
	_ scheduler.MatchConsumer   = (*PrefixAffinity)(nil)
)
