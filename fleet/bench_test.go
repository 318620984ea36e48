package fleet

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
)

var serveN = flag.Int("fleet.serve", 0, "internal: serve the vLLM exposition on this many loopback ports for BenchmarkScrapeFleet and BenchmarkScrapeFloor")

// TestHelperServers is not a test: BenchmarkScrapeFleet and
// BenchmarkScrapeFloor run the test binary again with -fleet.serve=N so the model servers' CPU is not charged
// to the scraper. It prints one address per line, then READY, and serves
// until its stdin closes.
func TestHelperServers(t *testing.T) {
	if *serveN == 0 {
		t.Skip("helper process for BenchmarkScrapeFleet and BenchmarkScrapeFloor")
	}
	// Sixteen variants with different load figures, served in turn, so
	// no scrape sees the previous scrape's bytes.
	base := string(readTestdata(t, "vllm.txt"))
	var bodies [16][]byte
	for i := range bodies {
		b := strings.Replace(base, "} 3.0\n", fmt.Sprintf("} %d.0\n", i), 1)
		b = strings.Replace(b, "} 0.4213\n", fmt.Sprintf("} 0.%02d\n", 10+i), 1)
		bodies[i] = []byte(b)
	}
	var next atomic.Uint64
	// Requests are counted by who sent them (User-Agent), so one set of
	// servers can be scraped by several scrapers at once
	// (BenchmarkScrapeVsPrometheus).
	var served [len(scraperKinds)]atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served[scraperKind(r.UserAgent())].Add(1)
		b := bodies[next.Add(1)%16]
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	})
	for i := 0; i < *serveN; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		fmt.Println(ln.Addr())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i, k := range scraperKinds {
			fmt.Fprintf(w, "%s %d\n", k, served[i].Load())
		}
	}))
	fmt.Println("COUNTS", ln.Addr())
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startHelperServers runs the test binary again as TestHelperServers with
// n loopback servers and returns their targets; the child stops when the
// benchmark ends.
func startHelperServers(b *testing.B, n int) []Target {
	targets, _ := startCountingServers(b, n)
	return targets
}

// startCountingServers is startHelperServers that also returns the
// address of the helper's count page: "kind count" lines, one per
// scraperKinds entry, of the requests served so far.
func startCountingServers(b *testing.B, n int) ([]Target, string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServers$", fmt.Sprintf("-fleet.serve=%d", n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	var targets []Target
	var counts string
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "READY" {
		a := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(a, "127.0.0.1:") {
			targets = append(targets, Target{Address: a, Ready: true})
		}
		if c, ok := strings.CutPrefix(a, "COUNTS "); ok {
			counts = c
		}
	}
	go io.Copy(io.Discard, out)
	if len(targets) != n {
		b.Fatalf("helper served %d endpoints, want %d", len(targets), n)
	}
	return targets, counts
}

// fetchLoop is the floor's work for one server: after offset, every
// interval until stop closes, GET its /metrics with client and read the
// body, nothing else; done is told each fetch's result.
func fetchLoop(stop <-chan struct{}, client *http.Client, addr string, interval, offset time.Duration, done func(error)) {
	select {
	case <-stop:
		return
	case <-time.After(offset):
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var buf bytes.Buffer
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		done(err)
		return
	}
	req.Header.Set("User-Agent", floorUserAgent)
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		resp, err := client.Do(req)
		if err == nil {
			buf.Reset()
			_, err = buf.ReadFrom(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("GET %s: %s", req.URL, resp.Status)
			}
		}
		done(err)
	}
}

