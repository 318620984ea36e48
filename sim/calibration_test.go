package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim/engine"
	"github.com/trimtab/trimtab/sim/scenario"
)

// TestShippedEngines: every shipped calibration loads and validates, at
// least five of them model other hardware or models than the default,
// and the A100 one spells out the default exactly.
func TestShippedEngines(t *testing.T) {
	names := EngineNames()
	if len(names) < 6 {
		t.Fatalf("shipped calibrations %v, want the default and at least five more", names)
	}
	for _, n := range names {
		e, name, err := LoadEngine(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if name != n {
			t.Errorf("LoadEngine(%q) named it %q", n, name)
		}
		sc := &scenario.Scenario{Engine: e, Servers: 4}
		for i := range 4 {
			cfg, declared := sc.ServerEngine(i, 1)
			if err := cfg.Validate(); err != nil || !(declared > 0) {
				t.Errorf("%s: server %d: %v, capacity %v", n, i, err, declared)
			}
		}
	}
	e, _, err := LoadEngine("a100-40gb-llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	// Every key but the adapter load times (not calibrated) is set:
	// nothing else of the base shows through.
	d := engine.DefaultConfig()
	if got := e.Apply(engine.Config{PrefixCaching: true, LoRALoadCPU: d.LoRALoadCPU, LoRALoadDisk: d.LoRALoadDisk}); got != d {
		t.Errorf("a100-40gb-llama-3.1-8b = %+v, want engine.DefaultConfig() %+v", got, engine.DefaultConfig())
	}
}

func TestEngineFileErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, yaml, want string }{
		{"unknown key", "num_blocks: 100\nstep_fixd: 1ms\n", "field step_fixd not found"},
		{"bad value", "num_blocks: -5\n", "engine.num_blocks: must be > 0"},
		{"negative step", "step_per_context_token: -1ns\n", "engine.step_per_context_token: -1ns, must be ≥ 0"},
		{"shares", "classes:\n  - {name: a, share: 0.5}\n  - {name: b, share: 0.4}\n", "engine.classes: shares sum to 0.9, want 1"},
		{"class key", "classes:\n  - {name: a, share: 1, max_num_seqs: -1}\n", "engine.classes[0]: engine.max_num_seqs: must be > 0"},
		{"class capacity", "classes:\n  - {name: a, share: 1, capacity: 100}\n", "engine.classes[0].capacity: 100, want in (0, 64]"},
		{"block size", "classes:\n  - {name: a, share: 1, block_size: 32}\n", "engine.classes[0].block_size: 32, but the pool's is 16"},
		{"nested", "classes:\n  - {name: a, share: 1, classes: [{name: b, share: 1}]}\n", "engine.classes[0].classes: classes cannot nest"},
		{"class name", "classes:\n  - {share: 1}\n", "engine.classes[0].name: must be set"},
	}
	for _, tt := range tests {
		path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte(tt.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := LoadEngine(path)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	if _, _, err := LoadEngine("no-such-gpu"); err == nil || !strings.Contains(err.Error(), "h100-80gb-llama-3.1-8b") {
		t.Errorf("unknown name: %v, want an error listing the shipped calibrations", err)
	}
}

// TestMixedPoolClasses: servers are dealt to the classes A, H, A, H …;
// an H100 server runs the H100's own step costs and KV (not the A100's
// on a faster clock) and declares capacity 3, times its scenario class's
// capacity.
func TestMixedPoolClasses(t *testing.T) {
	e, _, err := LoadEngine("mixed-a100-h100-llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	sc := &scenario.Scenario{Engine: e}
	for i, want := range []int{0, 1, 0, 1, 0, 1} {
		if got := e.ClassOf(i); got != want {
			t.Errorf("server %d: class %d, want %d", i, got, want)
		}
	}
	a, ca := sc.ServerEngine(0, 1)
	h, ch := sc.ServerEngine(1, 1)
	if a != engine.DefaultConfig() || ca != 1 {
		t.Errorf("server 0: %+v capacity %v, want the A100 default, 1", a, ca)
	}
	if h.StepFixed != 5753*time.Microsecond || h.StepPerDecodeSeq != 6*time.Microsecond || h.NumBlocks != 29205 || h.MaxBatchedTokens != 8192 || ch != 3 {
		t.Errorf("server 1: %+v capacity %v, want the H100's engine, 3", h, ch)
	}
	// A scenario class of capacity 2 doubles the H100's KV, halves its
	// step costs and declares 2 × 3 = 6.
	h2, c2 := sc.ServerEngine(1, 2)
	if h2.NumBlocks != 58410 || h2.StepFixed != 5753*time.Microsecond/2 || c2 != 6 {
		t.Errorf("H100 at scenario capacity 2: %d blocks, step %v, capacity %v; want 58410, 2.8765ms, 6", h2.NumBlocks, h2.StepFixed, c2)
	}
	// Three classes of ½, ¼, ¼: A B C A A B C A …
	three := scenario.EngineOverrides{Classes: []scenario.EngineClass{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25}, {Name: "c", Share: 0.25}}}
	count := [3]int{}
	for i := range 8 {
		count[three.ClassOf(i)]++
	}
	if count != [3]int{4, 2, 2} {
		t.Errorf("8 servers over shares ½ ¼ ¼: %v, want [4 2 2]", count)
	}
}

// TestCalibrationChangesPrefill: one server, unique 1,024-token prompts,
// one output token, arrivals far apart: every TTFT is one prefill step of
// the calibration, computed by hand as
//
//	step_fixed + 1024·step_per_prefill_token
//	  + prefill_attention_per_1k · (1024·1023/2 = 523,776 pairs) / 1000
func TestCalibrationChangesPrefill(t *testing.T) {
	base := `
name: prefill
duration: 30s
servers: 1
workload: {kind: uniform, question_tokens: 1024, output_tokens: 1}
load: {mode: open, levels: [0.2]}
`
	tests := []struct {
		engine string
		want   float64 // ms
	}{
		// 13 ms + 71.68 ms + 523.776 × 2.8 µs (1.466572 ms) = 86.146572 ms
		{"a100-40gb-llama-3.1-8b", 86.146572},
		// 5.753 ms + 17.664 ms + 523.776 × 0.87 µs (0.455685 ms) = 23.872685 ms
		{"h100-80gb-llama-3.1-8b", 23.872685},
		// 70 ms + 186.368 ms + 523.776 × 7.1 µs (3.718809 ms) = 260.086809 ms
		{"l4-24gb-llama-3.1-8b", 260.086809},
	}
	pols, _ := Policies([]string{PolicyRoundRobin})
	for _, tt := range tests {
		sc, err := ParseScenario([]byte(base), "")
		if err != nil {
			t.Fatal(err)
		}
		e, name, err := LoadEngine(tt.engine)
		if err != nil {
			t.Fatal(err)
		}
		sc.Engine, sc.EngineName = e, name
		r, err := Run(RunConfig{Scenario: sc, Policy: pols[0], Level: 0.2, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.TTFT) < 3 || r.Misses > 0 {
			t.Fatalf("%s: %d requests, %d missed; want a few, none missed", tt.engine, len(r.TTFT), r.Misses)
		}
		for _, got := range []float64{r.TTFT[0], r.TTFT[len(r.TTFT)-1]} {
			if d := got - tt.want; d > 1e-6 || d < -1e-6 {
				t.Errorf("%s: TTFT %.6f ms, want %.6f ms", tt.engine, got, tt.want)
			}
		}
		if s := r.Summary(); s.Engine != tt.engine {
			t.Errorf("summary engine %q, want %q", s.Engine, tt.engine)
		}
	}
}
