package control

import (
	"fmt"
	"time"

	"github.com/trimtab/trimtab/configurator"
)

// TradeConfig is a profile's adaptive.trade section: the law that moves
// the calm weights between the profile's own shape (mix 0) and a second
// shape (mix 1, the profile with Weights written over it) from what the
// calibrator learned of the pool (docs/adaptive.md, "The trade law"). A
// pool whose endpoints prefill at rates far apart (two GPU generations,
// pods of different sizes) is priced in seconds; one whose engine's
// decode step grows steeply with its batch takes a shape that spreads
// decodes (DecodeWeights), and one whose pods' KV caches hold a few of
// its requests a shape that weighs the requests in flight (SlotWeights);
// a pool of equals whose traffic brings prompts of thousands of tokens
// its pods do not hold takes the trade shape too; any other keeps the
// profile. The inputs are the pool's
// speed spread, fastest ÷ slowest: the larger of the declared
// capacities' (known from the first tick, the same on every replica) and
// the learned prefill throughputs' (scheduler.Calibration, once two
// endpoints have enough samples); its batch cost, what one more decoding
// sequence adds to a decode step as a share of the step's fixed part (the
// learned decode line's slope ÷ intercept, median over the endpoints with
// enough samples); its KV slots and its uncached prompt (pickReader).
type TradeConfig struct {
	// Enabled turns the law on; it needs adaptive.enabled. Default false.
	Enabled bool `mapstructure:"enabled"`
	// Weights are the second shape: scorer name → weight, written over
	// the profile's weights (scorers not named keep theirs). Each name is
	// a scorer of the profile, matched without regard to case (the config
	// loader lowercases keys); each weight is in [0, 1e6], the scorers'
	// range.
	Weights map[string]float64 `mapstructure:"weights"`
	// DecodeWeights are the shape for a decode-bound pool of equals
	// (BatchOn), written over the profile's weights like Weights; required
	// with batch_on. A heterogeneous pool takes Weights whatever its batch
	// cost, and so does prefill-heavy traffic (PromptOn). A pool whose engine pays for every decoding sequence is
	// served by spreading decodes, which a pool of two GPU generations is
	// not: pricing the batch there steers every request from the slow
	// class (docs/adaptive.md, "A decode-bound engine").
	DecodeWeights map[string]float64 `mapstructure:"decode_weights"`
	// SlotWeights are the shape for a slot-bound pool of equals
	// (SlotsOn), written over the profile's weights like Weights; empty:
	// DecodeWeights. A slot-bound pod admits a request when a running one
	// finishes, so the prefill queued on it is not what the next request
	// waits for (docs/adaptive.md, "A slot-bound pool").
	SlotWeights map[string]float64 `mapstructure:"slot_weights"`
	// DMax and AffinityFloor are adaptive.d_max and adaptive.affinity_floor
	// at mix 1 (0: the profile's); between the shapes each is the mix's
	// linear blend of the two. A shape whose calm budget sits above the
	// profile's d_max needs its own.
	DMax          float64 `mapstructure:"d_max"`
	AffinityFloor float64 `mapstructure:"affinity_floor"`
	// SpreadOn is the speed spread (fastest ÷ slowest endpoint, declared or
	// learned) at or above which the pool counts as heterogeneous and the
	// mix moves toward 1, > SpreadOff. Default 1.5: the calibrator fits
	// endpoints of the same capacity and models together, so a pool of
	// equals reads exactly 1; pods of two sizes 2:1 read 2 and an
	// A100-40GB beside an H100-80GB 3.9–6.3, and both are served better in
	// seconds (docs/adaptive.md, "The trade law").
	SpreadOn float64 `mapstructure:"spread_on"`
	// SpreadOff is the spread at or below which a heterogeneous pool counts
	// as homogeneous again and the mix moves back toward 0, in [1,
	// SpreadOn). Default 1.25: the hysteresis band keeps a spread near
	// either threshold (a class learned within the calibrator's 10 %) from
	// flipping the shape.
	SpreadOff float64 `mapstructure:"spread_off"`
	// BatchOn is the batch cost (the engine's learned seconds per decoding
	// sequence apart from its context ÷ its step's fixed seconds: the
	// calibrator's engine decode step) at or above which the pool counts
	// as decode-bound (at three evaluations in a row) and the mix
	// moves toward 1 in DecodeWeights' shape, > BatchOff; 0 (the default)
	// leaves the input out. configs/adaptive.yaml and adaptive-decode.yaml
	// set 0.1: a decoding sequence adds a tenth of a step. A model whose KV
	// per token is small beside its step cost (Qwen2.5-7B on an H100 reads
	// 0.11–0.34 over the oracle suite) pays for every sequence in the
	// batch, and a request's place in a batch then weighs as much as its
	// cached prefix; dense models read at most 0.045 short of saturation
	// (docs/adaptive.md, "A decode-bound engine"). configs/adaptive.yaml's
	// shape weighs in-flight requests more; adaptive-decode.yaml's prices
	// the batch in seconds, which buys end-to-end time with the first
	// token's p99.
	BatchOn float64 `mapstructure:"batch_on"`
	// BatchOff is the batch cost at or below which a decode-bound pool
	// counts as one of equals again, in [0, BatchOn) (0.06 in the shipped
	// profiles).
	BatchOff float64 `mapstructure:"batch_off"`
	// SlotsOn is the pool's KV slots (an endpoint's scraped KV cache ÷
	// the KV a recent request adds: its uncached prompt tokens at the
	// pick, mean over the last twelve evaluations' picks, plus the
	// learned mean output; median over the endpoints) at or below which,
	// at two evaluations in a row, the pool counts as slot-bound and the
	// mix moves to 1 in SlotWeights' shape (DecodeWeights' without it) at
	// once, < SlotsOff; 0 (the default) leaves the input out.
	// configs/adaptive.yaml sets 4. A pod whose KV cache holds a few of
	// its requests admits the next one only when a running one finishes
	// its decode, so a new request waits for the requests in flight,
	// decoding or not, not for the prefill queued (docs/adaptive.md, "A
	// slot-bound pool").
	SlotsOn float64 `mapstructure:"slots_on"`
	// SlotsOff is the KV slots at or above which a slot-bound pool counts
	// as one of equals again, > SlotsOn (6 in configs/adaptive.yaml).
	SlotsOff float64 `mapstructure:"slots_off"`
	// PromptOn is the uncached prompt (the prompt tokens a recent request
	// brought that its pod did not hold, at the pick, mean over the last
	// twelve evaluations' picks) at or above which, at two evaluations in
	// a row, the traffic counts as prefill-heavy and a pool that is not
	// slot-bound, decode-bound or not, takes the trade shape (Weights):
	// from mix 0 (or on the way back from it) at once, from another shape
	// back to 0 by steps first;
	// > PromptOff; 0 (the default) leaves the input out.
	// configs/adaptive.yaml sets 6000. Traffic whose requests each bring
	// thousands of tokens to prefill (a trace of long documents and
	// conversations, whose prompts run from one thousand to a hundred
	// thousand tokens) waits for prefill work that the profile's
	// pending-prefill (the queued prompts' bytes, cached parts and all,
	// min–max normalised beside a prefix weight of 32) does not weigh as
	// seconds, and the trade shape prices it in seconds net of the cached
	// prefix (docs/adaptive.md, "Prefill-heavy traffic"): the Mooncake
	// trace reads 7,200–17,500 on every calibration, every other workload
	// of the oracle suite 4,200 or less.
	PromptOn float64 `mapstructure:"prompt_on"`
	// PromptOff is the uncached prompt at or below which prefill-heavy
	// traffic counts as ordinary again, in [0, PromptOn) (5000 in
	// configs/adaptive.yaml).
	PromptOff float64 `mapstructure:"prompt_off"`
	// Step is the largest change of the mix one evaluation makes on a
	// learned spread, in (0, 1]. Default 0.25: a full swing takes four
	// evaluations. A declared spread at or above SpreadOn moves the mix to
	// 1 at once: it is configuration, with no estimate to smooth.
	Step float64 `mapstructure:"step"`
	// Interval is the time between evaluations, 1s…1h. Default 5s, the
	// calibrator's publishing interval: evaluating faster re-reads the
	// same calibration.
	Interval time.Duration `mapstructure:"interval"`
	// MinSamples is how many observations an endpoint's calibration must
	// rest on to count (scheduler.Calibration.Samples), 1…4096; the law
	// holds while fewer than two endpoints count. Default 20, the
	// calibrator's min_samples (its estimate is then its own, not the
	// prior's).
	MinSamples int `mapstructure:"min_samples"`
}

