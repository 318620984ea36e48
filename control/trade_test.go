package control

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/scheduler"
	clocktesting "k8s.io/utils/clock/testing"
)

// tradeConfig is adaptive mode at the profile's own calm budget with the
// trade law on: the second shape is prefix 1, queue 6 (bias, kv and lora
// keep 0.5, 2 and 1).
func tradeConfig() Config {
	c := DefaultConfig()
	c.Enabled = true
	c.Trade.Enabled = true
	c.Trade.Weights = map[string]float64{"prefix": 1, "queue": 6}
	return c
}

func TestTradeNext(t *testing.T) {
	cfg := DefaultTradeConfig() // step 0.25
	cfg.SpreadOn, cfg.SpreadOff = 2, 1.5
	cfg.BatchOn, cfg.BatchOff, cfg.DecodeWeights = 0.05, 0.03, map[string]float64{"prefix": 1, "queue": 12}
	calm, reb := configurator.ModeCalm, configurator.ModeRebalance
	tests := []tradeCase{
		// 1.2 < spread_on 2: a pool of equals stays at the profile's shape.
		{"equals", TradeState{}, TradeInput{Spread: 1.2, Endpoints: 4, Declared: 1, LoopMode: calm}, TradeState{}, ""},
		// 1.7 is inside the band (1.5, 2): a homogeneous pool stays one.
		{"band from homogeneous", TradeState{}, TradeInput{Spread: 1.7, Endpoints: 4, Declared: 1, LoopMode: calm}, TradeState{}, ""},
		// 2.0 ≥ spread_on 2: heterogeneous; mix 0 + 0.25 = 0.25.
		{"crosses on", TradeState{}, TradeInput{Spread: 2, Endpoints: 4, Declared: 1, LoopMode: calm}, TradeState{Mix: 0.25, Heterogeneous: true}, "speed spread 2.00 (learned prefill, 4 endpoints) (heterogeneous: crossed spread_on 2.00): mix 0 → 0.25"},
		// 3.8 from one counted endpoint says nothing: classification and mix hold.
		{"one endpoint", TradeState{}, TradeInput{Spread: 3.8, Endpoints: 1, Declared: 1, LoopMode: calm}, TradeState{}, ""},
		// 1.8 > spread_off 1.5: still heterogeneous; 0.5 + 0.25 = 0.75.
		{"band from heterogeneous", TradeState{Mix: 0.5, Heterogeneous: true}, TradeInput{Spread: 1.8, Endpoints: 4, Declared: 1, LoopMode: calm}, TradeState{Mix: 0.75, Heterogeneous: true}, "mix 0.5 → 0.75"},
		// 1.5 ≤ spread_off 1.5: homogeneous again; 0.5 − 0.25 = 0.25.
		{"crosses off", TradeState{Mix: 0.5, Heterogeneous: true}, TradeInput{Spread: 1.5, Endpoints: 4, Declared: 1, LoopMode: calm}, TradeState{Mix: 0.25, Heterogeneous: false}, "homogeneous: crossed spread_off 1.50"},
		// Out of calm the classification follows the spread, the mix holds.
		{"rebalance holds", TradeState{}, TradeInput{Spread: 3, Endpoints: 4, Declared: 1, LoopMode: reb}, TradeState{Mix: 0, Heterogeneous: true}, ""},
		// 0.9 + 0.25 = 1.15, capped at 1.
		{"capped at 1", TradeState{Mix: 0.9, Heterogeneous: true}, TradeInput{Spread: 3, Endpoints: 4, Declared: 1, LoopMode: calm}, TradeState{Mix: 1, Heterogeneous: true}, "mix 0.9 → 1"},
		// At the target nothing moves.
		{"settled", TradeState{Mix: 1, Heterogeneous: true}, TradeInput{Spread: 3.8, Endpoints: 6, Declared: 1, LoopMode: calm}, TradeState{Mix: 1, Heterogeneous: true}, ""},
		// No counted endpoint: the heterogeneous state and its mix hold.
		{"no endpoints", TradeState{Mix: 1, Heterogeneous: true}, TradeInput{Spread: 1, Endpoints: 0, Declared: 1, LoopMode: calm}, TradeState{Mix: 1, Heterogeneous: true}, ""},
		// Declared capacities 1 and 3 (spread 3 ≥ 2) count before anything
		// is learned, and move the mix to the target at once: configuration,
		// not an estimate to smooth.
		{"declared", TradeState{}, TradeInput{Spread: 1, Endpoints: 0, Declared: 3, LoopMode: calm}, TradeState{Mix: 1, Heterogeneous: true}, "speed spread 3.00 (declared capacity) (heterogeneous: crossed spread_on 2.00): mix 0 → 1 toward the trade shape (step 1)"},
		// Before the configurator's first step (static: the loop's first
		// tick) the law acts too: the first requests route in its shape.
		{"declared at the first tick", TradeState{}, TradeInput{Spread: 1, Endpoints: 0, Declared: 3, LoopMode: configurator.ModeStatic}, TradeState{Mix: 1, Heterogeneous: true}, "mix 0 → 1"},
		// The learned spread decides when it is the larger (3.8 > 3), and
		// moves the mix by a step.
		{"learned above declared", TradeState{}, TradeInput{Spread: 3.8, Endpoints: 4, Declared: 3, LoopMode: calm}, TradeState{Mix: 0.25, Heterogeneous: true}, "speed spread 3.80 (learned prefill, 4 endpoints) (heterogeneous: crossed spread_on 2.00): mix 0 → 0.25 toward the trade shape (step 0.25)"},
		// A declared spread of 3 keeps the pool heterogeneous even when the
		// learned one reads 1.1 ≤ 1.5: max(3, 1.1) = 3.
		{"declared holds", TradeState{Mix: 1, Heterogeneous: true}, TradeInput{Spread: 1.1, Endpoints: 4, Declared: 3, LoopMode: calm}, TradeState{Mix: 1, Heterogeneous: true}, ""},
		// Back to homogeneous (learned 1.0, declared 1): the way back is
		// always a step, a reading rather than configuration.
		{"declared equals steps back", TradeState{Mix: 1, Heterogeneous: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, LoopMode: calm}, TradeState{Mix: 0.75, Heterogeneous: false}, "mix 1 → 0.75 toward the trade shape (step 0.25)"},
		// A declared spread of 1.7 alone is inside the band and says nothing.
		{"declared in band", TradeState{}, TradeInput{Spread: 1, Endpoints: 0, Declared: 1.7, LoopMode: calm}, TradeState{}, ""},
		// A pool of equals whose decode line reads 0.28 (a sequence adds
		// 28 % of a step) ≥ batch_on 0.05: the first and the second such
		// reading are counted, nothing moves (a transient reads so for
		// one or two evaluations)...
		{"first batch reading", TradeState{}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, LoopMode: calm},
			TradeState{BatchHeld: 1, BatchLow: 0.28}, ""},
		{"second batch reading", TradeState{BatchHeld: 1, BatchLow: 0.28}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.3, BatchEndpoints: 4, LoopMode: calm},
			TradeState{BatchHeld: 2, BatchLow: 0.28}, ""},
		// ... one below batch_on forgets them, and an evaluation with
		// nothing learned keeps the count ...
		{"transient forgotten", TradeState{BatchHeld: 2, BatchLow: 0.28}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.04, BatchEndpoints: 4, LoopMode: calm},
			TradeState{}, ""},
		{"count holds unlearned", TradeState{BatchHeld: 2, BatchLow: 0.28}, TradeInput{Spread: 1, Endpoints: 0, Declared: 1, LoopMode: calm},
			TradeState{BatchHeld: 2, BatchLow: 0.28}, ""},
		// ... and the third makes the pool decode-bound, in the
		// decode-bound shape; 0.28 ≥ 2 × batch_on, no estimate near the
		// threshold, at every reading of the hold, so the mix moves at once.
		{"decode-bound", TradeState{BatchHeld: 2, BatchLow: 0.28}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 1, DecodeBound: true, BatchLow: 0.28, Decode: true}, "batch cost 0.28 (learned decode line, 4 endpoints) (decode-bound: crossed batch_on 0.05): mix 0 → 1 toward the decode-bound shape (step 1)"},
		// 0.07 is past batch_on but within twice it: a step at a time.
		{"decode-bound near the threshold", TradeState{BatchHeld: 2, BatchLow: 0.07}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.07, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 0.25, DecodeBound: true, BatchLow: 0.07, Decode: true}, "mix 0 → 0.25 toward the decode-bound shape (step 0.25)"},
		// 0.28 now, but the hold read 0.07 once: a reading that rose
		// through the hold moves a step, and so does the next.
		{"decode-bound rising through the hold", TradeState{BatchHeld: 2, BatchLow: 0.07}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 0.25, DecodeBound: true, BatchLow: 0.07, Decode: true}, "mix 0 → 0.25 toward the decode-bound shape (step 0.25)"},
		{"still a step", TradeState{Mix: 0.25, DecodeBound: true, BatchLow: 0.07, Decode: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.3, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 0.5, DecodeBound: true, BatchLow: 0.07, Decode: true}, "mix 0.25 → 0.5 toward the decode-bound shape (step 0.25)"},
		// A hold that read high throughout, but a reading now within twice
		// batch_on: a step.
		{"high hold, lower reading", TradeState{Mix: 0.25, DecodeBound: true, BatchLow: 0.28, Decode: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.08, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 0.5, DecodeBound: true, BatchLow: 0.28, Decode: true}, "mix 0.25 → 0.5 toward the decode-bound shape (step 0.25)"},
		// A heterogeneous pool counts the hold too (the trade shape is in
		// force whatever the batch cost; the count says what follows it).
		{"hold while heterogeneous", TradeState{Mix: 1, Heterogeneous: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 3, Batch: 0.28, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 1, Heterogeneous: true, BatchHeld: 1, BatchLow: 0.28}, ""},
		// A dense model's 0.005 stays below: nothing moves.
		{"dense", TradeState{}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.005, BatchEndpoints: 4, LoopMode: calm}, TradeState{}, ""},
		// 0.04 is inside the band (0.03, 0.05): either state holds.
		{"batch band from equals", TradeState{}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.04, BatchEndpoints: 4, LoopMode: calm}, TradeState{}, ""},
		{"batch band from decode-bound", TradeState{Mix: 1, DecodeBound: true, Decode: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.04, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 1, DecodeBound: true, Decode: true}, ""},
		// Nothing learned of the decode line: the state holds.
		{"batch unknown", TradeState{Mix: 1, DecodeBound: true, Decode: true}, TradeInput{Spread: 1, Endpoints: 0, Declared: 1, LoopMode: calm},
			TradeState{Mix: 1, DecodeBound: true, Decode: true}, ""},
		// 0.03 ≤ batch_off: back to the profile's shape a step at a time,
		// still blending the decode-bound shape until the mix is 0.
		{"batch crosses off", TradeState{Mix: 1, DecodeBound: true, Decode: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.03, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 0.75, Decode: true}, "(not decode-bound: batch_on 0.05, batch_off 0.03): mix 1 → 0.75 toward the decode-bound shape"},
		{"decode shape released at 0", TradeState{Mix: 0.25, Decode: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.01, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Decode: true}, "mix 0.25 → 0"},
		{"decode shape forgotten at 0", TradeState{Decode: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.01, BatchEndpoints: 4, LoopMode: calm},
			TradeState{}, ""},
		// Heterogeneous and decode-bound: the trade shape (declared 3 moves it at once).
		{"heterogeneous wins", TradeState{BatchHeld: 2, BatchLow: 0.28}, TradeInput{Spread: 1, Endpoints: 4, Declared: 3, Batch: 0.28, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 1, Heterogeneous: true, DecodeBound: true, BatchLow: 0.28}, "mix 0 → 1 toward the trade shape (step 1)"},
		// From the trade shape to the decode-bound one: back to the
		// profile first, a step at a time (a learned spread)...
		{"trade to decode steps back", TradeState{Mix: 0.25, Heterogeneous: true, DecodeBound: true}, TradeInput{Spread: 1.2, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, LoopMode: calm},
			TradeState{DecodeBound: true}, "mix 0.25 → 0 toward the trade shape"},
		// From the decode-bound shape to a declared heterogeneous pool:
		// back to the profile a step at a time (a declared spread jumps
		// only on the way up), then to the trade shape at once.
		{"decode to declared trade steps back", TradeState{Mix: 1, DecodeBound: true, Decode: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 3, Batch: 0.28, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 0.75, Heterogeneous: true, DecodeBound: true, Decode: true}, "mix 1 → 0.75 toward the decode-bound shape (step 0.25)"},
		{"then to the declared trade shape", TradeState{Heterogeneous: true, DecodeBound: true, Decode: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 3, Batch: 0.28, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 1, Heterogeneous: true, DecodeBound: true}, "mix 0 → 1 toward the trade shape (step 1)"},
		// ... then toward the decode-bound shape.
		{"then to the decode shape", TradeState{DecodeBound: true, BatchLow: 0.28}, TradeInput{Spread: 1.2, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 1, DecodeBound: true, BatchLow: 0.28, Decode: true}, "mix 0 → 1 toward the decode-bound shape"},
	}
	// A reload that turns batch_on off releases a decode-bound state: the
	// pool is no longer decode-bound and the mix steps back to the profile.
	off := cfg
	off.BatchOn, off.BatchOff = 0, 0
	if got, why := off.Next(TradeState{Mix: 1, DecodeBound: true, BatchLow: 0.28, Decode: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, LoopMode: calm}); got != (TradeState{Mix: 0.75, Decode: true}) || !strings.Contains(why, "mix 1 → 0.75 toward the decode-bound shape") {
		t.Errorf("batch_on turned off: state %+v (%q), want mix 0.75 in the decode-bound shape, no longer decode-bound", got, why)
	}
	// ... and forgets a hold in progress, so that turning it on again
	// starts the hold afresh.
	if got, _ := off.Next(TradeState{BatchHeld: 2, BatchLow: 0.3}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.01, BatchEndpoints: 4, LoopMode: calm}); got != (TradeState{}) {
		t.Errorf("batch_on turned off mid-hold: state %+v, want the hold forgotten", got)
	}
	runTradeCases(t, cfg, tests)
}

