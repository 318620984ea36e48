package fleet

import (
	"bufio"
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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trimtab/trimtab/scheduler"
)

var serveN = flag.Int("fleet.serve", 0, "internal: serve the vLLM exposition on this many loopback ports for BenchmarkScrapeFleet")

// TestHelperServers is not a test: BenchmarkScrapeFleet runs the test
// binary again with -fleet.serve=N so the model servers' CPU is not charged
// to the scraper. It prints one address per line, then READY, and serves
// until its stdin closes.
func TestHelperServers(t *testing.T) {
	if *serveN == 0 {
		t.Skip("helper process for BenchmarkScrapeFleet")
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
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

// BenchmarkScrapeFleet scrapes N loopback servers (in a child process)
// every 50 ms with the real clock and reports the scraper's CPU use in
// cores (process CPU time / wall time) and CPU per scrape. One op is one
// scrape interval.
func BenchmarkScrapeFleet(b *testing.B) {
	for _, n := range []int{64, 256} {
		b.Run(fmt.Sprintf("endpoints=%d/interval=50ms", n), func(b *testing.B) {
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
			defer func() { stdin.Close(); cmd.Wait() }()
			var targets []Target
			sc := bufio.NewScanner(out)
			for sc.Scan() && sc.Text() != "READY" {
				if a := strings.TrimSpace(sc.Text()); strings.HasPrefix(a, "127.0.0.1:") {
					targets = append(targets, Target{Address: a, Ready: true})
				}
			}
			go io.Copy(io.Discard, out)
			if len(targets) != n {
				b.Fatalf("helper served %d endpoints, want %d", len(targets), n)
			}

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
					if mf.GetName() == "trimtab_scrape_duration_seconds" {
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
