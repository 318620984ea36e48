package bench

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/sim/scenario"
)

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		in          []float64
		med, lo, hi float64
	}{
		{[]float64{3, 1, 2}, 2, 1, 3},       // sorted 1 2 3: middle 2
		{[]float64{4, 1, 2, 10}, 3, 1, 10},  // sorted 1 2 4 10: (2+4)/2 = 3
		{[]float64{math.NaN(), 5}, 5, 5, 5}, // NaN left out
	} {
		s := spreadOf(c.in)
		if s.med != c.med || s.lo != c.lo || s.hi != c.hi {
			t.Errorf("spreadOf(%v) = %+v, want %v (%v–%v)", c.in, s, c.med, c.lo, c.hi)
		}
	}
	if s := spreadOf(nil); !math.IsNaN(s.med) || s.ms() != "–" {
		t.Errorf("spreadOf(nil) = %+v", s)
	}
}

func TestRunSummaryCounts(t *testing.T) {
	ms := time.Millisecond
	r := &RunResult{Policy: "p", Level: 4, Warm: 100 * ms, End: 2100 * ms,
		Timeout: time.Second, SLO: scenario.SLO{TTFT: 20 * ms, TPOT: 5 * ms},
		Phases: []PhaseSpan{{"calm", 0, time.Second}, {"burst", time.Second, 2100 * ms}},
		ModeChanges: []ModeChange{
			{T: 50 * ms, From: "calm", To: "rebalance"},   // before the window: warm-up entry of calm
			{T: 500 * ms, From: "rebalance", To: "calm"},  // not an entry
			{T: 1500 * ms, From: "calm", To: "rebalance"}, // burst entry
			{T: 1800 * ms, From: "rebalance", To: "frozen"},
		},
		Pods: []PodSample{ // loads 3 and 1: busiest share 3/4, ratio 3/2
			{T: 200 * ms, Load: []float64{3, 1}, Hits: 10, Queries: 100},
			{T: 2000 * ms, Load: []float64{3, 1}, Hits: 70, Queries: 200}, // Δ 60/100 = 0.6
		},
		Requests: []Request{
			{Phase: 0, Measured: true, TTFT: 10 * ms, E2E: 40 * ms, Tokens: 10, PromptTokens: 100, CachedTokens: 50, CachedKnown: true},
			{Phase: 1, Measured: true, TTFT: 30 * ms, E2E: 60 * ms, Tokens: 30, PromptTokens: 100, CachedTokens: 100, CachedKnown: true},
			{Phase: 1, Measured: true, Err: ErrTimeout},
			{Phase: 1, Measured: true, Err: "http_503"},
			{Phase: 0, Measured: false, TTFT: time.Second}, // warm-up: not counted
		},
	}
	s := r.Summary("sc")
	// measured 4; failed = 2 errors − 1 timeout = 1; tokens 40 over 2 s = 20/s;
	// cached (50+100)/(100+100) = 0.75.
	if s.Measured != 4 || s.Failed != 1 || s.TimedOut != 1 || s.OutputTokensPerSec != 20 || *s.CachedTokenRatio != 0.75 {
		t.Errorf("summary %+v", s)
	}
	// The two errors are misses at the 1 s timeout: TTFT 10 30 1000 1000,
	// p50 rank ⌈0.5·4⌉ = 2 → 30, p99 → 1000; E2E 40 60 1000 1000.
	if s.Errors[ErrTimeout] != 1 || s.Errors["http_503"] != 1 || s.Misses != 2 || *s.TTFTP50 != 30 || *s.TTFTP99 != 1000 ||
		*s.E2EP50 != 60 || *s.E2EP99 != 1000 {
		t.Errorf("errors %v, misses %d, ttft p50 %v p99 %v, e2e p50 %v p99 %v", s.Errors, s.Misses, *s.TTFTP50, *s.TTFTP99, *s.E2EP50, *s.E2EP99)
	}
	// SLO TTFT ≤ 20 ms, TPOT ≤ 5 ms: the first request (TTFT 10, 40 − 10 =
	// 30 ≤ 5·(10 − 1) = 45) is good, the second (TTFT 30) is not: goodput
	// 1 / 2 s window = 0.5. Phase calm: 1 good in its 0.9 s of the window;
	// burst: none, 2 misses.
	if s.Goodput == nil || *s.Goodput != 0.5 || s.SLO == nil || s.SLO.TTFTMS != 20 || s.SLO.TPOTMS != 5 {
		t.Errorf("goodput %v, slo %+v", s.Goodput, s.SLO)
	}
	if p := s.Phases; p[0].Misses != 0 || p[1].Misses != 2 || math.Abs(*p[0].Goodput-1/0.9) > 1e-9 || *p[1].Goodput != 0 {
		t.Errorf("phase misses %d %d, goodput %v %v", p[0].Misses, p[1].Misses, *p[0].Goodput, *p[1].Goodput)
	}
	if s.BusiestPodShare != 0.75 || s.BusiestPodRatio != 1.5 || math.Abs(s.PrefixHitRatio-0.6) > 1e-9 || s.WatchdogFreezes != 1 {
		t.Errorf("share %v ratio %v hit %v freezes %v", s.BusiestPodShare, s.BusiestPodRatio, s.PrefixHitRatio, s.WatchdogFreezes)
	}
	if p := s.Phases; p[0].RebalanceEntries != 0 || p[0].WarmupRebalanceEntries != 1 || p[1].RebalanceEntries != 1 || p[1].Measured != 3 {
		t.Errorf("phases %+v", p)
	}
}

