package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// recorded is one record the fake handler received.
type recorded struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// recorder is a slog.Handler that keeps what it is handed.
type recorder struct {
	mu    *sync.Mutex
	recs  *[]recorded
	attrs []slog.Attr
}

func newRecorder() *recorder { return &recorder{mu: new(sync.Mutex), recs: new([]recorded)} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *r
	c.attrs = append(append([]slog.Attr(nil), r.attrs...), as...)
	return &c
}
func (r *recorder) WithGroup(string) slog.Handler { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{}
	for _, a := range r.attrs {
		m[a.Key] = a.Value.String()
	}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	r.mu.Lock()
	*r.recs = append(*r.recs, recorded{rec.Level, rec.Message, m})
	r.mu.Unlock()
	return nil
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), *r.recs...)
}

var t0 = time.Unix(1_700_000_000, 0)

func newLimited(t *testing.T, mod func(*LimitConfig)) (*slog.Logger, *LimitHandler, *recorder, *clocktesting.FakePassiveClock) {
	t.Helper()
	cfg := DefaultLimitConfig()
	cfg.Interval, cfg.Burst = 10*time.Second, 2
	if mod != nil {
		mod(&cfg)
	}
	rec := newRecorder()
	clk := clocktesting.NewFakePassiveClock(t0)
	h, err := NewLimitHandler(rec, cfg, LimitDeps{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return slog.New(h), h, rec, clk
}

// TestLimitSuppressesRepeats: Burst 2 per 10 s; the first record after
// the interval carries the count of those suppressed.
func TestLimitSuppressesRepeats(t *testing.T) {
	log, _, rec, clk := newLimited(t, nil)
	for i := range 5 {
		log.Warn("peer message refused", "peer", fmt.Sprintf("p%d", i)) // peer is not a key attr
	}
	clk.SetTime(t0.Add(10*time.Second - time.Nanosecond))
	log.Warn("peer message refused", "peer", "p5")
	if got := len(rec.all()); got != 2 {
		t.Fatalf("%d records passed within the interval, want 2 (the burst)", got)
	}
	clk.SetTime(t0.Add(10 * time.Second))
	log.Warn("peer message refused", "peer", "p6")
	all := rec.all()
	if len(all) != 3 {
		t.Fatalf("%d records, want 3", len(all))
	}
	// 6 records in the first interval, 2 passed: 6 − 2 = 4 suppressed.
	if got := all[2].attrs[SuppressedKey]; got != "4" || all[2].attrs["peer"] != "p6" {
		t.Errorf("first record of the next interval: %v, want peer=p6 suppressed=4", all[2].attrs)
	}
	if _, ok := all[0].attrs[SuppressedKey]; ok {
		t.Errorf("a record with nothing suppressed before it carries %s", SuppressedKey)
	}
}

// TestLimitKeepsOneOffLines: kinds differ by level, message and key
// attributes (WithAttrs or the record's), and the first of each kind
// always passes, however many repeats of another kind came before.
func TestLimitKeepsOneOffLines(t *testing.T) {
	log, _, rec, _ := newLimited(t, nil)
	for range 100 {
		log.Warn("bad request", "client", "10.0.0.9:4711")
	}
	log.Info("trimtab serving", "admin", "127.0.0.1:9090")
	log.Error("bad request", "client", "10.0.0.9:4711")                         // another level
	log.With("component", "fleet").Warn("bad request")                          // another component
	log.Warn("bad request", "endpoint", "10.0.0.7:8000")                        // another endpoint
	log.Warn("endpoint ejected", "endpoint", "a")                               // another message
	log.Debug("weights", "version", 7)                                          // below MinLevel
	log.With("component", "proxy").Warn("bad request", "client", "10.0.0.10:1") // another component
	want := []string{"bad request", "bad request", "trimtab serving", "bad request", "bad request", "bad request", "endpoint ejected", "weights", "bad request"}
	all := rec.all()
	if len(all) != len(want) {
		t.Fatalf("%d records passed, want %d (2 of the flood + 7 one-offs): %v", len(all), len(want), all)
	}
	for i, w := range want {
		if all[i].msg != w {
			t.Errorf("record %d: %q, want %q", i, all[i].msg, w)
		}
	}
}

// TestLimitBelowMinLevelPasses: debug lines asked for are not limited.
func TestLimitBelowMinLevelPasses(t *testing.T) {
	log, _, rec, _ := newLimited(t, nil)
	for range 50 {
		log.Debug("weights", "mode", "calm")
	}
	if got := len(rec.all()); got != 50 {
		t.Errorf("%d of 50 debug records passed", got)
	}
}

// TestLimitFlushReportsCounts: counts not yet reported come out on Flush,
// once.
func TestLimitFlushReportsCounts(t *testing.T) {
	log, h, rec, _ := newLimited(t, nil)
	for range 7 {
		log.With("component", "replica").Warn("peer message refused")
	}
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := rec.all()
	// 7 records, 2 passed, 5 suppressed; the second Flush owes nothing.
	if len(all) != 3 || all[2].msg != "peer message refused" || all[2].attrs[SuppressedKey] != "5" ||
		all[2].attrs["component"] != "replica" || all[2].level != slog.LevelWarn {
		t.Errorf("after Flush: %v, want a third record: WARN peer message refused component=replica suppressed=5", all)
	}
}

// TestLimitTableIsFixed: more kinds than slots never grow the table and
// never drop a new kind; a kind pushed out reports what it owed.
func TestLimitTableIsFixed(t *testing.T) {
	log, h, rec, clk := newLimited(t, func(c *LimitConfig) { c.Slots, c.Burst = 8, 1 })
	for range 3 {
		log.Warn("flood") // 1 passed, 2 suppressed
	}
	for i := range 1000 {
		clk.SetTime(t0.Add(time.Duration(i+1) * time.Millisecond)) // "flood" idles longest
		log.Warn(fmt.Sprintf("kind %d", i))
	}
	if n := len(h.st.slots); n != 8 {
		t.Errorf("table has %d slots, want 8", n)
	}
	var kinds, owed int
	for _, r := range rec.all() {
		switch {
		case r.msg == "flood" && r.attrs[SuppressedKey] == "2":
			owed++
		case r.msg != "flood":
			kinds++
		}
	}
	if kinds != 1000 || owed != 1 {
		t.Errorf("%d of 1000 new kinds passed, flood's 2 suppressed reported %d times; want 1000 and 1", kinds, owed)
	}
}

// TestLimitConcurrent: records of one kind from many goroutines are each
// either passed or counted, exactly once.
func TestLimitConcurrent(t *testing.T) {
	log, h, rec, _ := newLimited(t, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				log.Warn("bad request")
			}
		})
	}
	wg.Wait()
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := rec.all()
	// 8 × 1000 = 8000 records: 2 passed, 7998 reported by Flush.
	if len(all) != 3 || all[2].attrs[SuppressedKey] != "7998" {
		t.Errorf("records %v; want 2 passed and one with suppressed=7998", all)
	}
}

func TestLimitConfigValidate(t *testing.T) {
	for _, c := range []LimitConfig{{Interval: 0, Burst: 1, Slots: 8}, {Interval: time.Second, Burst: 0, Slots: 8}, {Interval: time.Second, Burst: 1, Slots: 2}} {
		if _, err := NewLimitHandler(newRecorder(), c, LimitDeps{}); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