// TestTradeNextSlots: the KV-slot input (slots_on 4, slots_off 6, its own
// shape) beside the batch cost (batch_on 0.05, batch_off 0.03).
func TestTradeNextSlots(t *testing.T) {
	cfg := DefaultTradeConfig() // step 0.25
	cfg.SpreadOn, cfg.SpreadOff = 2, 1.5
	cfg.BatchOn, cfg.BatchOff, cfg.DecodeWeights = 0.05, 0.03, map[string]float64{"prefix": 1, "queue": 12}
	cfg.SlotsOn, cfg.SlotsOff, cfg.SlotWeights = 4, 6, map[string]float64{"queue": 20}
	calm := configurator.ModeCalm
	in := func(slots float64, n int) TradeInput {
		return TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.005, BatchEndpoints: 4, Slots: slots, SlotEndpoints: n, LoopMode: calm}
	}
	tests := []tradeCase{
		// 12 slots, or none read: nothing moves.
		{"roomy", TradeState{}, in(12, 4), TradeState{}, ""},
		{"no reading", TradeState{}, in(0, 0), TradeState{}, ""},
		// 5 is inside the band (4, 6): a pool that was not slot-bound stays so.
		{"band from equals", TradeState{}, in(5, 4), TradeState{}, ""},
		// 2.2 ≤ slots_on 4: the first reading holds; a reading above
		// slots_on forgets it, no reading keeps it.
		{"first reading holds", TradeState{}, in(2.2, 4), TradeState{SlotHeld: 1}, ""},
		{"a reading above forgets", TradeState{SlotHeld: 1}, in(4.5, 4), TradeState{}, ""},
		{"no reading keeps the count", TradeState{SlotHeld: 1}, in(0, 0), TradeState{SlotHeld: 1}, ""},
		// The second in a row: slot-bound, and the mix moves to the
		// slot-bound shape at once.
		{"slot-bound", TradeState{SlotHeld: 1}, in(2.2, 4), TradeState{Mix: 1, SlotBound: true, Decode: true, Slot: true},
			"KV slots 2.2 (4 endpoints) (slot-bound: crossed slots_on 4): mix 0 → 1 toward the slot-bound shape (step 1)"},
		// Inside the band the state holds; no reading holds it too.
		{"band from slot-bound", TradeState{Mix: 1, SlotBound: true, Decode: true, Slot: true}, in(5, 4), TradeState{Mix: 1, SlotBound: true, Decode: true, Slot: true}, ""},
		{"no reading holds", TradeState{Mix: 1, SlotBound: true, Decode: true, Slot: true}, in(0, 0), TradeState{Mix: 1, SlotBound: true, Decode: true, Slot: true}, ""},
		// 6 ≥ slots_off: back a step at a time, in the slot-bound shape.
		{"crosses off", TradeState{Mix: 1, SlotBound: true, Decode: true, Slot: true}, in(6, 4), TradeState{Mix: 0.75, Decode: true, Slot: true},
			"(not slot-bound: slots_on 4, slots_off 6): mix 1 → 0.75 toward the slot-bound shape (step 0.25)"},
		{"released at 0", TradeState{Decode: true, Slot: true}, in(12, 4), TradeState{}, ""},
		// Decode-bound too: the slot-bound shape.
		{"both", TradeState{BatchHeld: 2, BatchLow: 0.28, SlotHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, Slots: 2, SlotEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 1, DecodeBound: true, BatchLow: 0.28, SlotBound: true, Decode: true, Slot: true}, "toward the slot-bound shape (step 1)"},
		// In the decode-bound shape when the pool turns slot-bound: back to
		// the profile a step at a time, then to the slot-bound shape.
		{"decode to slot steps back", TradeState{Mix: 1, DecodeBound: true, Decode: true, SlotHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, Slots: 2, SlotEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 0.75, DecodeBound: true, SlotBound: true, Decode: true}, "mix 1 → 0.75 toward the decode-bound shape"},
		{"then the slot shape", TradeState{DecodeBound: true, SlotBound: true, Decode: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, Slots: 2, SlotEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 1, DecodeBound: true, SlotBound: true, Decode: true, Slot: true}, "mix 0 → 1 toward the slot-bound shape"},
		// Heterogeneous and slot-bound: the trade shape.
		{"heterogeneous wins", TradeState{SlotHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 3, Slots: 2, SlotEndpoints: 4, LoopMode: calm},
			TradeState{Mix: 1, Heterogeneous: true, SlotBound: true}, "mix 0 → 1 toward the trade shape"},
		// Out of calm the state follows the reading (and at mix 0 names
		// the shape), the mix holds.
		{"rebalance holds", TradeState{SlotHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Slots: 2, SlotEndpoints: 4, LoopMode: configurator.ModeRebalance},
			TradeState{SlotBound: true, Decode: true, Slot: true}, ""},
	}
	runTradeCases(t, cfg, tests)
	// Without slot_weights a slot-bound pool takes the decode-bound shape.
	noShape := cfg
	noShape.SlotWeights = nil
	if got, why := noShape.Next(TradeState{SlotHeld: 1}, in(2, 4)); got != (TradeState{Mix: 1, SlotBound: true, Decode: true}) || !strings.Contains(why, "toward the decode-bound shape (step 1)") {
		t.Errorf("no slot_weights: %+v (%q), want the decode-bound shape at once", got, why)
	}
	// A reload that turns slots_on off releases the state: back a step.
	off := cfg
	off.SlotsOn, off.SlotsOff = 0, 0
	if got, why := off.Next(TradeState{Mix: 1, SlotBound: true, Decode: true, Slot: true}, in(2, 4)); got != (TradeState{Mix: 0.75, Decode: true, Slot: true}) || strings.Contains(why, "KV slots") {
		t.Errorf("slots_on turned off: %+v (%q), want mix 0.75 in the slot-bound shape, no longer slot-bound, no slots in the reason", got, why)
	}
	// ... and forgets a hold in progress.
	if got, _ := off.Next(TradeState{SlotHeld: 1}, in(2, 4)); got != (TradeState{}) {
		t.Errorf("slots_on turned off mid-hold: %+v, want the hold forgotten", got)
	}
}

