// Package status keeps a bounded history of trimtab's adaptive loop — the
// imbalance signal with its components, the mode and the weights at every
// control tick, and every weight change with its reason — and serves it:
// /debug/history as JSON, and /ui, a self-contained status page (embedded
// HTML, CSS and JavaScript in one response; no build step, no CDN, no
// external fonts) that polls /debug/history, /debug/endpoints,
// /debug/decisions, (replica sync) /debug/peers and (flow control)
// /debug/flow every second.
//
// # Bounds
//
// Samples are kept for Config.Window of sample time (default 10 minutes),
// measured back from the newest sample, at one sample per
// Config.Resolution (default 500 ms): a sample whose time falls in the same
// Resolution slot as the newest stored one replaces it. At the default
// 50 ms control tick that keeps one tick in ten, the latest of each slot,
// so at most Window/Resolution + 1 = 1,201 samples. Weight changes are kept
// in a ring of Config.Changes (default 100) entries; consecutive changes
// within one mode (the configurator's slew steps) share one entry, so a
// calm → rebalance → calm episode takes about four.
//
// # Concurrency
//
// A Recorder is safe for concurrent use: one mutex guards the rings, held
// only to copy entries in or out; JSON is encoded outside it. The Recorder
// starts no goroutines. Maps handed to it in a Sample are kept, not
// copied: the caller must not modify them afterwards.
//
// # Time
//
// The Recorder never reads a clock: ages are measured against the newest
// sample's time, so the history works the same on virtual (simulator) and
// wall-clock time.
package status

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// Config bounds the history. serve runs with DefaultConfig; the profile
// has no section for it.
type Config struct {
	// Window is how much sample time is kept, back from the newest sample.
	// Default 10m. Must be > 0.
	Window time.Duration
	// Resolution is the width of a sample slot: at most one sample (the
	// latest recorded) is kept per slot. Default 500ms. Must be > 0 and
	// leave at most MaxSamples slots in Window.
	Resolution time.Duration
	// Changes is how many recent weight changes are kept. Default 100.
	// Must be ≥ 0 (0 keeps none).
	Changes int
}

// MaxSamples bounds Window/Resolution, so a config cannot make the
// Recorder hold an unbounded number of samples.
const MaxSamples = 100_000

// DefaultConfig returns the documented defaults: 10 minutes at 500 ms
// (1,201 samples), 100 changes.
func DefaultConfig() Config {
	return Config{Window: 10 * time.Minute, Resolution: 500 * time.Millisecond, Changes: 100}
}

// Validate checks the config; errors name the YAML field.
func (c Config) Validate() error {
	switch {
	case c.Window <= 0:
		return fmt.Errorf("status.window: must be > 0, got %v", c.Window)
	case c.Resolution <= 0:
		return fmt.Errorf("status.resolution: must be > 0, got %v", c.Resolution)
	case c.Window/c.Resolution > MaxSamples:
		return fmt.Errorf("status.resolution: window %v / resolution %v keeps %d samples, want at most %d",
			c.Window, c.Resolution, c.Window/c.Resolution, MaxSamples)
	case c.Changes < 0:
		return fmt.Errorf("status.changes: must be ≥ 0, got %d", c.Changes)
	}
	return nil
}

// Sample is the adaptive loop's state at one control tick.
type Sample struct {
	// At is the tick's time (detector or configurator time).
	At time.Time `json:"at"`
	// Signal is the imbalance signal the configurator consumed, in [0,1].
	Signal float64 `json:"signal"`
	// Components are the numbers the signal was computed from, by name
	// (request_cv, kv_cv, raw, smoothed, pressure, endpoints, total_load,
	// …). Ratios are in [0,1]; counts are plain numbers. May be nil.
	Components map[string]float64 `json:"components,omitempty"`
	// Gate is why the signal was held at 0 ("" when it was not).
	Gate string `json:"gate,omitempty"`
	// Mode is the configurator mode of the weights in force ("static",
	// "calm", "rebalance", "frozen").
	Mode string `json:"mode"`
	// Weights are the weights in force, by scorer name.
	Weights map[string]float64 `json:"weights,omitempty"`
	// Version is the weights' version.
	Version uint64 `json:"version"`
}

// SetWeights fills Mode, Version and Weights from w, naming values by
// names (index-aligned with w.Values; a missing name becomes "#i"). It
// allocates a new map. A nil w leaves s unchanged.
func (s *Sample) SetWeights(w *scheduler.Weights, names []string) {
	if w == nil {
		return
	}
	s.Mode, s.Version, s.Weights = w.Mode, w.Version, weightMap(w, names)
}

func weightMap(w *scheduler.Weights, names []string) map[string]float64 {
	if w == nil {
		return nil
	}
	m := make(map[string]float64, len(w.Values))
	for i, v := range w.Values {
		m[nameAt(names, i)] = v
	}
	return m
}

func nameAt(names []string, i int) string {
	if i < len(names) && names[i] != "" {
		return names[i]
	}
	return fmt.Sprintf("#%d", i)
}

