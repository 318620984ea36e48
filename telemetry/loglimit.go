package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// LimitConfig configures LimitHandler.
type LimitConfig struct {
	// Interval is the window in which one kind of record is counted
	// (default 10s). 0 is not valid; to turn limiting off, do not wrap.
	Interval time.Duration
	// Burst is how many records of one kind pass per Interval (default 5);
	// the rest are suppressed and counted.
	Burst int
	// Slots is the number of kinds tracked at once (default 1024), in sets
	// of 4; a kind not tracked is never suppressed. Memory is fixed.
	Slots int
	// KeyAttrs are the attribute keys whose values tell kinds apart, as
	// well as level and message (default "component", "endpoint",
	// "setting"). Attributes from outside (peer ids, client addresses,
	// error texts) must not be keys, or a flood of distinct values would
	// pass unlimited.
	KeyAttrs []string
	// MinLevel is the lowest level limited (default Info): records below
	// it, asked for with --log-level debug, all pass.
	MinLevel slog.Level
}

// DefaultLimitConfig returns the defaults documented on each field.
func DefaultLimitConfig() LimitConfig {
	return LimitConfig{Interval: 10 * time.Second, Burst: 5, Slots: 1024,
		KeyAttrs: []string{"component", "endpoint", "setting"}, MinLevel: slog.LevelInfo}
}

// Validate checks the config; errors name the field.
func (c LimitConfig) Validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, errors.New("log limit interval: must be > 0"))
	}
	if c.Burst < 1 {
		errs = append(errs, errors.New("log limit burst: must be ≥ 1"))
	}
	if c.Slots < limitWays || c.Slots > 1<<20 {
		errs = append(errs, errors.New("log limit slots: must be in 4…1048576"))
	}
	return errors.Join(errs...)
}

// LimitDeps are LimitHandler's collaborators.
type LimitDeps struct {
	// Clock; nil means the real one.
	Clock clock.PassiveClock
}

// SuppressedKey is the attribute that carries how many records of the
// same kind were suppressed since the last one emitted.
const SuppressedKey = "suppressed"

const limitWays = 4

// LimitHandler is a slog.Handler that passes at most Burst records of one
// kind — the same level, message and KeyAttrs values — per Interval to
// the handler it wraps, and suppresses the rest. The first record of an
// Interval after suppression carries suppressed=N. Suppressed counts not
// yet reported are emitted, as one record of that kind with suppressed=N,
// when the kind's slot is reused or on Flush; so a line is never dropped
// without a count, and a line seen once always passes.
//
// Kinds live in a fixed table of Slots entries (4-way set associative);
// memory does not grow with the number of kinds. Safe for concurrent use;
// handlers derived with WithAttrs and WithGroup share the table.
type LimitHandler struct {
	inner slog.Handler
	st    *limitState
	// pre is the hash of the key attributes added with WithAttrs.
	pre  uint64
	keys []string
}

type limitState struct {
	cfg   LimitConfig
	clock clock.PassiveClock
	mu    sync.Mutex
	slots []limitEntry
}

type limitEntry struct {
	hash       uint64 // 0: free
	level      slog.Level
	msg        string
	h          slog.Handler // the derived handler the kind was logged through
	start      time.Time    // start of the current interval
	passed     int          // records passed in the interval
	suppressed int          // records suppressed, not yet reported
	last       time.Time    // last record seen, for replacement
}

// NewLimitHandler wraps inner.
func NewLimitHandler(inner slog.Handler, cfg LimitConfig, deps LimitDeps) (*LimitHandler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	n := cfg.Slots / limitWays * limitWays
	return &LimitHandler{inner: inner, keys: slices.Clone(cfg.KeyAttrs), pre: fnvOffset,
		st: &limitState{cfg: cfg, clock: deps.Clock, slots: make([]limitEntry, n)}}, nil
}

// Enabled implements slog.Handler.
func (l *LimitHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.inner.Enabled(ctx, level)
}

