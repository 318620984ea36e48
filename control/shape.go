package control

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/scheduler"
)

// The two laws that reshape the calm weights (the trade law, trade.go;
// the fill law, fill.go), as the loop runs them at a tick, and the shaped
// profile they give (ShapedBy) with its check over every reachable mix.

// stepTrade evaluates the trade law on pool and, when the mix moves,
// reshapes the calm weights; it returns the law's reason, or "" when the
// mix stayed.
func (l *Loop) stepTrade(pool []*scheduler.Endpoint, mode string, fresh bool) string {
	spread, n := PrefillSpread(pool, l.cfg.Trade.MinSamples)
	declared := CapacitySpread(pool)
	l.m.tradeSpread.Set(spread)
	l.m.tradeDeclared.Set(declared)
	batch, bn := BatchCost(pool, l.cfg.Trade.MinSamples)
	if bn > 0 {
		l.m.tradeBatch.Set(batch)
	}
	// The reader keeps its window whether the inputs are on or not, so a
	// reload that turns one on reads the traffic of the last minute.
	picks := l.picks.read(pool)
	if picks.SlotN > 0 {
		l.m.tradeSlots.Set(picks.Slots)
	}
	if picks.PromptPicks > 0 {
		l.m.tradePrompt.Set(picks.Prompt)
	}
	next, why := l.cfg.Trade.Next(l.trade, TradeInput{Spread: spread, Endpoints: n, Declared: declared, Batch: batch, BatchEndpoints: bn,
		Slots: picks.Slots, SlotEndpoints: picks.SlotN, Prompt: picks.Prompt, PromptPicks: picks.PromptPicks, LoopMode: mode})
	if why == "" {
		l.trade = next
		return ""
	}
	if !l.reshape(next, l.fill, fresh, "trade law", why) {
		return ""
	}
	l.m.tradeMix.Set(next.Mix)
	l.m.tradeChanges.Inc()
	attrs := []any{"reason", why, "mix", next.Mix, "prefill_spread", spread, "endpoints", n, "capacity_spread", declared, "batch_cost", batch}
	if picks.SlotN > 0 {
		attrs = append(attrs, "kv_slots", picks.Slots)
	}
	if picks.PromptPicks > 0 {
		attrs = append(attrs, "uncached_prompt", picks.Prompt)
	}
	l.log.Info("trade", append(attrs, slog.Group("base", l.attrs(*l.base.Load())...))...)
	return why
}

// stepFill evaluates the fill law on pool and, when its weights come in
// or go out, reshapes the calm weights; it returns the law's reason, or
// "" when nothing changed.
func (l *Loop) stepFill(now time.Time, pool []*scheduler.Endpoint, mode string, fresh bool) string {
	if l.filler == nil {
		return ""
	}
	fill, ok := l.filler.Fill(pool)
	if ok {
		l.m.fill.Set(fill)
	}
	evicted, capacity := l.filler.Evictions()
	churn, churnOK := l.churn.add(now, evicted, capacity, l.cfg.Fill.Window)
	if churnOK {
		l.m.fillChurn.Set(churn)
	}
	next, why := l.cfg.Fill.Next(l.fill, FillInput{At: now, Fill: fill, OK: ok, Churn: churn, ChurnOK: churnOK, LoopMode: mode})
	if why == "" {
		l.fill = next
		return ""
	}
	if !l.reshape(l.trade, next, fresh, "fill law", why) {
		return ""
	}
	l.m.fillMix.Set(next.Mix)
	l.m.fillChanges.Inc()
	l.log.Info("fill", "reason", why, "mix", next.Mix, "index_fill", fill, "churn", churn,
		slog.Group("base", l.attrs(*l.base.Load())...))
	return why
}

// reshape rebuilds the configurator over the profile shaped by the trade
// and fill laws' states ts and fs, continuing the weight versions from
// those in force (fresh: the new calm weights in force at once), and keeps
// both states; false (and nothing changed) when the shaped profile does
// not build, which CheckProfile rules out.
func (l *Loop) reshape(ts TradeState, fs FillState, fresh bool, law, why string) bool {
	mcfg, mixed := l.cfg.ShapedBy(l.prof, ts, fs.Mix)
	from := l.target.Weights()
	if fresh && from != nil {
		// Before the configurator's first step (the loop's first tick, or
		// the first after a reload) or before a tick has seen a pool
		// (serve's first tick usually runs before discovery's first list)
		// the new shape is in force at once: the slew limit keeps a running
		// loop from jumping, and here at most the requests of the moment
		// since the first pool have routed under the old shape.
		start := *from
		start.Values = weightsOf(mixed)
		from = &start
	}
	conf, err := configurator.New(mcfg.Config, mixed, from)
	if err != nil { // CheckProfile checked every reachable shape
		l.log.Error(law+": the shaped profile does not build; keeping the shape in force", "reason", why, "err", err)
		return false
	}
	l.conf, l.trade, l.fill = conf, ts, fs
	l.storeBase(mixed)
	return true
}

// Trade returns the trade law's state (mix 0 while it is off). Not safe
// for concurrent use with Tick.
func (l *Loop) Trade() TradeState { return l.trade }

// Fill returns the fill law's state (mix 0 while it is off). Not safe for
// concurrent use with Tick.
func (l *Loop) Fill() FillState { return l.fill }