// FuzzReadStream: any body is read without panicking, and the result
// has no negative count.
func FuzzReadStream(f *testing.F) {
	f.Add("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":-3,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":-1}}}\n")
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\ndata: nope\n: comment\n")
	f.Add("data: {\"choices\":[],\"fakeserver\":{\"ttft_ms\":-5}}\ndata: {\"choices\":[],\"fakeserver\":{\"ttft_ms\":1e300}}\n")
	f.Fuzz(func(t *testing.T, body string) {
		var r Request
		readStream(strings.NewReader(body), clock.RealClock{}, time.Now(), &r)
		if r.Tokens < 0 || r.PromptTokens < 0 || r.CachedTokens < 0 || r.ServerTTFT < 0 || r.ServerTTFT > time.Hour {
			t.Fatalf("bad result %+v", r)
		}
	})
}

// TestReadStreamServerTTFT: a fakeserver's usage chunk gives the
// request its server TTFT; a value out of (0, 1 h] is ignored.
func TestReadStreamServerTTFT(t *testing.T) {
	for _, tt := range []struct {
		ms   string
		want time.Duration
	}{{"12.5", 12500 * time.Microsecond}, {"0", 0}, {"-3", 0}, {"4e6", 0}} {
		var r Request
		body := "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1},\"fakeserver\":{\"ttft_ms\":" + tt.ms + "}}\n\ndata: [DONE]\n\n"
		if !readStream(strings.NewReader(body), clock.RealClock{}, time.Now(), &r) {
			t.Fatalf("ttft_ms %s: stream not done", tt.ms)
		}
		if r.ServerTTFT != tt.want {
			t.Errorf("ttft_ms %s: server TTFT %v, want %v", tt.ms, r.ServerTTFT, tt.want)
		}
	}
}

