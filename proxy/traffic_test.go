package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trimtab/trimtab/proxy/settings"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim/scenario"
)

// words returns n bytes of lower-case text drawn from seed, distinct for
// distinct seeds (a prompt the test can recognise in a download).
func words(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s-%d ", seed, i)
	}
	return b.String()[:n]
}

// TestTraceDownloadThroughProxy: requests through the real HTTP proxy,
// then /debug/trace from the real admin server (behind its token). The
// download parses with the simulator's own trace reader and keeps what
// the traffic shared and nothing of its text.
func TestTraceDownloadThroughProxy(t *testing.T) {
	const token = "0123456789abcdef-admin"
	u := newUpstream(t)
	f := newFixture(t, nil, u.addr)
	cfg := DefaultConfig()
	cfg.Admin.Token = token
	cfg.Admin.Record.Enabled = true
	// The proxy sets body read deadlines from this clock: start it now.
	t0 := time.Now()
	clk := clocktesting.NewFakePassiveClock(t0)
	traffic := NewTrafficRecorder(cfg.Admin.Record, f.reg)
	deps := f.deps(t)
	deps.Clock, deps.Traffic = clk, traffic
	h, err := NewHTTP(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, _ := start(t, h)
	adeps := f.deps(t)
	adeps.Traffic = traffic
	a, err := NewAdmin(cfg, adeps)
	if err != nil {
		t.Fatal(err)
	}
	adminAddr, _ := start(t, a)

	// A and B share a 4096-token (16384-byte, 8-block) prefix; C shares
	// nothing. Lengths in tokens are bytes ÷ 4.
	shared := words("system", 16384)
	prompts := []struct {
		text string
		at   time.Duration // arrival after A
	}{
		{shared + words("alpha", 1000), 0},                      // 17384 B: 4346 tokens, 9 ids (8 full + 1 partial)
		{shared + words("beta", 3000), 1500 * time.Millisecond}, // 19384 B: 4846 tokens, 10 ids
		{words("gamma", 5000), 2 * time.Second},                 // 5000 B: 1250 tokens, 3 ids
	}
	for _, p := range prompts {
		clk.SetTime(t0.Add(p.at))
		body, _ := json.Marshal(map[string]any{"model": "m", "prompt": p.text})
		resp := post(t, "http://"+proxyAddr+"/v1/completions", string(body), nil)
		readAll(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("proxy answered %d", resp.StatusCode)
		}
		f.outcome(t)
	}

	get := func(auth string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, "http://"+adminAddr+"/debug/trace", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := get(""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/debug/trace without the token: %d, want 401", resp.StatusCode)
		resp.Body.Close()
	}
	resp := get("Bearer " + token)
	body := readAll(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/debug/trace: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get(HeaderTraceEndpoints); got != "1" {
		t.Errorf("%s: %q, want 1", HeaderTraceEndpoints, got)
	}
	for _, s := range []string{"system-", "alpha-", "beta-", "gamma-"} {
		if strings.Contains(body, s) {
			t.Errorf("the trace holds prompt text %q", s)
		}
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	entries, err := scenario.ParseTrace(sc, 0)
	if err != nil {
		t.Fatalf("scenario.ParseTrace: %v\n%s", err, body)
	}
	if len(entries) != 3 {
		t.Fatalf("%d entries, want 3:\n%s", len(entries), body)
	}
	want := []struct {
		ts     int64
		input  int
		hashes []uint64
	}{
		{0, 4346, []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8}},
		{1500, 4846, []uint64{0, 1, 2, 3, 4, 5, 6, 7, 9, 10}}, // first 8 shared, then new ids from 9
		{2000, 1250, []uint64{11, 12, 13}},
	}
	for i, w := range want {
		e := entries[i]
		if e.Timestamp != w.ts || e.InputLength != w.input || e.OutputLength != 0 || fmt.Sprint(e.HashIDs) != fmt.Sprint(w.hashes) {
			t.Errorf("entry %d: %+v, want timestamp %d, input_length %d, output_length 0, hash_ids %v", i, e, w.ts, w.input, w.hashes)
		}
	}
	if got := testutil.ToFloat64(traffic.noted); got != 3 {
		t.Errorf("trimtab_trace_recorded_requests_total %v, want 3", got)
	}

	// Restart: the window is emptied; the next request opens a new one at 0.
	req, _ := http.NewRequest(http.MethodPost, "http://"+adminAddr+"/debug/trace/restart", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rr.Body.Close()
	if rr.StatusCode != http.StatusNoContent {
		t.Fatalf("restart: %d, want 204", rr.StatusCode)
	}
	clk.SetTime(t0.Add(time.Hour))
	post(t, "http://"+proxyAddr+"/v1/completions", `{"model":"m","prompt":"`+words("delta", 100)+`"}`, nil).Body.Close()
	f.outcome(t)
	resp = get("Bearer " + token)
	body = readAll(t, resp.Body)
	resp.Body.Close()
	if want := `{"timestamp": 0, "input_length": 25, "output_length": 0, "hash_ids": [0]}` + "\n"; body != want {
		t.Errorf("after restart: %q, want %q", body, want)
	}
}

// TestTraceRecordingOff: with server.admin.record.enabled false nothing is
// recorded and /debug/trace says how to turn it on.
func TestTraceRecordingOff(t *testing.T) {
	f := newFixture(t, nil, epA)
	cfg := DefaultConfig()
	deps := f.deps(t)
	deps.Traffic = NewTrafficRecorder(cfg.Admin.Record, nil)
	deps.Traffic.Record(&scheduler.Request{Prompt: []byte("x"), Arrival: time.Unix(1, 0)})
	a, err := NewAdmin(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := start(t, a)
	resp, err := http.Get("http://" + addr + "/debug/trace")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(body, "server.admin.record.enabled") {
		t.Errorf("/debug/trace with recording off: %d %s", resp.StatusCode, body)
	}
}

// TestTrafficRecorderBounds: a window keeps at most max_requests
// requests, max_blocks ids and window of arrivals; the rest are dropped
// and counted by reason.
func TestTrafficRecorderBounds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name     string
		cfg      settings.RecordConfig
		arrivals []time.Duration // after t0, each a 2048-byte prompt (512 tokens, 1 id)
		kept     int
		dropped  map[string]float64
	}{
		{"all fit", settings.RecordConfig{Window: time.Minute, MaxRequests: 4, MaxBlocks: 4},
			[]time.Duration{0, time.Second, 2 * time.Second}, 3, nil},
		// Window from the first arrival (t0+1s): t0+61s is 60s after it, out.
		{"window", settings.RecordConfig{Window: time.Minute, MaxRequests: 10, MaxBlocks: 10},
			[]time.Duration{time.Second, 30 * time.Second, 60*time.Second + time.Second - 1, 61 * time.Second}, 3, map[string]float64{dropWindow: 1}},
		{"max_requests", settings.RecordConfig{Window: time.Minute, MaxRequests: 2, MaxBlocks: 10},
			[]time.Duration{0, 1, 2, 3}, 2, map[string]float64{dropRequests: 2}},
		{"max_blocks", settings.RecordConfig{Window: time.Minute, MaxRequests: 10, MaxBlocks: 3},
			[]time.Duration{0, 1, 2, 3, 4}, 3, map[string]float64{dropBlocks: 2}},
	}
	prompt := []byte(words("p", 2048))
	for _, tt := range tests {
		tt.cfg.Enabled = true
		reg := prometheus.NewRegistry()
		r := NewTrafficRecorder(tt.cfg, reg)
		for _, at := range tt.arrivals {
			r.Record(&scheduler.Request{Prompt: prompt, Arrival: t0.Add(at)})
		}
		var buf bytes.Buffer
		sum, err := r.WriteTrace(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if sum.Requests != tt.kept || strings.Count(buf.String(), "\n") != tt.kept {
			t.Errorf("%s: wrote %d requests (%d lines), want %d", tt.name, sum.Requests, strings.Count(buf.String(), "\n"), tt.kept)
		}
		for i, reason := range []string{dropWindow, dropRequests, dropBlocks} {
			if got := testutil.ToFloat64(r.dropped[i]); got != tt.dropped[reason] {
				t.Errorf("%s: dropped{reason=%q} %v, want %v", tt.name, reason, got, tt.dropped[reason])
			}
		}
	}
}

// TestTraceHashesSeparateTenants: the same prompt under another model or
// cache salt gets other ids, as it would not share a KV cache either; a
// prompt longer than 256 blocks keeps its length and its first 256 ids.
func TestTraceHashesSeparateTenants(t *testing.T) {
	r := NewTrafficRecorder(settings.RecordConfig{Enabled: true, Window: time.Minute, MaxRequests: 8, MaxBlocks: 1024}, nil)
	p := []byte(words("q", 4096)) // 1024 tokens, 2 ids
	long := []byte(words("l", 300*2048))
	t0 := time.Unix(1, 0)
	for _, req := range []scheduler.Request{
		{Model: "m", Prompt: p, Arrival: t0},
		{Model: "m", Prompt: p, Arrival: t0},
		{Model: "m2", Prompt: p, Arrival: t0},
		{Model: "m", CacheSalt: "tenant", Prompt: p, Arrival: t0},
		{Model: "m", Prompt: long, Arrival: t0},
	} {
		r.Record(&req)
	}
	var buf bytes.Buffer
	if _, err := r.WriteTrace(&buf); err != nil {
		t.Fatal(err)
	}
	entries, err := scenario.ParseTrace(bufio.NewScanner(&buf), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"[0 1]", "[0 1]", "[2 3]", "[4 5]"} {
		if got := fmt.Sprint(entries[i].HashIDs); got != want {
			t.Errorf("entry %d: hash_ids %s, want %s", i, got, want)
		}
	}
	if e := entries[4]; e.InputLength != 300*512 || len(e.HashIDs) != maxTraceIDs {
		t.Errorf("long prompt: input_length %d with %d ids, want %d with %d", e.InputLength, len(e.HashIDs), 300*512, maxTraceIDs)
	}
}

// TestTrafficRecordAllocates: Record and its slot's SetOutput, on the
// request path, allocate nothing, recording or dropping.
func TestTrafficRecordAllocates(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race; CI runs this test in its no-race pass")
	}
	r := NewTrafficRecorder(settings.RecordConfig{Enabled: true, Window: time.Minute, MaxRequests: 100, MaxBlocks: 1 << 12}, nil)
	req := &scheduler.Request{Model: "m", CacheSalt: "s", Prompt: []byte(words("a", 8192)), Arrival: time.Unix(5, 0)}
	if n := testing.AllocsPerRun(200, func() { r.Record(req).SetOutput(7) }); n != 0 {
		t.Errorf("Record and SetOutput allocate %v times per call, want 0", n)
	}
	var off *TrafficRecorder
	if n := testing.AllocsPerRun(200, func() { off.Record(req) }); n != 0 {
		t.Errorf("nil Record allocates %v times per call, want 0", n)
	}
}