// ShapedBy returns the configuration and profile the loop runs at the
// trade law's state t and the fill law's mix f, in [0,1]: every scorer's
// weight (1−m)·profile + m·shape, m t's mix and the shape the trade shape
// or, when t.Decode, the decode-bound one (trade.decode_weights), or with
// t.Slot the slot-bound one (trade.slot_weights), plus f
// times its adaptive.fill.add weight; and d_max and affinity_floor the
// trade's blend of the profile's and the section's. The profile is not
// modified; the returned sections are c's.
func (c Config) ShapedBy(profile []scheduler.ScorerEntry, t TradeState, f float64) (Config, []scheduler.ScorerEntry) {
	return c.shaped(profile, c.Trade.shape(t), t.Mix, f)
}

// shape returns the weights of the shape t's mix blends toward: the
// slot-bound shape (SlotWeights, DecodeWeights when empty), the
// decode-bound one or the trade shape.
func (c TradeConfig) shape(t TradeState) map[string]float64 {
	switch {
	case t.Decode && t.Slot && len(c.SlotWeights) > 0:
		return c.SlotWeights
	case t.Decode:
		return c.DecodeWeights
	}
	return c.Weights
}

// shaped is ShapedBy toward the shape shape at mix m.
func (c Config) shaped(profile []scheduler.ScorerEntry, shape map[string]float64, m, f float64) (Config, []scheduler.ScorerEntry) {
	out := make([]scheduler.ScorerEntry, len(profile))
	copy(out, profile)
	shaped := c
	if m > 0 && c.Trade.Enabled {
		m = min(m, 1)
		for i := range out {
			if w, ok := byName(shape, out[i].Name); ok {
				out[i].Weight = (1-m)*out[i].Weight + m*w
			}
		}
		if c.Trade.DMax > 0 {
			shaped.DMax = (1-m)*c.DMax + m*c.Trade.DMax
		}
		if c.Trade.AffinityFloor > 0 {
			shaped.AffinityFloor = (1-m)*c.AffinityFloor + m*c.Trade.AffinityFloor
		}
	}
	if f > 0 && c.Fill.Enabled {
		f = min(f, 1)
		for i := range out {
			if w, ok := byName(c.Fill.Add, out[i].Name); ok {
				out[i].Weight = min(out[i].Weight+f*w, maxTradeWeight)
			}
		}
	}
	return shaped, out
}

// checkTrade reports whether every trade weight names one of the
// profile's scorers and, with the loop on, whether the loop can run the
// profile at every mix the law can reach (0, Step, 2·Step, …, 1, and 1 −
// Step, 1 − 2·Step, … on the way back), each
// with and without the fill law's weights (adaptive.fill). With
// adaptive.enabled false the law is idle (it moves the loop's calm
// weights), so turning the loop off is the one edit a roll-back needs.
func (c Config) checkTrade(profile []scheduler.ScorerEntry) error {
	if c.Trade.Enabled {
		if err := checkWeights(c.Trade.Weights, "adaptive.trade.weights.", profile); err != nil {
			return err
		}
		if err := checkWeights(c.Trade.DecodeWeights, "adaptive.trade.decode_weights.", profile); err != nil {
			return err
		}
		if err := checkWeights(c.Trade.SlotWeights, "adaptive.trade.slot_weights.", profile); err != nil {
			return err
		}
	}
	if !c.Enabled {
		return nil
	}
	fills := []float64{0}
	if c.Fill.Enabled {
		fills = append(fills, 1)
	}
	mixes := []float64{0}
	if c.Trade.Enabled {
		mixes = c.Trade.mixes()
	}
	// Every shape the section names, whether or not its input is on: a
	// reload that turns an input off keeps the law's state, so the loop
	// may still be blending toward that shape.
	shapes := []TradeState{{}}
	if c.Trade.Enabled && len(c.Trade.DecodeWeights) > 0 {
		shapes = append(shapes, TradeState{Decode: true})
	}
	if c.Trade.Enabled && len(c.Trade.SlotWeights) > 0 {
		shapes = append(shapes, TradeState{Decode: true, Slot: true})
	}
	for _, sh := range shapes {
		for _, f := range fills {
			for _, m := range mixes {
				if m == 0 && f == 0 {
					continue // the profile itself, checked by CheckProfile
				}
				sh.Mix = m
				cfg, shaped := c.ShapedBy(profile, sh, f)
				if _, err := configurator.New(cfg.Config, shaped, nil); err != nil {
					law, at := "adaptive.trade", "trade"
					switch {
					case sh.Slot:
						law, at = "adaptive.trade.slot_weights", "slot-bound"
					case sh.Decode:
						law, at = "adaptive.trade.decode_weights", "decode-bound"
					}
					if f > 0 {
						return fmt.Errorf("adaptive.fill: with its weights added at %s mix %.3g the loop cannot run: %w", at, m, err)
					}
					return fmt.Errorf("%s: at mix %.3g the loop cannot run: %w", law, m, err)
				}
			}
		}
	}
	return nil
}

// mixes returns every mix the law can reach: 0, Step, 2·Step, … up to 1,
// and 1 − Step, 1 − 2·Step, … down from it (a declared spread jumps to 1;
// every move back is a step), so a step that does not divide 1 has two
// ladders.
func (c TradeConfig) mixes() []float64 {
	out := []float64{0}
	for m := c.Step; ; m += c.Step {
		out = append(out, min(m, 1))
		if m >= 1 {
			break
		}
	}
	for m := 1 - c.Step; m > 1e-9; m -= c.Step {
		out = append(out, m)
	}
	return out
}