func TestTradeNextPrompt(t *testing.T) {
	cfg := DefaultTradeConfig() // step 0.25
	cfg.SpreadOn, cfg.SpreadOff = 2, 1.5
	cfg.BatchOn, cfg.BatchOff, cfg.DecodeWeights = 0.05, 0.03, map[string]float64{"prefix": 1, "queue": 12}
	cfg.SlotsOn, cfg.SlotsOff, cfg.SlotWeights = 4, 6, map[string]float64{"queue": 20}
	cfg.PromptOn, cfg.PromptOff = 6000, 4000
	calm := configurator.ModeCalm
	in := func(prompt float64) TradeInput {
		return TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.005, BatchEndpoints: 4, Slots: 40, SlotEndpoints: 4, Prompt: prompt, PromptPicks: 100, LoopMode: calm}
	}
	none := in(0)
	none.PromptPicks = 0
	heavy := TradeState{Mix: 1, PrefillHeavy: true}
	tests := []tradeCase{
		// 400 or 2,300 uncached prompt tokens, or no reading: nothing
		// moves.
		{"chat", TradeState{}, in(400), TradeState{}, ""},
		{"below prompt_on", TradeState{}, in(2300), TradeState{}, ""},
		{"no reading", TradeState{}, none, TradeState{}, ""},
		// 12,000 ≥ prompt_on 6,000: the first reading holds, one below forgets it,
		// none keeps it.
		{"first reading holds", TradeState{}, in(12000), TradeState{PromptHeld: 1}, ""},
		{"a reading below forgets", TradeState{PromptHeld: 1}, in(5900), TradeState{}, ""},
		{"no reading keeps the count", TradeState{PromptHeld: 1}, none, TradeState{PromptHeld: 1}, ""},
		// The second in a row: prefill-heavy, and the mix moves to the
		// trade shape at once.
		{"prefill-heavy", TradeState{PromptHeld: 1}, in(12000), heavy,
			"uncached prompt 12000 tokens (mean of 100 picks) (prefill-heavy: crossed prompt_on 6000): mix 0 → 1 toward the trade shape (step 1)"},
		// Inside the band (4,000, 6,000) or with no reading it holds.
		{"band holds", heavy, in(5000), heavy, ""},
		{"no reading holds", heavy, none, heavy, ""},
		// 4,000 ≤ prompt_off: back a step at a time.
		{"crosses off", heavy, in(4000), TradeState{Mix: 0.75},
			"(not prefill-heavy: prompt_on 6000, prompt_off 4000): mix 1 → 0.75 toward the trade shape (step 0.25)"},
		// A window of fully cached picks reads 0, a reading: at or below
		// prompt_off.
		{"all cached", heavy, in(0), TradeState{Mix: 0.75}, "uncached prompt 0 tokens (mean of 100 picks) (not prefill-heavy"},
		// While a slot reading at or below slots_on is held, the trade
		// shape waits; the second slot reading takes the slot-bound shape.
		{"a slot hold defers", TradeState{PromptHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Slots: 2, SlotEndpoints: 4, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{PrefillHeavy: true, SlotHeld: 1}, ""},
		// In the trade shape, one slot reading at or below slots_on moves
		// nothing (the second makes the pool slot-bound, and the mix steps
		// back toward the slot-bound shape).
		{"a slot hold in the trade shape", heavy, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Slots: 2, SlotEndpoints: 4, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{Mix: 1, PrefillHeavy: true, SlotHeld: 1}, ""},
		// Decode-bound too, at twice batch_on: the mix still waits at 0
		// (not a move to the decode-bound shape and back).
		{"a slot hold defers a decode-bound pool", TradeState{PrefillHeavy: true, DecodeBound: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, Slots: 2, SlotEndpoints: 4, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{PrefillHeavy: true, DecodeBound: true, SlotHeld: 1}, ""},
		// A slot reading above slots_on forgets the hold: the trade shape.
		{"a forgotten slot hold", TradeState{PrefillHeavy: true, DecodeBound: true, SlotHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, Slots: 4.5, SlotEndpoints: 4, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{Mix: 1, PrefillHeavy: true, DecodeBound: true}, "mix 0 → 1 toward the trade shape (step 1)"},
		// No slot reading: the hold is kept but does not make the trade
		// shape wait.
		{"no slot reading does not wait", TradeState{PrefillHeavy: true, SlotHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{Mix: 1, PrefillHeavy: true, SlotHeld: 1}, "mix 0 → 1 toward the trade shape (step 1)"},
		{"then the slot-bound shape", TradeState{PrefillHeavy: true, SlotHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Slots: 2, SlotEndpoints: 4, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{Mix: 1, PrefillHeavy: true, SlotBound: true, Decode: true, Slot: true}, "toward the slot-bound shape (step 1)"},
		// Decode-bound too: the trade shape, at once.
		{"over decode-bound", TradeState{BatchHeld: 2, BatchLow: 0.28, PromptHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{Mix: 1, DecodeBound: true, BatchLow: 0.28, PrefillHeavy: true}, "(decode-bound: crossed batch_on 0.05), uncached prompt 12000 tokens (mean of 100 picks) (prefill-heavy: crossed prompt_on 6000): mix 0 → 1 toward the trade shape (step 1)"},
		// A decode-bound pool in its shape when its traffic turns
		// prefill-heavy: back to the profile a step at a time, then to
		// the trade shape; and when the traffic is ordinary again, back a
		// step at a time, then to the decode-bound shape.
		{"decode to heavy steps back", TradeState{Mix: 1, DecodeBound: true, Decode: true, PromptHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{Mix: 0.75, DecodeBound: true, PrefillHeavy: true, Decode: true}, "mix 1 → 0.75 toward the decode-bound shape"},
		{"then the trade shape", TradeState{DecodeBound: true, PrefillHeavy: true, Decode: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{Mix: 1, DecodeBound: true, PrefillHeavy: true}, "mix 0 → 1 toward the trade shape (step 1)"},
		{"heavy ends on a decode-bound pool", TradeState{Mix: 1, DecodeBound: true, PrefillHeavy: true}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Batch: 0.28, BatchEndpoints: 4, Prompt: 3000, PromptPicks: 100, LoopMode: calm},
			TradeState{Mix: 0.75, DecodeBound: true}, "mix 1 → 0.75 toward the trade shape"},
		// Slot-bound too: the slot-bound shape.
		{"slot-bound wins", TradeState{SlotHeld: 1, PromptHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Slots: 2, SlotEndpoints: 4, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{Mix: 1, SlotBound: true, PrefillHeavy: true, Decode: true, Slot: true}, "toward the slot-bound shape (step 1)"},
		// In the trade shape for its prompts when the pool turns
		// slot-bound: back to the profile a step at a time first.
		{"heavy to slot steps back", TradeState{Mix: 1, PrefillHeavy: true, SlotHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Slots: 2, SlotEndpoints: 4, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{Mix: 0.75, SlotBound: true, PrefillHeavy: true}, "mix 1 → 0.75 toward the trade shape"},
		// Heterogeneous and prefill-heavy: the trade shape, at once.
		{"heterogeneous too", TradeState{PromptHeld: 1}, TradeInput{Spread: 2.5, Endpoints: 4, Declared: 1, Prompt: 12000, PromptPicks: 100, LoopMode: calm},
			TradeState{Mix: 1, Heterogeneous: true, PrefillHeavy: true}, "mix 0 → 1 toward the trade shape (step 1)"},
		// Out of calm the state follows the reading, the mix holds.
		{"rebalance holds", TradeState{PromptHeld: 1}, TradeInput{Spread: 1, Endpoints: 4, Declared: 1, Prompt: 12000, PromptPicks: 100, LoopMode: configurator.ModeRebalance},
			TradeState{PrefillHeavy: true}, ""},
	}
	runTradeCases(t, cfg, tests)
	// A reload that turns prompt_on off releases the state: back a step,
	// and a hold in progress is forgotten.
	off := cfg
	off.PromptOn, off.PromptOff = 0, 0
	if got, why := off.Next(heavy, in(12000)); got != (TradeState{Mix: 0.75}) || strings.Contains(why, "uncached prompt") {
		t.Errorf("prompt_on turned off: %+v (%q), want mix 0.75, no longer prefill-heavy, no uncached prompt in the reason", got, why)
	}
	if got, _ := off.Next(TradeState{PromptHeld: 1}, in(12000)); got != (TradeState{}) {
		t.Errorf("prompt_on turned off mid-hold: %+v, want the hold forgotten", got)
	}
}

// tradeCase is one case of Next: from the state, reading in, the state
// wanted and a substring of its reason ("" means no change).
type tradeCase struct {
	name   string
	from   TradeState
	in     TradeInput
	want   TradeState
	reason string
}

// runTradeCases runs Next's table cases.
func runTradeCases(t *testing.T, cfg TradeConfig, tests []tradeCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := cfg.Next(tt.from, tt.in)
			if got != tt.want {
				t.Errorf("state %+v, want %+v", got, tt.want)
			}
			if (tt.reason == "") != (why == "") || !strings.Contains(why, tt.reason) {
				t.Errorf("reason %q, want one containing %q", why, tt.reason)
			}
		})
	}
}

func TestPrefillSpread(t *testing.T) {
	type cal struct {
		rate    float64
		samples int
	}
	tests := []struct {
		name       string
		cals       []cal
		wantSpread float64
		wantN      int
	}{
		{"nothing learned", []cal{{13100, 0}, {13100, 0}}, 1, 0},
		{"one learned", []cal{{13100, 20}, {40000, 5}}, 1, 1},
		// 49,780 ÷ 13,100 = 3.8.
		{"two generations", []cal{{13100, 50}, {49780, 50}}, 3.8, 2},
		// 19 < min_samples 20 leaves 40,000 out: 26,200 ÷ 13,100 = 2.
		{"too few samples", []cal{{13100, 50}, {40000, 19}, {26200, 20}}, 2, 2},
		// A zero or infinite rate is no rate: 14,410 ÷ 13,100 = 1.1.
		{"bad rates", []cal{{13100, 50}, {0, 50}, {math.Inf(1), 50}, {14410, 50}}, 1.1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cals := make([]scheduler.Calibration, len(tt.cals))
			for i, c := range tt.cals {
				cals[i] = scheduler.Calibration{PrefillTokensPerSecond: c.rate, Samples: c.samples}
			}
			spread, n := PrefillSpread(calibrated(t, cals), 20)
			if !closeTo(spread, tt.wantSpread, 1e-12) || n != tt.wantN {
				t.Errorf("spread %v over %d, want %v over %d", spread, n, tt.wantSpread, tt.wantN)
			}
		})
	}
}

// calibrated is a real scheduler's pool of len(cals) endpoints a:1, b:1,
// … publishing cals in order.
func calibrated(t *testing.T, cals []scheduler.Calibration) []*scheduler.Endpoint {
	t.Helper()
	s := target(t)
	eps := make([]scheduler.Endpoint, len(cals))
	for i := range eps {
		eps[i].Address = string(rune('a'+i)) + ":1"
	}
	s.SetEndpoints(eps)
	for i, c := range cals {
		s.SetCalibration(eps[i].Address, c)
	}
	return s.Pool().Pointers()
}

// TestKVSlots drives the KV-slot reading with a real scheduler's picks
// (no MatchProducer: a request adds its prompt bytes ÷ 4 tokens). Three
// endpoints scrape 1,900 blocks of 16 tokens (30,400); the fourth scrapes
// no size (its calibration's KV capacity, the prior's, is not read) and
// has learned a mean output of 400 tokens, the pool's median. Prompts of
// 40,000 bytes are 10,000 tokens: 30,400 ÷ 10,400 = 2.92 slots on each of
// the three.
func TestKVSlots(t *testing.T) {
	s, err := scheduler.New(scheduler.DefaultConfig(), profile(), nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	eps := []scheduler.Endpoint{
		{Address: "a:1", CacheBlocks: 1900, CacheBlockSize: 16}, {Address: "b:1", CacheBlocks: 1900, CacheBlockSize: 16},
		{Address: "c:1", CacheBlocks: 1900, CacheBlockSize: 16}, {Address: "d:1"},
	}
	s.SetEndpoints(eps)
	s.SetCalibration("d:1", scheduler.Calibration{KVCapacityTokens: 144000, OutputTokens: 400})
	pick := func(n, bytes int) {
		t.Helper()
		for range n {
			d, err := s.Pick(context.Background(), &scheduler.Request{Prompt: make([]byte, bytes)})
			if err != nil {
				t.Fatal(err)
			}
			d.Done(scheduler.Outcome{})
		}
	}
	var r pickReader
	// The uncached prompt is the mean picked tokens.
	read := func(what string, want float64, wantN int, wantPrompt float64, wantPicks int) {
		t.Helper()
		got := r.read(s.Pool().Pointers())
		if !closeTo(got.Slots, want, 1e-9) || got.SlotN != wantN {
			t.Errorf("%s: %v slots over %d endpoints, want %v over %d", what, got.Slots, got.SlotN, want, wantN)
		}
		if !closeTo(got.Prompt, wantPrompt, 1e-9) || got.PromptPicks != wantPicks {
			t.Errorf("%s: uncached prompt %v over %d picks, want %v over %d", what, got.Prompt, got.PromptPicks, wantPrompt, wantPicks)
		}
	}
	read("no picks", 0, 0, 0, 0)
	pick(19, 40000)
	read("19 picks", 0, 0, 0, 0) // fewer than slotMinPicks
	pick(1, 40000)
	read("20 picks", 30400.0/10400, 3, 10000, 20)
	// Until the window is full the mean counts every pick since the
	// first read: 20 more of 4,000 tokens make it 7,000.
	pick(20, 16000)
	read("40 picks", 30400.0/7400, 3, 7000, 40)
	// A full window forgets what is older: ten evaluations with no picks
	// and one with 20 picks of 2,000 tokens leave the 4,000-token picks
	// and these, 3,000 on average.
	for range 10 {
		r.read(s.Pool().Pointers())
	}
	pick(20, 8000)
	read("a full window", 30400.0/3400, 3, 3000, 40)
	// An endpoint leaving takes nothing away: the next evaluation drops
	// the 4,000-token picks and adds 20 of 2,000 tokens, 2,000 on average
	// (not the router's lifetime mean, 4,500); the learned output left
	// with d:1.
	s.SetEndpoints(eps[:3])
	pick(20, 8000)
	read("after an endpoint left", 30400.0/2000, 3, 2000, 40)
	// An endpoint that comes back starts from its counts then (here
	// afresh: nothing of it was in flight).
	s.SetEndpoints(eps)
	read("after it came back", 30400.0/2000, 3, 2000, 40)
	// No KV size scraped anywhere: no reading.
	var bare pickReader
	s2, err := scheduler.New(scheduler.DefaultConfig(), profile(), nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s2.SetEndpoints([]scheduler.Endpoint{{Address: "a:1"}, {Address: "b:1"}})
	s2.SetCalibration("a:1", scheduler.Calibration{KVCapacityTokens: 144000})
	for i := range 2 {
		for range 25 {
			d, err := s2.Pick(context.Background(), &scheduler.Request{Prompt: make([]byte, 400)})
			if err != nil {
				t.Fatal(err)
			}
			d.Done(scheduler.Outcome{})
		}
		if got := bare.read(s2.Pool().Pointers()); got.Slots != 0 || got.SlotN != 0 {
			t.Errorf("no KV size scraped: %v over %d, want no reading", got.Slots, got.SlotN)
		} else if want := []float64{0, 100}[i]; got.Prompt != want {
			// The first read sets the baseline; the second counts 25
			// picks of 400 bytes ÷ 4.
			t.Errorf("no KV size scraped, read %d: uncached prompt %v, want %v", i+1, got.Prompt, want)
		}
	}
	// Picks that bring nothing uncached (here empty prompts) read 0 over
	// their picks: a reading, not none.
	var cached pickReader
	cached.read(s2.Pool().Pointers())
	for range 25 {
		d, err := s2.Pick(context.Background(), &scheduler.Request{})
		if err != nil {
			t.Fatal(err)
		}
		d.Done(scheduler.Outcome{})
	}
	if got := cached.read(s2.Pool().Pointers()); got.Prompt != 0 || got.PromptPicks != 25 {
		t.Errorf("nothing uncached: uncached prompt %v over %d picks, want 0 over 25", got.Prompt, got.PromptPicks)
	}
	// A bogus mean output (one endpoint's) counts at most its KV size.
	s.SetCalibration("d:1", scheduler.Calibration{OutputTokens: 1 << 40})
	s.SetCalibration("a:1", scheduler.Calibration{OutputTokens: 1 << 40})
	if got := r.read(s.Pool().Pointers()); !(got.Slots >= 30400.0/(2000+30400)-1e-9) {
		t.Errorf("a bogus output: %v slots, want at least 30,400 ÷ (2,000 + 30,400)", got.Slots)
	}
}

func TestBatchCost(t *testing.T) {
	type cal struct {
		fixed, perSeq float64
		samples       int
	}
	tests := []struct {
		name string
		cals []cal
		want float64
		n    int
	}{
		{"nothing learned", []cal{{0.0016, 0.00045, 0}, {0.0016, 0.00045, 19}}, 0, 0},
		// Qwen2.5-7B on an H100: 453 µs ÷ 1.6 ms.
		{"decode-bound", []cal{{0.0016, 0.000453, 50}, {0.0016, 0.000453, 50}}, 0.000453 / 0.0016, 2},
		// The median of 0.005, 0.01 and 0.3: one odd endpoint does not decide.
		{"median", []cal{{0.013, 0.000065, 50}, {0.013, 0.00013, 50}, {0.013, 0.0039, 50}}, 0.01, 3},
		// No fixed part, a negative or infinite slope: no line.
		{"bad lines", []cal{{0, 0.0001, 50}, {0.01, -1, 50}, {0.01, math.Inf(1), 50}, {0.01, 0.0002, 50}}, 0.02, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cals := make([]scheduler.Calibration, len(tt.cals))
			for i, c := range tt.cals {
				cals[i] = scheduler.Calibration{EngineDecodeFixedSeconds: c.fixed, EngineDecodeBatchSeconds: c.perSeq, Samples: c.samples}
			}
			got, n := BatchCost(calibrated(t, cals), 20)
			if !closeTo(got, tt.want, 1e-12) || n != tt.n {
				t.Errorf("batch cost %v over %d, want %v over %d", got, n, tt.want, tt.n)
			}
		})
	}
}

func TestTradeConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*TradeConfig)
		want string // "" valid
	}{
		{"off ignores the rest", func(c *TradeConfig) { c.Enabled, c.Step = false, -1 }, ""},
		{"valid", func(*TradeConfig) {}, ""},
		{"no weights", func(c *TradeConfig) { c.Weights = nil }, "adaptive.trade.weights"},
		{"negative weight", func(c *TradeConfig) { c.Weights["queue"] = -1 }, "adaptive.trade.weights.queue: must be in [0, 1e+06], got -1"},
		{"NaN weight", func(c *TradeConfig) { c.Weights["prefix"] = math.NaN() }, "adaptive.trade.weights.prefix"},
		{"d_max", func(c *TradeConfig) { c.DMax = 1.5 }, "adaptive.trade.d_max"},
		{"affinity_floor", func(c *TradeConfig) { c.AffinityFloor = 1 }, "adaptive.trade.affinity_floor"},
		{"spread_off below 1", func(c *TradeConfig) { c.SpreadOff = 0.9 }, "adaptive.trade.spread_off"},
		{"spread_on not above off", func(c *TradeConfig) { c.SpreadOn = c.SpreadOff }, "adaptive.trade.spread_on"},
		{"batch_on off", func(c *TradeConfig) { c.BatchOn, c.BatchOff = 0, -5 }, ""},
		{"batch_on negative", func(c *TradeConfig) { c.BatchOn = -0.1 }, "adaptive.trade.batch_on: must be 0 (off) or in (0, 100], got -0.1"},
		{"batch_on NaN", func(c *TradeConfig) { c.BatchOn = math.NaN() }, "adaptive.trade.batch_on"},
		{"batch_on valid", func(c *TradeConfig) {
			c.BatchOn, c.BatchOff, c.DecodeWeights = 0.05, 0.03, map[string]float64{"prefix": 1}
		}, ""},
		{"batch_off not below on", func(c *TradeConfig) {
			c.BatchOn, c.BatchOff, c.DecodeWeights = 0.05, 0.05, map[string]float64{"prefix": 1}
		}, "adaptive.trade.batch_off: must be in [0, batch_on (0.05)), got 0.05"},
		{"batch_off negative", func(c *TradeConfig) {
			c.BatchOn, c.BatchOff, c.DecodeWeights = 0.05, -0.01, map[string]float64{"prefix": 1}
		}, "adaptive.trade.batch_off"},
		{"batch_on without a shape", func(c *TradeConfig) { c.BatchOn, c.BatchOff = 0.05, 0.03 }, "adaptive.trade.decode_weights: batch_on is set but the decode-bound shape is empty"},
		{"negative decode weight", func(c *TradeConfig) {
			c.BatchOn, c.BatchOff, c.DecodeWeights = 0.05, 0.03, map[string]float64{"queue": -1}
		}, "adaptive.trade.decode_weights.queue: must be in [0, 1e+06], got -1"},
		{"slots_on off", func(c *TradeConfig) { c.SlotsOn, c.SlotsOff = 0, -5 }, ""},
		{"slots_on valid", func(c *TradeConfig) {
			c.SlotsOn, c.SlotsOff, c.SlotWeights = 4, 6, map[string]float64{"queue": 4}
		}, ""},
		{"slots_on with the decode shape", func(c *TradeConfig) {
			c.SlotsOn, c.SlotsOff, c.DecodeWeights = 4, 6, map[string]float64{"queue": 4}
		}, ""},
		{"slots_on negative", func(c *TradeConfig) { c.SlotsOn = -1 }, "adaptive.trade.slots_on: must be 0 (off) or in (0, 10000], got -1"},
		{"slots_on NaN", func(c *TradeConfig) { c.SlotsOn = math.NaN() }, "adaptive.trade.slots_on"},
		{"slots_off not above on", func(c *TradeConfig) {
			c.SlotsOn, c.SlotsOff, c.SlotWeights = 4, 4, map[string]float64{"queue": 4}
		}, "adaptive.trade.slots_off: must be in (slots_on (4), 10000], got 4"},
		{"slots_off infinite", func(c *TradeConfig) {
			c.SlotsOn, c.SlotsOff, c.SlotWeights = 4, math.Inf(1), map[string]float64{"queue": 4}
		}, "adaptive.trade.slots_off"},
		{"slots_on without a shape", func(c *TradeConfig) { c.SlotsOn, c.SlotsOff = 4, 6 }, "adaptive.trade.slot_weights: slots_on is set but the slot-bound shape is empty"},
		{"prompt_on off", func(c *TradeConfig) { c.PromptOn, c.PromptOff = 0, -5 }, ""},
		{"prompt_on valid", func(c *TradeConfig) { c.PromptOn, c.PromptOff = 6000, 5000 }, ""},
		{"prompt_off zero", func(c *TradeConfig) { c.PromptOn, c.PromptOff = 6000, 0 }, ""},
		{"prompt_on negative", func(c *TradeConfig) { c.PromptOn = -1 }, "adaptive.trade.prompt_on: must be 0 (off) or in (0, 1000000], got -1"},
		{"prompt_on NaN", func(c *TradeConfig) { c.PromptOn = math.NaN() }, "adaptive.trade.prompt_on"},
		{"prompt_on infinite", func(c *TradeConfig) { c.PromptOn = math.Inf(1) }, "adaptive.trade.prompt_on"},
		{"prompt_off not below on", func(c *TradeConfig) { c.PromptOn, c.PromptOff = 6000, 6000 }, "adaptive.trade.prompt_off: must be in [0, prompt_on (6000)), got 6000"},
		{"prompt_off negative", func(c *TradeConfig) { c.PromptOn, c.PromptOff = 6000, -1 }, "adaptive.trade.prompt_off"},
		{"prompt_off NaN", func(c *TradeConfig) { c.PromptOn, c.PromptOff = 6000, math.NaN() }, "adaptive.trade.prompt_off"},
		{"prompt_off infinite", func(c *TradeConfig) { c.PromptOn, c.PromptOff = 6000, math.Inf(1) }, "adaptive.trade.prompt_off"},
		{"negative slot weight", func(c *TradeConfig) {
			c.SlotsOn, c.SlotsOff, c.SlotWeights = 4, 6, map[string]float64{"queue": -1}
		}, "adaptive.trade.slot_weights.queue: must be in [0, 1e+06], got -1"},
		{"step", func(c *TradeConfig) { c.Step = 0 }, "adaptive.trade.step"},
		{"interval", func(c *TradeConfig) { c.Interval = time.Millisecond }, "adaptive.trade.interval"},
		{"min_samples", func(c *TradeConfig) { c.MinSamples = 0 }, "adaptive.trade.min_samples"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tradeConfig().Trade
			tt.edit(&c)
			err := c.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// TestTradeCheckProfile: the law needs adaptive mode, names of the
// profile's scorers, and a loop that can run at every reachable mix. At
// mix 1 the test shape is prefix 1, lora 1 (Σa 2) against queue 6, kv 2
// (Σd 8): calm D 8/10 = 0.8, below the default d_max 0.9; with trade d_max
// 0.7 it is 0.9·(1−1) + 0.7 = 0.7 < 0.8 there.
func TestTradeCheckProfile(t *testing.T) {
	ok := tradeConfig()
	if err := ok.CheckProfile(profile()); err != nil {
		t.Fatalf("valid trade: %v", err)
	}
	// The roll-back: the loop off with the law still configured
	// validates (the law is idle), and still checks the law's names.
	off := tradeConfig()
	off.Enabled = false
	if err := off.CheckProfile(profile()); err != nil {
		t.Errorf("adaptive off with trade on: %v, want valid (a roll-back is one edit)", err)
	}
	offUnknown := tradeConfig()
	offUnknown.Enabled = false
	offUnknown.Trade.Weights["time-cost"] = 1
	unknown := tradeConfig()
	unknown.Trade.Weights["time-cost"] = 1
	low := tradeConfig()
	low.Trade.DMax = 0.7
	// The decode-bound shape: its names are checked, and the loop must run
	// at every mix of it (queue 30 against prefix 1 is above d_max 0.9).
	decode := func(w map[string]float64) Config {
		c := tradeConfig()
		c.Trade.BatchOn, c.Trade.BatchOff, c.Trade.DecodeWeights = 0.05, 0.03, w
		return c
	}
	if err := decode(map[string]float64{"prefix": 1, "queue": 6}).CheckProfile(profile()); err != nil {
		t.Errorf("valid decode-bound shape: %v", err)
	}
	// The slot-bound shape likewise (the decode-bound one valid beside it).
	slot := func(w map[string]float64) Config {
		c := decode(map[string]float64{"prefix": 1, "queue": 6})
		c.Trade.SlotsOn, c.Trade.SlotsOff, c.Trade.SlotWeights = 4, 6, w
		return c
	}
	if err := slot(map[string]float64{"prefix": 1, "queue": 7}).CheckProfile(profile()); err != nil {
		t.Errorf("valid slot-bound shape: %v", err)
	}
	for name, tt := range map[string]struct {
		cfg  Config
		want string
	}{
		"unknown name, loop off": {offUnknown, "adaptive.trade.weights.time-cost"},
		"unknown name":           {unknown, "adaptive.trade.weights.time-cost"},
		"d_max too low":          {low, "adaptive.trade: at mix 1"},
		"decode unknown name":    {decode(map[string]float64{"decode-cost": 1}), "adaptive.trade.decode_weights.decode-cost"},
		"decode d_max too low":   {decode(map[string]float64{"prefix": 0.1, "queue": 30}), "adaptive.trade.decode_weights: at mix"},
		"slot unknown name":      {slot(map[string]float64{"slot-cost": 1}), "adaptive.trade.slot_weights.slot-cost"},
		"slot d_max too low":     {slot(map[string]float64{"prefix": 0.1, "queue": 30}), "adaptive.trade.slot_weights: at mix"},
	} {
		if err := tt.cfg.CheckProfile(profile()); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tt.want)
		}
	}
}

// TestTradeMixed: at mix 0.25 prefix is 0.75·3 + 0.25·1 = 2.5 and queue
// 0.75·2 + 0.25·6 = 3; bias, kv and lora keep 0.5, 2 and 1; with trade
// d_max 0.98 and affinity_floor 0.02, d_max is 0.75·0.9 + 0.25·0.98 =
// 0.92 and the floor 0.75·0.1 + 0.25·0.02 = 0.08.
func TestTradeMixed(t *testing.T) {
	c := tradeConfig()
	c.Trade.DMax, c.Trade.AffinityFloor = 0.98, 0.02
	cfg, p := c.ShapedBy(profile(), TradeState{Mix: 0.25}, 0)
	got := make([]float64, len(p))
	for i, e := range p {
		got[i] = e.Weight
	}
	if want := []float64{2.5, 3, 0.5, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("weights %v, want %v", got, want)
	}
	if !closeTo(cfg.DMax, 0.92, 1e-12) || !closeTo(cfg.AffinityFloor, 0.08, 1e-12) {
		t.Errorf("d_max %v, affinity_floor %v; want 0.92, 0.08", cfg.DMax, cfg.AffinityFloor)
	}
	if profile()[0].Weight != 3 {
		t.Error("ShapedBy modified the profile")
	}
	if _, p0 := c.ShapedBy(profile(), TradeState{Mix: 0}, 0); p0[0].Weight != 3 || p0[1].Weight != 2 {
		t.Errorf("mix 0: %+v, want the profile", p0)
	}
}

// TestTradeShapedBy: the state names the shape the mix blends toward — at
// mix 0.5 toward the decode-bound shape (prefix 1, queue 12) prefix is
// 0.5·3 + 0.5·1 = 2 and queue 0.5·2 + 0.5·12 = 7; toward the trade shape
// (prefix 1, queue 6) 2 and 4.
func TestTradeShapedBy(t *testing.T) {
	c := tradeConfig()
	c.Trade.BatchOn, c.Trade.BatchOff, c.Trade.DecodeWeights = 0.05, 0.03, map[string]float64{"prefix": 1, "queue": 12}
	c.Trade.SlotsOn, c.Trade.SlotsOff, c.Trade.SlotWeights = 4, 6, map[string]float64{"queue": 20}
	for _, tt := range []struct {
		st   TradeState
		want []float64
	}{
		{TradeState{Mix: 0.5, Decode: true}, []float64{2, 7, 0.5, 2, 1}},
		{TradeState{Mix: 0.5}, []float64{2, 4, 0.5, 2, 1}},
		{TradeState{Decode: true}, []float64{3, 2, 0.5, 2, 1}},
		// The slot-bound shape (queue 20): 0.5·2 + 0.5·20 = 11.
		{TradeState{Mix: 0.5, Decode: true, Slot: true}, []float64{3, 11, 0.5, 2, 1}},
	} {
		_, p := c.ShapedBy(profile(), tt.st, 0)
		if got := weightsOf(p); !slices.Equal(got, tt.want) {
			t.Errorf("%+v: weights %v, want %v", tt.st, got, tt.want)
		}
	}
}

// tradePool is a real scheduler's pool of two endpoints whose learned
// prefill rates are 13,100 and rate tokens/s, 50 samples each.
func tradePool(t *testing.T, s *scheduler.Scheduler, rate float64) []*scheduler.Endpoint {
	t.Helper()
	if len(s.Pool().Endpoints) == 0 {
		s.SetEndpoints([]scheduler.Endpoint{{Address: "a:1"}, {Address: "b:1"}})
	}
	s.SetCalibration("a:1", scheduler.Calibration{PrefillTokensPerSecond: 13100, Samples: 50})
	s.SetCalibration("b:1", scheduler.Calibration{PrefillTokensPerSecond: rate, Samples: 50})
	return s.Pool().Pointers()
}

// TestLoopTrade runs the loop with the trade law (interval 5 s, step 0.5,
// spread_on 1.5, spread_off 1.25) on a calm pool of two endpoints of
// capacity 1. The first evaluation is the first tick (0 s), so
// evaluations fall at 5k s. Homogeneous (14,410 ÷ 13,100 =
// 1.1) for 60 s: no change. Then b learns 39,300 (spread 3 ≥ 1.5): the
// evaluations at 65 s and 70 s move the mix 0 → 0.5 → 1, and the
// calm weights settle at the second shape: prefix 1, queue 6, bias 0.5, kv
// 2, lora 1 (T = 10, D = 8/10, prefix 10·0.2·1/2 = 1, queue 10·0.8·6/8 =
// 6). Back to 14,410 after 90 s (1.1 ≤ 1.25): 1 → 0.5 → 0 at 95 s and
// 100 s. Four changes, each logged with its reason and counted; a second
// loop fed the same pools publishes the same weights at every tick.
func TestLoopTrade(t *testing.T) {
	cfg := tradeConfig()
	cfg.Trade.Step = 0.5
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	sa, sb := target(t), target(t)
	a := mustNew(t, cfg, sa, Deps{Registerer: reg, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	b := mustNew(t, cfg, sb, Deps{})
	var changes []time.Duration
	for n := 0; n <= 2400; n++ { // 120 s of 50 ms ticks
		at := time.Duration(n) * tick
		rate := 14410.0
		if at > 60*time.Second && at <= 90*time.Second {
			rate = 39300
		}
		ta, tb := a.Tick(t0.Add(at), tradePool(t, sa, rate)), b.Tick(t0.Add(at), tradePool(t, sb, rate))
		if !reflect.DeepEqual(*ta.Weights, *tb.Weights) {
			t.Fatalf("%v: replicas disagree:\n%+v\n%+v", at, *ta.Weights, *tb.Weights)
		}
		if ta.Trade != "" {
			changes = append(changes, at)
		}
		if at == 90*time.Second {
			if w := sa.Weights(); w.Mode != configurator.ModeCalm || !closeTo(w.Values[0], 1, 1e-9) || !closeTo(w.Values[1], 6, 1e-9) || w.Values[2] != 0.5 || !closeTo(w.Values[3], 2, 1e-9) || !closeTo(w.Values[4], 1, 1e-9) {
				t.Errorf("at 90 s: %+v, want calm prefix 1, queue 6, bias 0.5, kv 2, lora 1", w)
			}
			if base := a.BaseWeights(); !slices.Equal(base, []float64{1, 6, 0.5, 2, 1}) {
				t.Errorf("BaseWeights at 90 s %v, want the second shape", base)
			}
		}
	}
	if want := []time.Duration{65 * time.Second, 70 * time.Second, 95 * time.Second, 100 * time.Second}; !slices.Equal(changes, want) {
		t.Errorf("mix changed at %v, want %v", changes, want)
	}
	if w := sa.Weights(); !slices.Equal(w.Values, []float64{3, 2, 0.5, 2, 1}) {
		t.Errorf("weights at the end %v, want the profile's", w.Values)
	}
	if got := testutil.ToFloat64(a.m.tradeChanges); got != 4 {
		t.Errorf("trimtab_control_trade_changes_total %v, want 4", got)
	}
	if got := testutil.ToFloat64(a.m.tradeSpread); !closeTo(got, 1.1, 1e-12) {
		t.Errorf("spread gauge %v, want 1.1", got)
	}
	var lines []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatal(err)
		}
		if m["msg"] == "trade" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 4 {
		t.Fatalf("%d trade lines, want 4:\n%s", len(lines), buf.String())
	}
	if r, _ := lines[0]["reason"].(string); !strings.Contains(r, "speed spread 3.00 (learned prefill, 2 endpoints) (heterogeneous: crossed spread_on 1.50): mix 0 → 0.5") {
		t.Errorf("first trade line %v", lines[0])
	}
	if base, _ := lines[1]["base"].(map[string]any); base["queue"] != 6.0 {
		t.Errorf("second trade line's base %v, want queue 6", base)
	}
}

// TestLoopTradeCalmFleet: a homogeneous pool in calm for 10 minutes makes
// (spread 1.2 < spread_on 1.5) no trade change and no weights version
// after the calm entry (version 2).
func TestLoopTradeCalmFleet(t *testing.T) {
	s := target(t)
	l := mustNew(t, tradeConfig(), s, Deps{})
	for n := 0; n <= 12000; n++ {
		if tk := l.Tick(t0.Add(time.Duration(n)*tick), tradePool(t, s, 15720)); tk.Trade != "" { // 15,720 ÷ 13,100 = 1.2
			t.Fatalf("tick %d: trade %q on a homogeneous pool", n, tk.Trade)
		}
	}
	if w := s.Weights(); w.Version != 2 || w.Mode != configurator.ModeCalm || l.Trade() != (TradeState{}) {
		t.Errorf("weights %+v, trade %+v; want version 2 in calm at mix 0", w, l.Trade())
	}
}

func TestCapacitySpread(t *testing.T) {
	tests := []struct {
		name string
		caps []float64
		want float64
	}{
		{"one endpoint", []float64{3}, 1},
		// Capacity 0 reads as 1 (CapacityOrOne): 1 ÷ 1.
		{"equals", []float64{1, 0, 1}, 1},
		// 3 ÷ 1 = 3.
		{"two generations", []float64{1, 3, 1, 3}, 3},
		// 4 ÷ 1 = 4.
		{"1:1:2:4", []float64{1, 1, 2, 4}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := make([]*scheduler.Endpoint, len(tt.caps))
			for i, c := range tt.caps {
				pool[i] = &scheduler.Endpoint{Address: string(rune('a'+i)) + ":1", Capacity: c}
			}
			if got := CapacitySpread(pool); got != tt.want {
				t.Errorf("spread %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLoopTradeDeclared: two endpoints declaring capacities 1 and 3 and
// nothing learned: the declared spread 3 ≥ spread_on 1.5 moves the mix to
// 1 at the first tick (0 s, before the configurator's first step, so the
// first requests already route in the second shape), and nothing after;
// the first tick's weights are the second shape's.
func TestLoopTradeDeclared(t *testing.T) {
	s := target(t)
	s.SetEndpoints([]scheduler.Endpoint{{Address: "a:1", Capacity: 1}, {Address: "b:1", Capacity: 3}})
	reg := prometheus.NewRegistry()
	l := mustNew(t, tradeConfig(), s, Deps{Registerer: reg})
	var changes []time.Duration
	for n := 0; n <= 1200; n++ { // 60 s
		at := time.Duration(n) * tick
		if tk := l.Tick(t0.Add(at), s.Pool().Pointers()); tk.Trade != "" {
			changes = append(changes, at)
		}
		if n == 0 {
			if w := s.Weights(); w.Mode != configurator.ModeCalm || !closeTo(w.Values[0], 1, 1e-9) || !closeTo(w.Values[1], 6, 1e-9) {
				t.Errorf("after the first tick: %+v, want calm in the second shape (prefix 1, queue 6)", w)
			}
		}
	}
	if want := []time.Duration{0}; !slices.Equal(changes, want) {
		t.Errorf("mix changed at %v, want %v", changes, want)
	}
	if l.Trade() != (TradeState{Mix: 1, Heterogeneous: true}) || testutil.ToFloat64(l.m.tradeDeclared) != 3 {
		t.Errorf("trade %+v, capacity spread gauge %v; want mix 1 and 3", l.Trade(), testutil.ToFloat64(l.m.tradeDeclared))
	}
}

// TestLoopTradeFirstPool: serve's first tick usually runs before
// discovery's first list. The declared shape is still in force at once on
// the first tick that sees a pool (no slew from the profile's weights:
// nothing has routed yet), and Run takes that tick as soon as
// PoolInstalled reports the pool, not at its next interval.
func TestLoopTradeFirstPool(t *testing.T) {
	second := func(w *scheduler.Weights) bool {
		return w.Mode == configurator.ModeCalm && closeTo(w.Values[0], 1, 1e-9) && closeTo(w.Values[1], 6, 1e-9)
	}
	pool := []scheduler.Endpoint{{Address: "a:1", Capacity: 1}, {Address: "b:1", Capacity: 3}}
	t.Run("tick", func(t *testing.T) {
		s := target(t)
		l := mustNew(t, tradeConfig(), s, Deps{Registerer: prometheus.NewRegistry()})
		if tk := l.Tick(t0, s.Pool().Pointers()); tk.Trade != "" {
			t.Fatalf("trade %q on an empty pool", tk.Trade)
		}
		s.SetEndpoints(pool)
		tk := l.Tick(t0.Add(tick), s.Pool().Pointers())
		if w := s.Weights(); tk.Trade == "" || !second(w) {
			t.Errorf("first tick with a pool: trade %q, weights %+v; want calm in the second shape (prefix 1, queue 6) at once", tk.Trade, w)
		}
	})
	t.Run("run", func(t *testing.T) {
		s := target(t)
		fc := clocktesting.NewFakeClock(t0)
		ticked := make(chan *Tick, 4)
		l := mustNew(t, tradeConfig(), s, Deps{Registerer: prometheus.NewRegistry(), Clock: fc, Observe: func(tk *Tick) { ticked <- tk }})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
			if n := len(ticked); n > 0 {
				t.Errorf("%d ticks beside the ticker's after the first pool", n)
			}
		}()
		<-ticked // the tick Run takes at once, before any pool
		s.SetEndpoints(pool)
		l.PoolInstalled()
		select {
		case tk := <-ticked: // the fake clock has not moved: PoolInstalled woke Run
			if w := s.Weights(); tk.Trade == "" || !second(w) {
				t.Errorf("tick on the first pool: trade %q, weights %+v; want the second shape", tk.Trade, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no tick after PoolInstalled")
		}
		l.PoolInstalled() // a pool has been seen: Run wakes and does nothing
		for n := 1; n <= 2; n++ {
			fc.Step(tick)
			if tk := <-ticked; !tk.At.Equal(t0.Add(time.Duration(n) * tick)) {
				t.Errorf("tick at %v after the first pool, want only the ticker's, at %v", tk.At, t0.Add(time.Duration(n)*tick))
			}
		}
	})
}

// TestTradeMixes: with step 0.3 the law reaches 0.3, 0.6, 0.9 and 1 on the
// way up and 0.7, 0.4 and 0.1 on the way down from 1; CheckProfile checks
// each.
func TestTradeMixes(t *testing.T) {
	c := DefaultTradeConfig()
	c.Step = 0.3
	got := c.mixes()
	want := []float64{0, 0.3, 0.6, 0.9, 1, 0.7, 0.4, 0.1}
	if len(got) != len(want) {
		t.Fatalf("mixes %v, want %v", got, want)
	}
	for i := range want {
		if !closeTo(got[i], want[i], 1e-9) {
			t.Errorf("mixes %v, want %v", got, want)
			break
		}
	}
	c.Step = 0.25
	if got := c.mixes(); len(got) != 8 { // 0, .25, .5, .75, 1, .75, .5, .25
		t.Errorf("step 0.25: %v", got)
	}
}