// BenchmarkScrapeFloor is BenchmarkScrapeFleet without trimtab's scraper:
// n goroutines, each fetching one server's exposition every 50 ms (spread
// exactly evenly over the interval, the ideal of the scraper's hashed start
// offsets) with the
// scraper's transport and reading the body, nothing else: no parsing, no
// state, no snapshot. Its cores and cpu-µs/scrape are what net/http, the
// Go runtime and the loopback round trips cost on this machine, the floor
// under BenchmarkScrapeFleet. aligned=true starts every fetch of an
// interval at once instead, which lets the runtime stay awake across a
// burst of round trips.
func BenchmarkScrapeFloor(b *testing.B) {
	const n, interval = 256, 50 * time.Millisecond
	for _, aligned := range []bool{false, true} {
		b.Run(fmt.Sprintf("endpoints=%d/interval=50ms/aligned=%v", n, aligned), func(b *testing.B) {
			targets := startHelperServers(b, n)
			client := &http.Client{Transport: NewTransport(DefaultConfig().Scrape), Timeout: time.Second}
			defer client.CloseIdleConnections()
			var fetched, failed atomic.Int64
			var firstErr atomic.Pointer[error]
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for i, t := range targets {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var offset time.Duration
					if !aligned {
						offset = time.Duration(i) * interval / n
					}
					fetchLoop(stop, client, t.Address, interval, offset, func(err error) {
						if err != nil {
							failed.Add(1)
							firstErr.CompareAndSwap(nil, &err)
							return
						}
						fetched.Add(1)
					})
				}()
			}
			defer func() { close(stop); wg.Wait() }()
			time.Sleep(time.Second) // connections open, tickers in phase
			f0, c0, w0 := fetched.Load(), cpuTime(), time.Now()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				time.Sleep(interval)
			}
			b.StopTimer()
			wall, cpu, ok := time.Since(w0), cpuTime()-c0, fetched.Load()-f0
			if n := failed.Load(); n > 0 {
				b.Errorf("%d fetches failed, the first: %v", n, *firstErr.Load())
			}
			b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
			b.ReportMetric(float64(ok)/wall.Seconds(), "scrapes/s")
			if ok > 0 {
				b.ReportMetric(float64(cpu.Microseconds())/float64(ok), "cpu-µs/scrape")
			}
		})
	}
}

// BenchmarkScrapeFleet scrapes N loopback servers (in a child process)
// every 50 ms with the real clock and reports the scraper's CPU use in
// cores (process CPU time / wall time) and CPU per scrape. One op is one
// scrape interval.
func BenchmarkScrapeFleet(b *testing.B) {
	for _, n := range []int{64, 256} {
		b.Run(fmt.Sprintf("endpoints=%d/interval=50ms", n), func(b *testing.B) {
			targets := startHelperServers(b, n)

			reg := prometheus.NewRegistry()
			disc := newListDiscoverer()
			cfg := DefaultConfig().Scrape
			f, err := New(Config{Scrape: cfg}, Deps{Discoverer: disc, Registerer: reg})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- f.Run(ctx) }()
			defer func() { cancel(); <-done }()
			disc.push(targets...)
			deadline := time.Now().Add(20 * time.Second)
			for f.Load().Count(scheduler.StateFresh) < n*9/10 {
				if time.Now().After(deadline) {
					b.Fatalf("only %d of %d endpoints fresh", f.Load().Count(scheduler.StateFresh), n)
				}
				time.Sleep(10 * time.Millisecond)
			}
			scrapes := func() uint64 {
				fams, _ := reg.Gather()
				for _, mf := range fams {
					if mf.GetName() == "trimtab_fleet_scrape_duration_seconds" {
						return mf.GetMetric()[0].GetHistogram().GetSampleCount()
					}
				}
				return 0
			}
			b.ReportAllocs()
			s0, c0, w0 := scrapes(), cpuTime(), time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				time.Sleep(cfg.Interval)
			}
			b.StopTimer()
			wall, cpu, ok := time.Since(w0), cpuTime()-c0, scrapes()-s0
			b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
			b.ReportMetric(float64(ok)/wall.Seconds(), "scrapes/s")
			if ok > 0 {
				b.ReportMetric(float64(cpu.Microseconds())/float64(ok), "cpu-µs/scrape")
			}
			b.ReportMetric(float64(f.Load().Count(scheduler.StateFresh))/float64(n), "fresh-ratio")
		})
	}
}