// DefaultTradeConfig returns the documented defaults (off).
func DefaultTradeConfig() TradeConfig {
	return TradeConfig{SpreadOn: 1.5, SpreadOff: 1.25, Step: 0.25, Interval: 5 * time.Second, MinSamples: 20}
}

// maxTradeWeights bounds the trade.weights map (a profile has few
// scorers); maxTradeWeight is a scorer weight's maximum (configs.MaxWeight).
const (
	maxTradeWeights = 64
	maxTradeWeight  = 1e6
)

// batchHold is how many consecutive evaluations must read a learned batch
// cost at or above batch_on before the pool counts as decode-bound (at
// the default interval, the third reading 10 s after the first). An
// engine line read in a transient — the first minute of long contexts,
// before the window identifies the context term, or a saturated pool
// whose prefill shares the decode steps — crosses it for one or two
// evaluations (the A100 8B's Mooncake trace at 2× read 0.16 and 0.46,
// then 0.04; the L4's 0.15, then 0.002), while a decode-bound engine
// reads steadily from its first line (the Qwen 7B 0.11–0.34 in the
// oracle suite's cells: docs/adaptive.md, "In the default profile:
// in-flight requests weigh 4"). The count is of evaluations: at a
// trade.interval shorter than the calibrator's publishing interval (5 s)
// the three readings span fewer published lines.
const batchHold = 3

