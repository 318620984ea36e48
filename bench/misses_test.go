package bench

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim/scenario"
)

// collapsing is an upstream that fails a known share of its requests,
// each kind once in ten by arrival order: a 503 at once, the connection
// closed without an answer, a stream cut after its first token, and no
// answer until the client gives up. The other six complete at once.
type collapsing struct {
	mu    sync.Mutex
	n     int
	kinds map[string]int // by the error kind bench should record ("": success)
}

func (c *collapsing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	k := c.n % 10
	c.n++
	kind := [10]string{"http_503", ErrConnect, ErrCutStream, ErrTimeout}[k]
	c.kinds[kind]++
	c.mu.Unlock()
	switch kind {
	case "http_503":
		http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
		return
	case ErrConnect:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case ErrTimeout:
		<-r.Context().Done() // the client's timeout
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a \"}]}\n\n")
	w.(http.Flusher).Flush()
	if kind == ErrCutStream {
		return
	}
	fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"b \"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
}

// TestMissesCountAtTheTimeout: against an upstream whose every
// completion is fast but four requests in ten fail (503, connection
// closed, stream cut, no answer), the percentiles count the failures at
// the client timeout, so the collapse cannot read fast; misses and
// goodput are reported as in sim.
func TestMissesCountAtTheTimeout(t *testing.T) {
	up := &collapsing{kinds: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: up}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	const timeout = 2 * time.Second
	sc := testScenario(t, 1, 2*time.Second)
	sc.Warmup, sc.Timeout = 0, timeout
	sc.SLO = scenario.SLO{TTFT: 1500 * time.Millisecond, TPOT: time.Second} // every completion meets it
	cfg := Config{Scenario: sc, TimeScale: 1, Repeat: 1, Seed: 1, RouterURL: "http://" + ln.Addr().String(), Policies: []Policy{{Name: "collapsing"}}}
	rep, err := Run(context.Background(), cfg, Deps{Salt: counter()})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Summaries()[0]
	up.mu.Lock()
	kinds, n := up.kinds, up.n
	up.mu.Unlock()

	// No warm-up: every request the upstream saw is measured. Misses:
	// every failed kind; TimedOut the ones left without an answer.
	misses := kinds["http_503"] + kinds[ErrConnect] + kinds[ErrCutStream] + kinds[ErrTimeout]
	if s.Measured != n || s.Misses != misses || s.TimedOut != kinds[ErrTimeout] || s.Failed != misses-kinds[ErrTimeout] {
		t.Errorf("upstream saw %d requests %v; summary measured %d, misses %d, failed %d, timed out %d, errors %v",
			n, kinds, s.Measured, s.Misses, s.Failed, s.TimedOut, s.Errors)
	}
	for kind, k := range kinds {
		if kind != "" && s.Errors[kind] != k {
			t.Errorf("errors[%s] = %d, upstream sent %d", kind, s.Errors[kind], k)
		}
	}
	if n < 20 {
		t.Fatalf("only %d requests in 2 s", n)
	}
	// Hand-computed nearest-rank percentiles: the completions (and the
	// cut streams' first tokens) arrive in well under the timeout, so
	// with top values at the timeout, rank k = ⌈p/100·n⌉ − 1 reads the
	// timeout exactly when k ≥ n − top, else a fast value. TTFT: the
	// 503s, closed connections and time-outs (3 in 10) have no first
	// token, top = those; E2E: every miss (4 in 10). With n ≥ 20 that
	// makes p90 and p99 the timeout, p50 fast.
	tms := float64(timeout / time.Millisecond)
	check := func(name string, got *float64, p float64, top int) {
		t.Helper()
		if got == nil {
			t.Fatalf("%s: null", name)
		}
		k := int(math.Ceil(p/100*float64(n))) - 1
		atTimeout := k >= n-top
		if atTimeout && *got != tms || !atTimeout && !(*got < tms) {
			t.Errorf("%s = %.1f ms; rank %d of %d with %d at the timeout: want the timeout %v: %v", name, *got, k, n, top, tms, atTimeout)
		}
	}
	noToken := kinds["http_503"] + kinds[ErrConnect] + kinds[ErrTimeout]
	check("ttft p50", s.TTFTP50, 50, noToken)
	check("ttft p90", s.TTFTP90, 90, noToken)
	check("ttft p99", s.TTFTP99, 99, noToken)
	check("e2e p50", s.E2EP50, 50, misses)
	check("e2e p99", s.E2EP99, 99, misses)
	if *s.TTFTP99 != tms || *s.E2EP99 != tms {
		t.Errorf("a collapsing upstream reads fast: TTFT p99 %.1f ms, E2E p99 %.1f ms, want the timeout", *s.TTFTP99, *s.E2EP99)
	}
	// Goodput: every completion meets the SLO, over the 2 s window.
	if want := float64(kinds[""]) / 2; s.Goodput == nil || math.Abs(*s.Goodput-want) > 1e-9 {
		t.Errorf("goodput %v, want %d completions / 2 s = %g", s.Goodput, kinds[""], want)
	}
	if s.SLO == nil || s.SLO.TTFTMS != 1500 || s.SLO.TPOTMS != 1000 {
		t.Errorf("slo %+v, want the scenario's 1500 / 1000 ms", s.SLO)
	}
	phaseMisses := 0
	for _, p := range s.Phases {
		phaseMisses += p.Misses
	}
	if phaseMisses != misses {
		t.Errorf("phases' misses sum to %d, want %d", phaseMisses, misses)
	}
	// The report puts the misses beside the percentiles, with goodput.
	var md strings.Builder
	if err := rep.WriteMarkdown(&md, "-", "cmd", "setup"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("| %d of %d (connect %d, ", misses, n, kinds[ErrConnect]), "| missed (at timeout) | goodput req/s |",
		fmt.Sprintf("| %.2f |", float64(kinds[""])/2), "a failed one (missed: "} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
}