// Change is one published weight change, or a run of consecutive small
// changes within one mode (see RecordChange).
type Change struct {
	// At is when the new weights were computed (Weights.At; the newest
	// sample's time when that is zero).
	At time.Time `json:"at"`
	// FromVersion and ToVersion are the old and new weights' versions
	// (FromVersion 0: there were none).
	FromVersion uint64 `json:"from_version"`
	ToVersion   uint64 `json:"to_version"`
	// FromMode and ToMode are the old and new modes.
	FromMode string `json:"from_mode,omitempty"`
	ToMode   string `json:"to_mode"`
	// Reason is the configurator's explanation of the change.
	Reason string `json:"reason"`
	// Signal is the signal the new weights were computed from.
	Signal float64 `json:"signal"`
	// Old and New are the weights by scorer name (Old nil when there were
	// none).
	Old map[string]float64 `json:"old,omitempty"`
	New map[string]float64 `json:"new"`
	// Steps is how many published versions this entry stands for: 1, or
	// more when consecutive changes within one mode were merged.
	Steps int `json:"steps"`
}

// ScorerInfo describes one scorer of the profile for the page.
type ScorerInfo struct {
	Name     string `json:"name"`
	Type     string `json:"type,omitempty"`
	Category string `json:"category"`
	// Base is the profile (static) weight.
	Base float64 `json:"base"`
}

// Entry is a stored sample with its sequence number. Seq increases by one
// per slot; a sample that replaces the newest one keeps its Seq, so a
// client that re-reads from its last Seq (inclusive) sees the update.
type Entry struct {
	Seq uint64 `json:"seq"`
	// AtMs is At in Unix milliseconds, for JavaScript.
	AtMs int64 `json:"at_ms"`
	Sample
}

// ChangeEntry is a stored change with its sequence number (1, 2, …).
type ChangeEntry struct {
	Seq  uint64 `json:"seq"`
	AtMs int64  `json:"at_ms"`
	Change
}

// History is what /debug/history returns.
type History struct {
	// WindowMs and ResolutionMs are the Recorder's bounds in milliseconds.
	WindowMs     int64 `json:"window_ms"`
	ResolutionMs int64 `json:"resolution_ms"`
	// Scorers are the profile's scorers in weight order (empty until
	// SetScorers is called).
	Scorers []ScorerInfo `json:"scorers"`
	// Latest is the newest sample (nil before the first).
	Latest *Entry `json:"latest"`
	// Samples are the requested samples, oldest first.
	Samples []Entry `json:"samples"`
	// Changes are the kept weight changes, oldest first.
	Changes []ChangeEntry `json:"changes"`
	// Dropped counts samples rejected because they were older than the
	// newest one.
	Dropped uint64 `json:"dropped"`
}

// Recorder is the bounded history. See the package documentation for its
// bounds and concurrency.
type Recorder struct {
	cfg Config

	mu      sync.Mutex
	scorers []ScorerInfo
	samples ring[Entry]
	seq     uint64 // Seq of the newest sample
	slot    int64  // slot of the newest sample
	changes ring[ChangeEntry]
	cseq    uint64
	dropped uint64
}

// New returns an empty Recorder, or an error if cfg is invalid.
func New(cfg Config) (*Recorder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := int(cfg.Window/cfg.Resolution) + 1
	return &Recorder{
		cfg:     cfg,
		samples: newRing[Entry](n),
		changes: newRing[ChangeEntry](cfg.Changes),
	}, nil
}

// Config returns the Recorder's configuration.
func (r *Recorder) Config() Config { return r.cfg }

// SetScorers records the profile's scorers (names, types, categories and
// base weights, in weight order) for the page's legend and colours. Call
// it at start and after each profile reload.
func (r *Recorder) SetScorers(entries []scheduler.ScorerEntry) {
	info := make([]ScorerInfo, len(entries))
	for i, e := range entries {
		info[i] = ScorerInfo{Name: e.Name, Type: e.Type, Base: e.Weight, Category: scheduler.CategoryNone.String()}
		if e.Scorer != nil {
			info[i].Category = e.Scorer.Category().String()
		}
	}
	r.mu.Lock()
	r.scorers = info
	r.mu.Unlock()
}

// Record appends a control-tick sample. A sample in the same Resolution
// slot as the newest one replaces it (keeping its Seq); a sample older than
// the newest one is dropped and counted; samples older than Window before
// the new one are evicted. Non-finite signal values are stored as 0 (JSON
// cannot carry them). Record does not copy s's maps.
func (r *Recorder) Record(s Sample) {
	if math.IsNaN(s.Signal) || math.IsInf(s.Signal, 0) {
		s.Signal = 0
	}
	slot := floorDiv(s.At.UnixNano(), int64(r.cfg.Resolution))
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.samples.last(); ok {
		switch {
		case s.At.Before(last.At):
			r.dropped++
			return
		case slot == r.slot:
			*last = Entry{Seq: r.seq, AtMs: s.At.UnixMilli(), Sample: s}
			return
		}
	}
	r.seq++
	r.slot = slot
	r.samples.push(Entry{Seq: r.seq, AtMs: s.At.UnixMilli(), Sample: s})
	cut := s.At.Add(-r.cfg.Window)
	for {
		first, ok := r.samples.first()
		if !ok || !first.At.Before(cut) {
			break
		}
		r.samples.pop()
	}
}