// slotHold is how many consecutive evaluations must read the KV slots at
// or below slots_on before the pool counts as slot-bound: one window of
// twenty long prompts in a quiet minute is not the traffic.
const slotHold = 2

// promptHold is how many consecutive evaluations must read the uncached
// prompt at or above prompt_on before the traffic counts as
// prefill-heavy, for the same reason.
const promptHold = 2

// TradeState is the law's state between evaluations.
type TradeState struct {
	// Mix is where the calm weights sit between the profile's shape (0)
	// and the shape Decode and Slot name (1): the trade shape, the
	// decode-bound or the slot-bound one.
	Mix float64 `json:"mix"`
	// Heterogeneous is the hysteresis state: the spread last crossed
	// spread_on (true) or spread_off (false, the start).
	Heterogeneous bool `json:"heterogeneous"`
	// DecodeBound is the batch cost's hysteresis state: it last crossed
	// batch_on (true) or batch_off (false, the start).
	DecodeBound bool `json:"decode_bound,omitempty"`
	// BatchHeld counts the consecutive evaluations, while not
	// decode-bound, whose learned batch cost was at or above batch_on;
	// the pool counts as decode-bound at the batchHold-th. BatchLow is
	// the lowest of those readings, kept while the pool is decode-bound:
	// the mix moves at once only when every one of them was twice
	// batch_on or more.
	BatchHeld int     `json:"batch_held,omitempty"`
	BatchLow  float64 `json:"batch_low,omitempty"`
	// SlotBound is the KV slots' hysteresis state: they last crossed
	// slots_on (true, at the slotHold-th reading in a row; SlotHeld
	// counts them) or slots_off (false, the start). A slot-bound pool
	// takes the slot-bound shape (Slot).
	SlotBound bool `json:"slot_bound,omitempty"`
	SlotHeld  int  `json:"slot_held,omitempty"`
	// PrefillHeavy is the uncached prompt's hysteresis state: it last
	// crossed prompt_on (true, at the promptHold-th reading in a row;
	// PromptHeld counts them) or prompt_off (false, the start). A
	// prefill-heavy pool that is not slot-bound takes the trade shape.
	PrefillHeavy bool `json:"prefill_heavy,omitempty"`
	PromptHeld   int  `json:"prompt_held,omitempty"`
	// Decode is the shape the mix blends toward: the decode-bound shape
	// (true) or the trade shape; with Slot, the slot-bound shape. They
	// change only at mix 0, so the weights go back to the profile's
	// before they move toward another shape.
	Decode bool `json:"decode,omitempty"`
	Slot   bool `json:"slot,omitempty"`
}

// TradeInput is what one evaluation reads.
type TradeInput struct {
	// Spread and Endpoints are PrefillSpread's results (learned).
	Spread    float64
	Endpoints int
	// Declared is CapacitySpread's result; 0 or 1 when every endpoint
	// declares the same capacity.
	Declared float64
	// Batch and BatchEndpoints are BatchCost's results (learned).
	Batch          float64
	BatchEndpoints int
	// Slots and SlotEndpoints are the pool's KV slots and how many
	// endpoints they rest on (0: no reading).
	Slots         float64
	SlotEndpoints int
	// Prompt and PromptPicks are the pool's uncached prompt in tokens and
	// how many picks its mean rests on (0: no reading).
	Prompt      float64
	PromptPicks int
	// LoopMode is the configurator's mode; the mix changes only in calm.
	LoopMode string
}