// TestClassServerTTFT: with servers that report their TTFT a class has
// the p99 of it — a failure as in the TTFT p99 (its TTFT, or the timeout
// without one), a refusal by the router not at all — and of the client's
// TTFT minus it over completed requests; without reports, neither.
func TestClassServerTTFT(t *testing.T) {
	ms := time.Millisecond
	r := &RunResult{Warm: 0, End: time.Second, Timeout: time.Second, Classes: []string{"chat", "batch"}}
	for _, i := range rand.New(rand.NewPCG(1, 2)).Perm(98) {
		server, front := time.Duration(i+1)*ms, time.Duration(i+1)*ms/10 // 1…98 ms, 0.1…9.8 ms
		r.Requests = append(r.Requests, Request{Class: 0, Measured: true, TTFT: server + front, ServerTTFT: server, E2E: 2 * (server + front), Tokens: 2, Timeout: time.Second})
	}
	r.Requests = append(r.Requests,
		Request{Class: 0, Measured: true, Err: ErrTimeout, Timeout: 500 * ms},                      // no token: 500
		Request{Class: 0, Measured: true, Err: ErrCutStream, TTFT: 300 * ms, Timeout: time.Second}, // 300
		Request{Class: 0, Measured: true, Err: "http_429", DropReason: "shed", Timeout: time.Second},
		Request{Class: 0, Measured: true, TTFT: 5 * ms, ServerTTFT: 6 * ms, E2E: 9 * ms, Tokens: 2, Timeout: time.Second}, // after the client: ignored
		Request{Class: 1, Measured: true, TTFT: 5 * ms, E2E: 9 * ms, Tokens: 2, Timeout: time.Second})
	cs := r.classes(time.Second)
	// chat: server 1…98, 300, 500 → p99 rank 99 of 100 → 300 ms; in front
	// 0.1…9.8 ms → rank 98 of 98 → 9.8 ms.
	if c := cs[0]; c.ServerTTFTP99 == nil || *c.ServerTTFTP99 != 300 || c.RouterTTFTP99 == nil || math.Abs(*c.RouterTTFTP99-9.8) > 1e-9 {
		t.Errorf("chat server / router TTFT p99 %v / %v, want 300 / 9.8", deref(c.ServerTTFTP99), deref(c.RouterTTFTP99))
	}
	if c := cs[1]; c.ServerTTFTP99 != nil || c.RouterTTFTP99 != nil {
		t.Errorf("batch, no server report: server / router TTFT p99 %v / %v, want none", c.ServerTTFTP99, c.RouterTTFTP99)
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// TestClassDropReasons: a class's requests refused by the router's flow
// control count as dropped, by their X-Trimtab-Drop-Reason, over the
// whole run (measured or not); time-outs and other failures are not drops.
func TestClassDropReasons(t *testing.T) {
	ms := time.Millisecond
	r := &RunResult{Warm: 100 * ms, End: 1100 * ms, Timeout: time.Second, Classes: []string{"chat", "batch"}}
	add := func(class int, measured bool, err, reason string) {
		r.Requests = append(r.Requests, Request{Class: class, Measured: measured, Err: err, DropReason: reason,
			TTFT: 10 * ms, E2E: 20 * ms, Tokens: 2, Timeout: time.Second})
	}
	add(0, true, "", "")
	add(1, true, "", "")
	add(1, true, "http_429", "ttl-expired")
	add(1, false, "http_429", "ttl-expired") // after the window: still counted
	add(1, true, "http_429", "shed")
	add(1, true, "http_429", "queue-full")
	add(1, true, "http_503", "shutting-down")
	add(1, true, ErrTimeout, "")
	add(1, true, "http_500", "")
	cs := r.classes(time.Second)
	chat, batch := cs[0], cs[1]
	if chat.Dropped != 0 || chat.DropReasons != nil {
		t.Errorf("chat dropped %d %v, want none", chat.Dropped, chat.DropReasons)
	}
	// batch: 9 − 1 chat = 8 issued; 1 completed, 5 dropped (ttl-expired 2,
	// shed 1, queue-full 1, shutting-down 1), 1 timed out, 1 failed.
	want := map[string]int{"ttl-expired": 2, "shed": 1, "queue-full": 1, "shutting-down": 1}
	if batch.Issued != 8 || batch.Completed != 1 || batch.Dropped != 5 || batch.TimedOut != 1 || batch.Failed != 1 {
		t.Errorf("batch %+v, want 8 issued: 1 completed, 5 dropped, 1 timed out, 1 failed", batch)
	}
	if len(batch.DropReasons) != len(want) {
		t.Errorf("batch drop reasons %v, want %v", batch.DropReasons, want)
	}
	for k, n := range want {
		if batch.DropReasons[k] != n {
			t.Errorf("batch drop reasons %v, want %v", batch.DropReasons, want)
			break
		}
	}
}

// TestCountReasonBounded: reasons come from a router's header, so at most
// maxDropReasons distinct ones are kept, each cut to maxDropReasonLen bytes.
func TestCountReasonBounded(t *testing.T) {
	var m map[string]int
	for i := range 20 {
		m = countReason(m, strings.Repeat("r", 40)+string(rune('a'+i)))
	}
	// All 20 reasons share their first 32 bytes ("r" × 32): one key, 20.
	if len(m) != 1 || m[strings.Repeat("r", 32)] != 20 {
		t.Fatalf("cut reasons: %v, want one 32-byte reason counted 20 times", m)
	}
	m = nil
	for i := range 20 {
		m = countReason(m, string(rune('a'+i)))
	}
	// a…g keep their own key (7), h…t (13) count as other: 8 keys.
	if len(m) != maxDropReasons || m["a"] != 1 || m["g"] != 1 || m["other"] != 13 {
		t.Fatalf("distinct reasons: %v, want a…g once each and other 13", m)
	}
}
