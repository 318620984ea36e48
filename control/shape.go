package control

import (
	"log/slog"
	"time"

	"github.com/trimtab/trimtab/configurator"
	"github.com/trimtab/trimtab/scheduler"
)

// The two laws that reshape the calm weights (the trade law, trade.go;
// the fill law, fill.go), as the loop runs them at a tick.

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
	// The reader keeps its window whether the input is on or not, so a
	// reload that turns it on reads the traffic of the last minute.
	slots, sn := l.slots.read(pool)
	if sn > 0 {
		l.m.tradeSlots.Set(slots)
	}
	next, why := l.cfg.Trade.Next(l.trade, TradeInput{Spread: spread, Endpoints: n, Declared: declared, Batch: batch, BatchEndpoints: bn, Slots: slots, SlotEndpoints: sn, LoopMode: mode})
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
	if sn > 0 {
		attrs = append(attrs, "kv_slots", slots)
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