// Next is the trade law as a pure function. The speed spread is Declared,
// or the larger of Declared and the learned Spread once Endpoints ≥ 2.
// Its crossing spread_on makes the pool heterogeneous, crossing spread_off
// homogeneous again (with fewer than two learned endpoints and a declared
// spread below spread_on the classification holds). With batch_on set,
// the learned Batch cost at or above batch_on at batchHold consecutive
// evaluations makes the pool decode-bound, crossing batch_off not (with
// no learned endpoint it holds, and so does the count); with slots_on
// set, KV slots at or below it at slotHold consecutive evaluations make
// it slot-bound, at or above slots_off not (no reading holds both); with
// prompt_on set, an uncached Prompt at or above it at promptHold consecutive
// evaluations makes the traffic prefill-heavy, at or below prompt_off not
// (no reading holds both). The mix then moves toward 1 (heterogeneous,
// decode-bound, slot-bound or prefill-heavy) or 0 by at most Step — to 1
// at once where a declared spread, a batch cost twice batch_on, a
// slot-bound or a prefill-heavy pool moves it up — only while the loop
// is in calm mode (a new shape restarts the configurator,
// which would end a rebalance). It returns the state afterwards and a
// reason with the numbers when the mix changed ("" when it did not).
func (c TradeConfig) Next(s TradeState, in TradeInput) (TradeState, string) {
	spread, src, declared := max(in.Declared, 1), "declared capacity", true
	if in.Endpoints >= 2 && in.Spread > spread {
		spread, src, declared = in.Spread, fmt.Sprintf("learned prefill, %d endpoints", in.Endpoints), false
	}
	if in.Endpoints >= 2 || spread >= c.SpreadOn {
		switch {
		case !s.Heterogeneous && spread >= c.SpreadOn:
			s.Heterogeneous = true
		case s.Heterogeneous && spread <= c.SpreadOff:
			s.Heterogeneous = false
		}
	}
	if c.BatchOn == 0 {
		// The input is off (a reload may have turned it off): the pool
		// is not decode-bound, the mix leaves the decode-bound shape,
		// and a hold in progress is forgotten.
		s.DecodeBound, s.BatchHeld, s.BatchLow = false, 0, 0
	} else if in.BatchEndpoints > 0 {
		switch {
		case !s.DecodeBound && in.Batch >= c.BatchOn:
			if s.BatchHeld == 0 || in.Batch < s.BatchLow {
				s.BatchLow = in.Batch
			}
			if s.BatchHeld++; s.BatchHeld >= batchHold {
				s.DecodeBound, s.BatchHeld = true, 0
			}
		case !s.DecodeBound:
			s.BatchHeld, s.BatchLow = 0, 0
		case in.Batch <= c.BatchOff:
			s.DecodeBound, s.BatchLow = false, 0
		}
	}
	if c.SlotsOn == 0 {
		s.SlotBound, s.SlotHeld = false, 0
	} else if in.SlotEndpoints > 0 {
		switch {
		case !s.SlotBound && in.Slots <= c.SlotsOn:
			if s.SlotHeld++; s.SlotHeld >= slotHold {
				s.SlotBound, s.SlotHeld = true, 0
			}
		case !s.SlotBound:
			s.SlotHeld = 0
		case in.Slots >= c.SlotsOff:
			s.SlotBound = false
		}
	}
	if c.PromptOn == 0 {
		s.PrefillHeavy, s.PromptHeld = false, 0
	} else if in.PromptPicks > 0 {
		switch {
		case !s.PrefillHeavy && in.Prompt >= c.PromptOn:
			if s.PromptHeld++; s.PromptHeld >= promptHold {
				s.PrefillHeavy, s.PromptHeld = true, 0
			}
		case !s.PrefillHeavy:
			s.PromptHeld = 0
		case in.Prompt <= c.PromptOff:
			s.PrefillHeavy = false
		}
	}
	// A heterogeneous pool takes the trade shape whatever else it reads. A
	// slot-bound pool takes the slot-bound shape, decode-bound or not, and
	// prefill-heavy traffic at mix 0 waits (the mix stays) while this
	// evaluation reads a slot hold in progress (long prompts on small pods
	// read both, and the slots one evaluation later while the output is
	// not yet learned); once in the trade shape, one such reading does not
	// move it, and an evaluation with no slot reading does not wait.
	// Prefill-heavy traffic takes the trade shape, decode-bound or not:
	// long prefills share the decode steps, and a line fitted to them can
	// read a dense engine as decode-bound for tens of seconds (the A100
	// 8B's Mooncake trace at 2×), and the Qwen 7B, decode-bound from its
	// first line, serves that trace's first token better in seconds too
	// (docs/adaptive.md, "Prefill-heavy traffic"). A decode-bound pool,
	// else, takes the decode-bound shape.
	wait := s.PrefillHeavy && s.Mix == 0 && s.SlotHeld > 0 && in.SlotEndpoints > 0 && !s.Heterogeneous
	wantDecode := !s.Heterogeneous && (s.SlotBound || (s.DecodeBound && !s.PrefillHeavy))
	wantSlot := wantDecode && s.SlotBound && len(c.SlotWeights) > 0
	if s.Mix == 0 {
		s.Decode, s.Slot = wantDecode, wantSlot
	}
	target := 0.0
	if !wait && (s.Heterogeneous || s.DecodeBound || s.SlotBound || s.PrefillHeavy) && s.Decode == wantDecode && s.Slot == wantSlot {
		target = 1
	}
	if s.Mix == target || (in.LoopMode != configurator.ModeCalm && in.LoopMode != configurator.ModeStatic) {
		return s, ""
	}
	from, step := s.Mix, c.Step
	if declared && s.Heterogeneous && spread >= c.SpreadOn && target > s.Mix {
		// A declared spread is configuration, the same on every replica:
		// there is no estimate to smooth, and the shape of the first
		// seconds decides where each prefix lives.
		step = 1
	}
	if s.Decode && target == 1 && min(in.Batch, s.BatchLow) >= 2*c.BatchOn {
		// A learned batch cost twice batch_on or more, now and at every
		// reading that made the pool decode-bound, is no estimate near
		// the threshold to smooth, and the shape of the first seconds
		// decides where each prefix is copied while caches have room
		// (only on the way up: every move back is a step). A transient
		// line rises through the hold (the A100 8B's Mooncake trace at 2×
		// read 0.21, 0.18, 0.22) and moves the mix a step.
		step = 1
	}
	if s.Decode && target == 1 && s.SlotBound {
		// Two readings in a row, each a scraped KV size over the mean
		// of twenty or more requests, with no fit behind them; and the
		// requests of the first seconds queue where they were sent for
		// as long as the decodes ahead of them run.
		step = 1
	}
	if !s.Decode && target == 1 && s.PrefillHeavy {
		// Two readings in a row, each the mean of twenty or more requests,
		// with no fit behind them; and the long prompts of the first
		// seconds are prefilled, and cached, where they were sent.
		step = 1
	}
	if target > s.Mix {
		s.Mix = min(target, s.Mix+step)
	} else {
		s.Mix = max(target, s.Mix-step)
	}
	why := fmt.Sprintf("speed spread %.2f (%s)", spread, src)
	if s.Heterogeneous {
		why += fmt.Sprintf(" (heterogeneous: crossed spread_on %.2f)", c.SpreadOn)
	} else {
		why += fmt.Sprintf(" (homogeneous: crossed spread_off %.2f)", c.SpreadOff)
	}
	if c.BatchOn > 0 && (s.DecodeBound || in.BatchEndpoints > 0) {
		why += fmt.Sprintf(", batch cost %.3g (learned decode line, %d endpoints)", in.Batch, in.BatchEndpoints)
		if s.DecodeBound {
			why += fmt.Sprintf(" (decode-bound: crossed batch_on %.3g)", c.BatchOn)
		} else {
			why += fmt.Sprintf(" (not decode-bound: batch_on %.3g, batch_off %.3g)", c.BatchOn, c.BatchOff)
		}
	}
	if c.SlotsOn > 0 && (s.SlotBound || in.SlotEndpoints > 0) {
		why += fmt.Sprintf(", KV slots %.3g (%d endpoints)", in.Slots, in.SlotEndpoints)
		if s.SlotBound {
			why += fmt.Sprintf(" (slot-bound: crossed slots_on %.3g)", c.SlotsOn)
		} else {
			why += fmt.Sprintf(" (not slot-bound: slots_on %.3g, slots_off %.3g)", c.SlotsOn, c.SlotsOff)
		}
	}
	if c.PromptOn > 0 && (s.PrefillHeavy || in.PromptPicks > 0) {
		if in.PromptPicks > 0 {
			why += fmt.Sprintf(", uncached prompt %.0f tokens (mean of %d picks)", in.Prompt, in.PromptPicks)
		} else {
			why += ", uncached prompt: no reading"
		}
		if s.PrefillHeavy {
			why += fmt.Sprintf(" (prefill-heavy: crossed prompt_on %g)", c.PromptOn)
		} else {
			why += fmt.Sprintf(" (not prefill-heavy: prompt_on %g, prompt_off %g)", c.PromptOn, c.PromptOff)
		}
	}
	shape := "trade shape"
	switch {
	case s.Slot:
		shape = "slot-bound shape"
	case s.Decode:
		shape = "decode-bound shape"
	}
	return s, fmt.Sprintf("%s: mix %.3g → %.3g toward the %s (step %.3g)", why, from, s.Mix, shape, step)
}