// WithAttrs implements slog.Handler.
func (l *LimitHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *l
	c.inner = l.inner.WithAttrs(attrs)
	for _, a := range attrs {
		c.pre = c.hashAttr(c.pre, a)
	}
	return &c
}

// WithGroup implements slog.Handler.
func (l *LimitHandler) WithGroup(name string) slog.Handler {
	c := *l
	c.inner = l.inner.WithGroup(name)
	return &c
}

// Handle implements slog.Handler.
func (l *LimitHandler) Handle(ctx context.Context, r slog.Record) error {
	st := l.st
	if r.Level < st.cfg.MinLevel {
		return l.inner.Handle(ctx, r)
	}
	h := l.pre
	h = mix(h, uint64(int64(r.Level)))
	h = mixString(h, r.Message)
	r.Attrs(func(a slog.Attr) bool { h = l.hashAttr(h, a); return true })
	if h == 0 {
		h = 1
	}
	now := st.clock.Now()

	st.mu.Lock()
	set := st.slots[int(h%uint64(len(st.slots)/limitWays))*limitWays:][:limitWays]
	var e *limitEntry
	for i := range set {
		if set[i].hash == h {
			e = &set[i]
			break
		}
	}
	if e == nil {
		// Take a free slot, else the one idle longest; report what it
		// still owes.
		e = &set[0]
		for i := range set {
			if set[i].hash == 0 {
				e = &set[i]
				break
			}
			if set[i].last.Before(e.last) {
				e = &set[i]
			}
		}
		owed := *e
		*e = limitEntry{hash: h, level: r.Level, msg: r.Message, h: l.inner, start: now, passed: 1, last: now}
		st.mu.Unlock()
		if owed.hash != 0 && owed.suppressed > 0 {
			_ = owed.report(ctx, now)
		}
		return l.inner.Handle(ctx, r)
	}
	e.last = now
	if now.Sub(e.start) >= st.cfg.Interval {
		n := e.suppressed
		e.start, e.passed, e.suppressed = now, 1, 0
		st.mu.Unlock()
		if n > 0 {
			r = r.Clone()
			r.AddAttrs(slog.Int(SuppressedKey, n))
		}
		return l.inner.Handle(ctx, r)
	}
	if e.passed < st.cfg.Burst {
		e.passed++
		st.mu.Unlock()
		return l.inner.Handle(ctx, r)
	}
	e.suppressed++
	st.mu.Unlock()
	return nil
}

// Flush emits, for every kind with suppressed records not yet reported,
// one record with suppressed=N, and resets the counts. Call it before
// exit.
func (l *LimitHandler) Flush(ctx context.Context) error {
	st := l.st
	now := st.clock.Now()
	st.mu.Lock()
	var owed []limitEntry
	for i := range st.slots {
		if e := &st.slots[i]; e.hash != 0 && e.suppressed > 0 {
			owed = append(owed, *e)
			e.suppressed = 0
		}
	}
	st.mu.Unlock()
	var errs []error
	for _, e := range owed {
		errs = append(errs, e.report(ctx, now))
	}
	return errors.Join(errs...)
}

// report emits the kind's message with its suppressed count.
func (e limitEntry) report(ctx context.Context, now time.Time) error {
	r := slog.NewRecord(now, e.level, e.msg, 0)
	r.AddAttrs(slog.Int(SuppressedKey, e.suppressed))
	return e.h.Handle(ctx, r)
}

func (l *LimitHandler) hashAttr(h uint64, a slog.Attr) uint64 {
	if !slices.Contains(l.keys, a.Key) {
		return h
	}
	h = mixString(h, a.Key)
	return mixString(h, a.Value.String())
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// mixString folds s, then a terminator, into the FNV-1a hash h.
func mixString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	h ^= 0xff
	h *= fnvPrime
	return h
}

func mix(h, v uint64) uint64 {
	h ^= v
	h *= fnvPrime
	return h
}