// RecordChange records a weight change from old (nil: none) to nw, naming
// values by names (index-aligned with the weights' values). A nil nw is
// ignored; so is a call whose nw has the same version as old.
//
// Mode changes are kept one entry each. A change within one mode that
// directly follows another change within the same mode (old's version is
// the newest entry's ToVersion) is merged into that entry: ToVersion, New,
// Reason, Signal and At become the new change's and Steps counts the
// versions. The configurator publishes a version every slew step (every
// 50 ms while D moves), so without merging one burst would fill the ring;
// with it a burst is typically four entries: calm → rebalance, the slew in
// rebalance, rebalance → calm, the slew back.
func (r *Recorder) RecordChange(old, nw *scheduler.Weights, names []string) {
	if nw == nil || (old != nil && old.Version == nw.Version) {
		return
	}
	c := Change{
		At: nw.At, ToVersion: nw.Version, ToMode: nw.Mode, Reason: nw.Reason,
		Signal: nw.Signal, New: weightMap(nw, names), Steps: 1,
	}
	if math.IsNaN(c.Signal) || math.IsInf(c.Signal, 0) {
		c.Signal = 0
	}
	if old != nil {
		c.FromVersion, c.FromMode, c.Old = old.Version, old.Mode, weightMap(old, names)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.At.IsZero() {
		if last, ok := r.samples.last(); ok {
			c.At = last.At
		}
	}
	if last, ok := r.changes.last(); ok && old != nil && old.Mode == nw.Mode &&
		last.FromMode == last.ToMode && last.ToMode == nw.Mode && last.ToVersion == old.Version && last.Old != nil {
		last.ToVersion, last.New, last.Reason, last.Signal = c.ToVersion, c.New, c.Reason, c.Signal
		last.At, last.AtMs = c.At, unixMs(c.At)
		last.Steps++
		return
	}
	r.cseq++
	if r.changes.cap() > 0 {
		r.changes.push(ChangeEntry{Seq: r.cseq, AtMs: unixMs(c.At), Change: c})
	}
}

// Query selects the samples History returns.
type Query struct {
	// From returns only samples with Seq ≥ From (0: all).
	From uint64
	// Last, when > 0, returns only samples within Last of the newest one.
	Last time.Duration
}

// History copies out the samples selected by q and all kept changes.
func (r *Recorder) History(q Query) History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := History{
		WindowMs:     r.cfg.Window.Milliseconds(),
		ResolutionMs: r.cfg.Resolution.Milliseconds(),
		Scorers:      append([]ScorerInfo{}, r.scorers...),
		Samples:      []Entry{},
		Changes:      make([]ChangeEntry, 0, r.changes.len()),
		Dropped:      r.dropped,
	}
	r.changes.each(func(c *ChangeEntry) { h.Changes = append(h.Changes, *c) })
	last, ok := r.samples.last()
	if !ok {
		return h
	}
	latest := *last
	h.Latest = &latest
	var cut time.Time
	if q.Last > 0 {
		cut = last.At.Add(-q.Last)
	}
	r.samples.each(func(e *Entry) {
		if e.Seq >= q.From && !e.At.Before(cut) {
			h.Samples = append(h.Samples, *e)
		}
	})
	return h
}

// Len returns the number of stored samples and changes.
func (r *Recorder) Len() (samples, changes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.samples.len(), r.changes.len()
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// floorDiv is a/b rounded towards −∞ (b > 0), so slots before 1970 are
// as wide as the others.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// ring is a fixed-capacity FIFO; push on a full ring drops the oldest.
type ring[T any] struct {
	buf        []T
	head, size int
}

func newRing[T any](n int) ring[T] { return ring[T]{buf: make([]T, n)} }

func (q *ring[T]) cap() int { return len(q.buf) }
func (q *ring[T]) len() int { return q.size }

func (q *ring[T]) push(v T) {
	if len(q.buf) == 0 {
		return
	}
	if q.size == len(q.buf) {
		q.pop()
	}
	q.buf[(q.head+q.size)%len(q.buf)] = v
	q.size++
}

func (q *ring[T]) pop() {
	var zero T
	q.buf[q.head] = zero
	q.head = (q.head + 1) % len(q.buf)
	q.size--
}

func (q *ring[T]) first() (*T, bool) {
	if q.size == 0 {
		return nil, false
	}
	return &q.buf[q.head], true
}

func (q *ring[T]) last() (*T, bool) {
	if q.size == 0 {
		return nil, false
	}
	return &q.buf[(q.head+q.size-1)%len(q.buf)], true
}

func (q *ring[T]) each(f func(*T)) {
	for i := 0; i < q.size; i++ {
		f(&q.buf[(q.head+i)%len(q.buf)])
	}
}
