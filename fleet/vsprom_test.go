package fleet

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// scraperKinds are the scrapers the helper servers tell apart by their
// User-Agent; scraperKind maps a User-Agent to an index into it.
var scraperKinds = [...]string{"trimtab", "prometheus", "floor"}

// floorUserAgent is what the fetch-only floor sends, so the servers count
// its requests apart from trimtab's (Go's default User-Agent).
const floorUserAgent = "trimtab-scrape-floor"

func scraperKind(ua string) int {
	switch {
	case strings.HasPrefix(ua, "Prometheus/"):
		return 1
	case ua == floorUserAgent:
		return 2
	}
	return 0
}

var (
	scraperFlag = flag.String("fleet.scraper", "", "internal: run this scraper (trimtab or floor) for BenchmarkScrapeVsPrometheus")
	targetsFlag = flag.String("fleet.targets", "", "internal: file of host:port targets, one a line, for -fleet.scraper")
)

// TestHelperScraper is not a test: BenchmarkScrapeVsPrometheus runs the
// test binary again with -fleet.scraper so each scraper's CPU can be read
// from /proc on its own. "trimtab" runs the Fleet as serve does (default
// scrape config, every snapshot loaded by a subscriber, like serve's
// scheduler feed); "floor" runs the fetch-only loops of
// BenchmarkScrapeFloor. It prints READY and runs until its stdin closes.
func TestHelperScraper(t *testing.T) {
	if *scraperFlag == "" {
		t.Skip("helper process for BenchmarkScrapeVsPrometheus")
	}
	raw, err := os.ReadFile(*targetsFlag)
	if err != nil {
		t.Fatal(err)
	}
	addrs := strings.Fields(string(raw))
	cfg := DefaultConfig().Scrape
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	switch *scraperFlag {
	case "trimtab":
		var targets []Target
		for _, a := range addrs {
			targets = append(targets, Target{Address: a, Ready: true})
		}
		f, err := New(Config{Scrape: cfg}, Deps{Discoverer: fixedDiscoverer(targets), Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		updates, unsubscribe := f.Subscribe()
		defer unsubscribe()
		wg.Add(2)
		go func() { defer wg.Done(); f.Run(ctx) }()
		go func() {
			defer wg.Done()
			var seen int
			for {
				select {
				case <-ctx.Done():
					return
				case <-updates:
					seen += len(f.Load().Endpoints)
				}
			}
		}()
	case "floor":
		client := &http.Client{Transport: NewTransport(cfg), Timeout: cfg.Timeout}
		for i, a := range addrs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fetchLoop(ctx.Done(), client, a, cfg.Interval, time.Duration(i)*cfg.Interval/time.Duration(len(addrs)), func(error) {})
			}()
		}
	default:
		t.Fatalf("-fleet.scraper=%q: want trimtab or floor", *scraperFlag)
	}
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin)
	cancel()
	wg.Wait()
}

// fixedDiscoverer hands one target list to the fleet and waits.
type fixedDiscoverer []Target

