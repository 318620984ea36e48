package scorers

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
	"github.com/trimtab/trimtab/scorers/prefix"
)

func TestInTreeBuildsEveryScorer(t *testing.T) {
	want := map[string]scheduler.Category{
		TypePrefix:         scheduler.CategoryAffinity,
		TypeSession:        scheduler.CategoryAffinity,
		TypeLoRA:           scheduler.CategoryAffinity,
		TypeQueue:          scheduler.CategoryDistribution,
		TypeKVCache:        scheduler.CategoryDistribution,
		TypeInFlight:       scheduler.CategoryDistribution,
		TypePendingPrefill: scheduler.CategoryDistribution,
		TypeTokenLoad:      scheduler.CategoryDistribution,
		TypeTimeCost:       scheduler.CategoryDistribution,
	}
	reg := InTree()
	if len(reg) != len(want) {
		t.Errorf("InTree has %d factories, want %d", len(reg), len(want))
	}
	// One registry for all: every scorer's metrics must coexist.
	pr := prometheus.NewPedanticRegistry()
	for typ, cat := range want {
		f, ok := reg[typ]
		if !ok {
			t.Errorf("InTree lacks %q", typ)
			continue
		}
		for _, name := range []string{typ, typ + "-2"} {
			sc, err := f(name, scorertest.Decoder(nil), Deps{Registerer: pr})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if sc.Category() != cat {
				t.Errorf("%s: category %v, want %v", name, sc.Category(), cat)
			}
		}
	}
	if _, err := pr.Gather(); err != nil {
		t.Errorf("gather: %v", err)
	}
}

func TestInTreeDecodesParams(t *testing.T) {
	reg := InTree()
	sc, err := reg[TypePrefix]("p", scorertest.Decoder(map[string]any{"block_size": 16, "max_blocks": 8, "capacity": 100, "shards": 4, "learn": "pick"}), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	p := sc.(*prefix.Scorer)
	// Unset fields keep their defaults (bytes_per_token 4).
	if want := (prefix.Config{BlockSize: 16, BytesPerToken: 4, MaxBlocks: 8, Capacity: 100, Shards: 4, Learn: prefix.LearnPick}); p.Config() != want {
		t.Errorf("prefix config %+v, want %+v", p.Config(), want)
	}
	sc, err = reg[TypeSession]("s", scorertest.Decoder(map[string]any{"idle_timeout": "90s", "load_factor": 2.0}), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if s := sc.(*Session); s.cfg.IdleTimeout != 90*time.Second || s.cfg.LoadFactor != 2 || s.cfg.MaxSessions != 1<<16 {
		t.Errorf("session config %+v", s.cfg)
	}
}

func TestInTreeRejectsBadParams(t *testing.T) {
	tests := []struct {
		typ    string
		params map[string]any
		want   string // substring of the error
	}{
		{TypePrefix, map[string]any{"block_size": 0}, "prefix.block_size: must be > 0"},
		{TypePrefix, map[string]any{"bytes_per_token": -1}, "prefix.bytes_per_token"},
		{TypePrefix, map[string]any{"max_blocks": 0}, "prefix.max_blocks"},
		{TypePrefix, map[string]any{"capacity": 0}, "prefix.capacity"},
		{TypePrefix, map[string]any{"shards": 3}, "prefix.shards: must be a power of two"},
		{TypePrefix, map[string]any{"learn": "done"}, `prefix.learn: must be "first_byte", "pick" or "join_new", got "done"`},
		{TypePrefix, map[string]any{"learn": "join_new", "join_kv_util": 1.5}, "prefix.join_kv_util: must be in [0, 1], got 1.5"},
		{TypePrefix, map[string]any{"join_kv_util": 0.6}, `prefix.join_kv_util: applies to learn: join_new only (learn is "first_byte")`},
		{TypePrefix, map[string]any{"learn": "join_new", "join_cache_fill": -0.1}, "prefix.join_cache_fill: must be in [0, 1], got -0.1"},
		{TypePrefix, map[string]any{"learn": "pick", "join_cache_fill": 0.5}, `prefix.join_cache_fill: applies to learn: join_new only (learn is "pick")`},
		{TypePrefix, map[string]any{"learn": "join_new", "join_cache_fill": 0.5, "join_cache_room": -1}, "prefix.join_cache_room: must be in [0, 1e6] prompts, got -1"},
		{TypePrefix, map[string]any{"learn": "join_new", "join_cache_room": 32}, "prefix.join_cache_room: applies with join_cache_fill only (join_cache_fill is 0)"},
		{TypePrefix, map[string]any{"learn": "join_new", "join_spread_fill": 1.2}, "prefix.join_spread_fill: must be in [0, 1], got 1.2"},
		{TypePrefix, map[string]any{"join_spread_fill": 0.8}, `prefix.join_spread_fill: applies to learn: join_new only (learn is "first_byte")`},
		{TypePrefix, map[string]any{"block_sise": 64}, "block_sise"}, // unknown key
		{TypeSession, map[string]any{"load_factor": 0.5}, "session.load_factor"},
		{TypeSession, map[string]any{"max_sessions": 0}, "session.max_sessions"},
		{TypeSession, map[string]any{"idle_timeout": "-1s"}, "session.idle_timeout"},
		{TypeSession, map[string]any{"virtual_nodes": 0}, "session.virtual_nodes"},
		{TypeSession, map[string]any{"shards": 0}, "session.shards"},
		{TypeQueue, map[string]any{"anything": 1}, "anything"},
		{TypeKVCache, map[string]any{"anything": 1}, "anything"},
		{TypeInFlight, map[string]any{"anything": 1}, "anything"},
		{TypeLoRA, map[string]any{"anything": 1}, "anything"},
	}
	for _, tt := range tests {
		t.Run(tt.typ+"/"+tt.want, func(t *testing.T) {
			_, err := InTree()[tt.typ]("x", scorertest.Decoder(tt.params), Deps{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), `scorer "x"`) {
				t.Errorf("error %q does not name the scorer", err)
			}
		})
	}
}

func TestDecodeErrorIsWrapped(t *testing.T) {
	sentinel := errors.New("boom")
	_, err := InTree()[TypeQueue]("q", func(any) error { return sentinel }, Deps{})
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %v does not wrap the decode error", err)
	}
}

func TestDuplicateMetricsRegistrationFails(t *testing.T) {
	pr := prometheus.NewRegistry()
	if _, err := prefix.New("same", prefix.DefaultConfig(), prefix.Deps{Registerer: pr}); err != nil {
		t.Fatal(err)
	}
	if _, err := prefix.New("same", prefix.DefaultConfig(), prefix.Deps{Registerer: pr}); err == nil {
		t.Fatal("second prefix scorer with the same name registered its metrics")
	}
}
