package scorers

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
)

// Scorer type strings as used in profiles (the `type` of a scorer entry).
const (
	TypePrefix   = "prefix"
	TypeQueue    = "queue"
	TypeKVCache  = "kvcache"
	TypeInFlight = "inflight"
	TypeSession  = "session"
	TypeLoRA     = "lora"

	TypePendingPrefill = "pending-prefill"
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
		TypePrefix: func(name string, decode func(any) error, deps Deps) (scheduler.Scorer, error) {
			cfg := DefaultPrefixConfig()
			if err := decodeInto(name, decode, &cfg); err != nil {
				return nil, err
			}
			return NewPrefix(name, cfg, deps)
		},
		TypeQueue: func(name string, decode func(any) error, deps Deps) (scheduler.Scorer, error) {
			cfg := DefaultQueueConfig()
			if err := decodeInto(name, decode, &cfg); err != nil {
				return nil, err
			}
			return NewQueue(name, cfg, deps)
		},
		TypeKVCache: func(name string, decode func(any) error, deps Deps) (scheduler.Scorer, error) {
			cfg := DefaultKVCacheConfig()
			if err := decodeInto(name, decode, &cfg); err != nil {
				return nil, err
			}
			return NewKVCache(name, cfg, deps)
		},
		TypeInFlight: func(name string, decode func(any) error, deps Deps) (scheduler.Scorer, error) {
			cfg := DefaultInFlightConfig()
			if err := decodeInto(name, decode, &cfg); err != nil {
				return nil, err
			}
			return NewInFlight(name, cfg, deps)
		},
		TypeSession: func(name string, decode func(any) error, deps Deps) (scheduler.Scorer, error) {
			cfg := DefaultSessionConfig()
			if err := decodeInto(name, decode, &cfg); err != nil {
				return nil, err
			}
			return NewSession(name, cfg, deps)
		},
		TypePendingPrefill: func(name string, decode func(any) error, deps Deps) (scheduler.Scorer, error) {
			cfg := DefaultPendingPrefillConfig()
			if err := decodeInto(name, decode, &cfg); err != nil {
				return nil, err
			}
			return NewPendingPrefill(name, cfg, deps)
		},
		TypeLoRA: func(name string, decode func(any) error, deps Deps) (scheduler.Scorer, error) {
			cfg := DefaultLoRAConfig()
			if err := decodeInto(name, decode, &cfg); err != nil {
				return nil, err
			}
			return NewLoRA(name, cfg, deps)
		},
	}
}

func decodeInto(name string, decode func(any) error, cfg any) error {
	if decode == nil {
		return nil
	}
	if err := decode(cfg); err != nil {
		return fmt.Errorf("scorer %q: params: %w", name, err)
	}
	return nil
}

// Compile-time checks of the optional interfaces each scorer relies on.
var (
	_ scheduler.PickObserver = (*Prefix)(nil)
	_ scheduler.PoolObserver = (*Prefix)(nil)
	_ scheduler.PoolObserver = (*Session)(nil)
	_ scheduler.Scorer       = (*Queue)(nil)
	_ scheduler.Scorer       = (*KVCache)(nil)
	_ scheduler.Scorer       = (*InFlight)(nil)
	_ scheduler.Scorer       = (*LoRA)(nil)
)