func (d fixedDiscoverer) Run(ctx context.Context, sink Sink) error {
	sink.Update(d)
	<-ctx.Done()
	return nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture's ABI.
const clockTicks = 100

// procCPU returns the user + system CPU time of process pid (all its
// threads) from /proc/<pid>/stat, at 10 ms resolution.
func procCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it start
	// at state (field 3), so utime (14) and stime (15) are [11] and [12].
	i := strings.LastIndexByte(string(raw), ')')
	f := strings.Fields(string(raw[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// startChild starts cmd with a stdin pipe whose closing stops it, and
// stops it (and, failing that within 5 s, kills it) when b ends. With
// ready set it waits for a line "READY" on the child's stdout.
func startChild(b *testing.B, cmd *exec.Cmd, ready bool) {
	b.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	var out io.ReadCloser
	if ready {
		if out, err = cmd.StdoutPipe(); err != nil {
			b.Fatal(err)
		}
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", cmd.Path, err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Process.Signal(syscall.SIGCONT) // it may be stopped
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	if ready {
		sc := bufio.NewScanner(out)
		for sc.Scan() && sc.Text() != "READY" {
		}
		go io.Copy(io.Discard, out)
	}
}

// servedCounts reads the helper servers' count page: requests served so
// far per scraper kind.
func servedCounts(addr string) ([len(scraperKinds)]int64, error) {
	var n [len(scraperKinds)]int64
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		return n, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for i := 0; sc.Scan() && i < len(n); i++ {
		_, v, _ := strings.Cut(sc.Text(), " ")
		if n[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			return n, fmt.Errorf("count page: %w", err)
		}
	}
	return n, sc.Err()
}

// freePort returns a loopback port that was free a moment ago.
func freePort(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// BenchmarkScrapeVsPrometheus scrapes the same 256 loopback vLLM servers
// (a child process, TestHelperServers) every 50 ms with three scrapers,
// each its own process: trimtab's Fleet as serve runs it, a real
// Prometheus server (the `prometheus` binary on PATH, the Debian package;
// skipped when missing), and the fetch-only floor (BenchmarkScrapeFloor's
// work: GET and read the body). Two cores cannot serve and scrape 3 ×
// 5,120 scrapes/s at once, so after a common warm-up each op is a round in
// which every scraper runs alone for 1 s (after 300 ms to settle) while the
// other two are stopped (SIGSTOP); rounds interleave the three over the
// same stretch of the machine's time. In each phase it reads the running
// scraper's CPU time from /proc/<pid>/stat and counts its requests at the
// servers (by User-Agent). It reports, per scraper, cores, scrapes/s and
// cpu-µs per scrape, and
//
//	cpu-ratio   = trimtab's CPU per scrape ÷ Prometheus's,
//	floor-ratio = trimtab's CPU per scrape ÷ the floor's;
//
// per scrape, so a scraper that falls behind is not credited for the
// scrapes it skipped (when all keep up, these are the ratios of cores),
// and it logs a scraper that made under 90 % of its scrapes. Prometheus's
// scrape_timeout cannot exceed its 50 ms interval; trimtab's and the
// floor's timeout is the default 200 ms. -benchtime 5x measures five
// rounds (about 20 s); set-up waits at most 30 s for all three to scrape.
func BenchmarkScrapeVsPrometheus(b *testing.B) {
	const n = 256
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		b.Skip("prometheus is not installed (apt-get install -y --no-install-recommends prometheus): nothing to compare trimtab's scraper with")
	}
	interval := DefaultConfig().Scrape.Interval
	targets, countsAddr := startCountingServers(b, n)
	dir := b.TempDir()
	var addrs []string
	for _, t := range targets {
		addrs = append(addrs, t.Address)
	}
	targetsFile := filepath.Join(dir, "targets")
	if err := os.WriteFile(targetsFile, []byte(strings.Join(addrs, "\n")), 0o644); err != nil {
		b.Fatal(err)
	}
	promConfig := fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: %s
scrape_configs:
  - job_name: vllm
    static_configs:
      - targets: ['%s']
`, promDuration(interval), promDuration(interval), strings.Join(addrs, "', '"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(promConfig), 0o644); err != nil {
		b.Fatal(err)
	}

	var pids [len(scraperKinds)]int
	for i, kind := range []string{"trimtab", "floor"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperScraper$", "-fleet.scraper="+kind, "-fleet.targets="+targetsFile)
		startChild(b, cmd, true)
		pids[[]int{0, 2}[i]] = cmd.Process.Pid
	}
	promLog, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer promLog.Close()
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+freePort(b), "--log.level=warn")
	cmd.Stdout, cmd.Stderr = promLog, promLog
	startChild(b, cmd, false)
	pids[1] = cmd.Process.Pid

	// Wait until every scraper has reached every target at least twice
	// (Prometheus starts its scrape loops a few seconds after start).
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := servedCounts(countsAddr)
		if err != nil {
			b.Fatal(err)
		}
		if min(c[0], c[1], c[2]) >= 2*n {
			time.Sleep(time.Second) // every loop in its steady state
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(promLog.Name())
			b.Fatalf("after 30 s the servers saw %v requests from %v; prometheus log:\n%s", c, scraperKinds, log)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Each scraper runs alone in its phase of every round: the others are
	// stopped (SIGSTOP), so the servers and the cores serve one scraper at
	// a time — three scrapers at 5,120 scrapes/s each, plus the servers,
	// need more than two cores — while the rounds interleave the three
	// over the same stretch of the machine's time.
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	b.Run(fmt.Sprintf("endpoints=%d/interval=%s", n, interval), func(b *testing.B) {
		const settle, phase = 300 * time.Millisecond, time.Second
		var cpu [len(scraperKinds)]time.Duration
		var served [len(scraperKinds)]int64
		var wall [len(scraperKinds)]time.Duration
		b.ResetTimer()
		for range b.N {
			for k, pid := range pids {
				syscall.Kill(pid, syscall.SIGCONT)
				time.Sleep(settle) // timers that came due while stopped fire now
				c0, err := procCPU(pid)
				if err != nil {
					b.Fatalf("%s: %v", scraperKinds[k], err)
				}
				n0, err := servedCounts(countsAddr)
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				time.Sleep(phase)
				c1, err := procCPU(pid)
				if err != nil {
					b.Fatalf("%s: %v", scraperKinds[k], err)
				}
				n1, err := servedCounts(countsAddr)
				if err != nil {
					b.Fatal(err)
				}
				wall[k] += time.Since(t0)
				syscall.Kill(pid, syscall.SIGSTOP)
				cpu[k] += c1 - c0
				served[k] += n1[k] - n0[k]
			}
		}
		b.StopTimer()
		var perScrape [len(scraperKinds)]float64
		for k, kind := range scraperKinds {
			b.ReportMetric(cpu[k].Seconds()/wall[k].Seconds(), kind+"-cores")
			b.ReportMetric(float64(served[k])/wall[k].Seconds(), kind+"-scrapes/s")
			if served[k] > 0 {
				perScrape[k] = float64(cpu[k].Microseconds()) / float64(served[k])
				b.ReportMetric(perScrape[k], kind+"-cpu-µs/scrape")
			}
			if want := float64(n) * wall[k].Seconds() / interval.Seconds(); float64(served[k]) < 0.9*want {
				b.Logf("%s made %d of %.0f scrapes in its phases: it fell behind (a busy machine; Prometheus's scrape_timeout is its 50 ms interval), so the ratios do not compare like with like", kind, served[k], want)
			}
		}
		if perScrape[1] > 0 && perScrape[2] > 0 {
			b.ReportMetric(perScrape[0]/perScrape[1], "cpu-ratio")
			b.ReportMetric(perScrape[0]/perScrape[2], "floor-ratio")
		}
	})
}

// promDuration formats d as a Prometheus duration (50ms, 1s).
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}
