// One file on purpose: a standalone benchmark program, kept whole so it can
// be read and run on its own (it is not part of the product or CI).

//go:build proxybench

// Command proxyvsnginx measures the CPU that `trimtab serve` spends per
// proxied request against nginx's, both in front of the same loopback
// upstream, for a chat completion with an 8k-token body. It is a
// benchmark, not a test: bench/scripts/proxy-vs-nginx.sh builds trimtab
// and runs it (go run -tags proxybench), and nothing in CI does.
//
// One process holds the upstream (a minimal HTTP server that reads the
// body and answers a fixed small chat completion, and serves a vLLM
// /metrics exposition for trimtab's scraper) and the load driver (a
// closed loop of -concurrency clients sending -requests requests). It
// starts three proxies as child processes and measures each one's CPU
// time (utime+stime from /proc/PID/stat, summed over nginx's master and
// workers) around the load:
//
//   - nginx: a generated minimal config (see nginxConf);
//   - go-floor: this program re-executed as the least a Go proxy does —
//     net/http server, read the whole body, one keep-alive transport
//     round trip, copy the answer through with a flush per read — so the
//     part of trimtab's cost that is Go's net/http shows apart from the
//     part that is trimtab's own;
//   - trimtab: `trimtab serve` with a static endpoints file listing the
//     upstream and the shipped default profile's scorers, scraping every
//     50 ms as shipped.
//
// Scraping is measured apart: after each load window the proxy is left
// idle for the same wall time, and the CPU it spends then (for trimtab:
// scraping the upstream every 50 ms, the control loop's tick, the runtime)
// is subtracted from the load window's. Every round runs the three proxies
// in turn, the order rotating from round to round; the report gives each
// proxy's median over rounds and the ratios of the medians.
//
// Everything listens on 127.0.0.1; the program kills only the processes it
// started, by pid, and gives up after -timeout.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type options struct {
	trimtab     string
	nginx       string
	requests    int
	concurrency int
	rounds      int
	tokens      int
	warmup      int
	stream      bool
	workdir     string
	timeout     time.Duration
	perf        string
	only        string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "go-floor" {
		if err := goFloor(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "go-floor:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.StringVar(&o.trimtab, "trimtab", "", "trimtab binary (required)")
	flag.StringVar(&o.nginx, "nginx", "nginx", "nginx binary")
	flag.IntVar(&o.requests, "requests", 20000, "requests per load window, 100…1,000,000")
	flag.IntVar(&o.concurrency, "concurrency", 16, "closed-loop clients, 1…1024")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds (each runs every proxy once), 1…50")
	flag.IntVar(&o.tokens, "tokens", 8192, "prompt tokens per request (4 bytes each), 16…131072")
	flag.IntVar(&o.warmup, "warmup", 500, "unmeasured requests before each load window")
	flag.BoolVar(&o.stream, "stream", false, "the upstream answers as an SSE stream (8 chunks) instead of one JSON body")
	flag.StringVar(&o.workdir, "workdir", "", "directory for configs and logs (default: a new temporary one)")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "give up after this long")
	flag.StringVar(&o.perf, "perf", "", "after the rounds, record `perf record -g` of each proxy under one more load window into this directory (<proxy>.perf)")
	flag.StringVar(&o.only, "only", "", "comma-separated subset of nginx,go-floor,trimtab")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "proxyvsnginx:", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	switch {
	case o.trimtab == "":
		return errors.New("-trimtab: the trimtab binary is required")
	case o.requests < 100 || o.requests > 1_000_000:
		return fmt.Errorf("-requests %d: want 100…1,000,000", o.requests)
	case o.concurrency < 1 || o.concurrency > 1024:
		return fmt.Errorf("-concurrency %d: want 1…1024", o.concurrency)
	case o.rounds < 1 || o.rounds > 50:
		return fmt.Errorf("-rounds %d: want 1…50", o.rounds)
	case o.tokens < 16 || o.tokens > 131072:
		return fmt.Errorf("-tokens %d: want 16…131072", o.tokens)
	case o.warmup < 0 || o.warmup > 100_000:
		return fmt.Errorf("-warmup %d: want 0…100,000", o.warmup)
	case o.timeout <= 0:
		return errors.New("-timeout: want > 0")
	}
	return nil
}

// proxy is one system under test, started as a child process.
type proxy struct {
	name string
	url  string
	cmd  *exec.Cmd
	// pids lists the processes whose CPU counts (nginx: master and workers).
	pids func() []int
}

type sample struct {
	cpuLoad, cpuIdle time.Duration // CPU over the load window and over the idle window after it
	user, sys        time.Duration // the load window's CPU split
	wall             time.Duration
	requests         int
}

// perReq is CPU per request with the idle window's CPU subtracted.
func (s sample) perReq() float64 {
	return float64(s.cpuLoad-s.cpuIdle) / float64(s.requests) / 1e3
}

func (s sample) rawPerReq() float64 { return float64(s.cpuLoad) / float64(s.requests) / 1e3 }

func run(o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if o.workdir == "" {
		d, err := os.MkdirTemp("", "proxyvsnginx-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.workdir = d
	}
	up, err := startUpstream(o.stream)
	if err != nil {
		return err
	}
	defer up.Close()
	bodies := chatBodies(o.tokens, 64, o.stream)
	fmt.Printf("upstream %s; body %d bytes (%d tokens), %d requests × %d rounds at concurrency %d, response %s\n",
		up.Addr(), len(bodies[0]), o.tokens, o.requests, o.rounds, o.concurrency, map[bool]string{false: "one JSON body", true: "SSE stream"}[o.stream])

	var proxies []*proxy
	defer func() {
		for _, p := range proxies {
			p.stop()
		}
	}()
	want := map[string]bool{"nginx": true, "go-floor": true, "trimtab": true}
	if o.only != "" {
		want = map[string]bool{}
		for _, n := range strings.Split(o.only, ",") {
			want[strings.TrimSpace(n)] = true
		}
	}
	for _, start := range []struct {
		name string
		fn   func(options, string) (*proxy, error)
	}{{"nginx", startNginx}, {"go-floor", startGoFloor}, {"trimtab", startTrimtab}} {
		if !want[start.name] {
			continue
		}
		p, err := start.fn(o, up.Addr())
		if p != nil {
			proxies = append(proxies, p)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", start.name, err)
		}
		if err := waitReady(ctx, p, bodies[0]); err != nil {
			return fmt.Errorf("%s: %w (logs in %s)", p.name, err, o.workdir)
		}
	}
	if len(proxies) == 0 {
		return fmt.Errorf("-only %q names no proxy", o.only)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.concurrency, MaxIdleConns: 4 * o.concurrency, DisableCompression: true}}
	results := map[string][]sample{}
	for r := 0; r < o.rounds; r++ {
		for i := range proxies {
			p := proxies[(r+i)%len(proxies)]
			s, err := measure(ctx, client, p, bodies, o)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, p.name, err)
			}
			results[p.name] = append(results[p.name], s)
			fmt.Printf("round %d %-8s %7.1f µs/req (raw %7.1f, user %5.1f sys %5.1f), idle %5.1f ms/s, %6.0f req/s\n",
				r+1, p.name, s.perReq(), s.rawPerReq(),
				float64(s.user)/float64(s.requests)/1e3, float64(s.sys)/float64(s.requests)/1e3,
				float64(s.cpuIdle)/float64(s.wall)*1e3, float64(s.requests)/s.wall.Seconds())
		}
	}
	report(proxies, results)
	if o.perf != "" {
		if err := os.MkdirAll(o.perf, 0o755); err != nil {
			return err
		}
		for _, p := range proxies {
			if err := perfRecord(ctx, client, p, bodies, o); err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
		}
	}
	return nil
}

// measure runs one warm-up, one load window and one idle window of the
// same wall time on p.
func measure(ctx context.Context, client *http.Client, p *proxy, bodies [][]byte, o options) (sample, error) {
	if _, err := drive(ctx, client, p.url, bodies, o.warmup, o.concurrency); err != nil {
		return sample{}, fmt.Errorf("warm-up: %w", err)
	}
	u0, s0 := cpu(p.pids())
	wall, err := drive(ctx, client, p.url, bodies, o.requests, o.concurrency)
	u1, s1 := cpu(p.pids())
	if err != nil {
		return sample{}, err
	}
	// The idle window: what the proxy spends with no requests (trimtab:
	// scraping, the control loop, the runtime) over the same wall time.
	i0u, i0s := cpu(p.pids())
	select {
	case <-time.After(wall):
	case <-ctx.Done():
		return sample{}, ctx.Err()
	}
	i1u, i1s := cpu(p.pids())
	return sample{
		cpuLoad: (u1 - u0) + (s1 - s0), user: u1 - u0, sys: s1 - s0,
		cpuIdle: (i1u - i0u) + (i1s - i0s), wall: wall, requests: o.requests,
	}, nil
}

func report(proxies []*proxy, results map[string][]sample) {
	med := func(name string, f func(sample) float64) float64 {
		var v []float64
		for _, s := range results[name] {
			v = append(v, f(s))
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	fmt.Println()
	fmt.Println("| proxy | CPU µs/req, scraping excluded | raw (idle not subtracted) | user | sys | idle CPU ms/s | req/s |")
	fmt.Println("|---|--:|--:|--:|--:|--:|--:|")
	for _, p := range proxies {
		n := p.name
		fmt.Printf("| %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.0f |\n", n,
			med(n, sample.perReq), med(n, sample.rawPerReq),
			med(n, func(s sample) float64 { return float64(s.user) / float64(s.requests) / 1e3 }),
			med(n, func(s sample) float64 { return float64(s.sys) / float64(s.requests) / 1e3 }),
			med(n, func(s sample) float64 { return float64(s.cpuIdle) / float64(s.wall) * 1e3 }),
			med(n, func(s sample) float64 { return float64(s.requests) / s.wall.Seconds() }))
	}
	ng := med("nginx", sample.perReq)
	if ng > 0 {
		fmt.Println()
		for _, n := range []string{"go-floor", "trimtab"} {
			if len(results[n]) > 0 {
				lo, hi := perRound(results[n], results["nginx"])
				fmt.Printf("%s ÷ nginx: %.2f (scraping excluded; single rounds %.2f–%.2f), %.2f (raw)\n", n, med(n, sample.perReq)/ng, lo, hi, med(n, sample.rawPerReq)/med("nginx", sample.rawPerReq))
			}
		}
	}
	if gf := med("go-floor", sample.perReq); gf > 0 && len(results["trimtab"]) > 0 {
		fmt.Printf("trimtab ÷ go-floor: %.2f\n", med("trimtab", sample.perReq)/gf)
	}
}

// perRound returns the smallest and largest ratio a[r] ÷ b[r] of one
// round's figures (scraping excluded).
func perRound(a, b []sample) (lo, hi float64) {
	for r := range min(len(a), len(b)) {
		x := a[r].perReq() / b[r].perReq()
		if r == 0 || x < lo {
			lo = x
		}
		if r == 0 || x > hi {
			hi = x
		}
	}
	return lo, hi
}

// drive sends n requests through url from c closed-loop clients, cycling
// through bodies, and returns the wall time. Any answer but a 200 with a
// complete body is an error.
func drive(ctx context.Context, client *http.Client, url string, bodies [][]byte, n, c int) (time.Duration, error) {
	if n == 0 {
		return 0, nil
	}
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				if err := post(ctx, client, url, bodies[int(i)%len(bodies)], buf); err != nil {
					errOnce.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), first
}

func post(ctx context.Context, client *http.Client, url string, body, buf []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var n int
	for {
		m, err := resp.Body.Read(buf)
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if n == 0 {
		return errors.New("empty answer")
	}
	return nil
}

// cpu returns the user and system CPU time of pids so far (USER_HZ ticks,
// 10 ms on Linux). A process that is gone counts 0.
func cpu(pids []int) (user, sys time.Duration) {
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may
		// hold spaces: state is field 3, utime 14 and stime 15.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		user += time.Duration(u) * 10 * time.Millisecond
		sys += time.Duration(s) * 10 * time.Millisecond
	}
	return user, sys
}

// withChildren returns pid and its direct children (nginx's workers).
func withChildren(pid int) []int {
	pids := []int{pid}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			pids = append(pids, child)
		}
	}
	return pids
}

// chatBodies returns n chat requests of about tokens tokens each (4 bytes
// a token): one shared system prompt of tokens−512 tokens and a 512-token
// user message of their own, so the prefix index sees a shared prefix and
// new blocks, as it would with real traffic.
func chatBodies(tokens, n int, stream bool) [][]byte {
	user := min(512, tokens/2)
	system := words(0, tokens-user)
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"model":"bench-model","max_tokens":16,"stream":%t,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`,
			stream, system, words(uint64(i+1), user))
	}
	return out
}

// words returns n four-byte tokens (a three-letter syllable and a space,
// a newline after every 16th), deterministic for seed.
func words(seed uint64, n int) string {
	const cons, vow = "bcdfghjklmnprstvz", "aeiou"
	var b strings.Builder
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := 0; i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b.WriteByte(cons[x%uint64(len(cons))])
		b.WriteByte(vow[(x>>8)%uint64(len(vow))])
		b.WriteByte(cons[(x>>16)%uint64(len(cons))])
		if i%16 == 15 {
			b.WriteByte('\n') // a line of 16 words: the body has escapes, as real prompts do
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// upstream is the loopback model server every proxy forwards to.
type upstream struct {
	ln  net.Listener
	srv *http.Server
}

func (u *upstream) Addr() string { return u.ln.Addr().String() }
func (u *upstream) Close()       { _ = u.srv.Close() }

const vllmMetrics = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="bench-model"} 0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="bench-model"} 0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="bench-model"} 0.1
`

func startUpstream(stream bool) (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":8192,"completion_tokens":1,"total_tokens":8193}}`)
	var sse bytes.Buffer
	for i := 0; i < 8; i++ {
		fmt.Fprintf(&sse, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"bench-model\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":null}]}\n\n", i)
	}
	sse.WriteString("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"bench-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":8192,\"completion_tokens\":8,\"total_tokens\":8200}}\n\ndata: [DONE]\n\n")
	bufs := sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		bp := bufs.Get().(*[]byte)
		_, _ = io.CopyBuffer(io.Discard, r.Body, *bp)
		bufs.Put(bp)
		if stream {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write(sse.Bytes())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		_, _ = w.Write(answer)
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, vllmMetrics)
	})
	mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &upstream{ln: ln, srv: srv}, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// nginxConf is nginx set up to do what trimtab does with a request:
//   - proxy_request_buffering on (the default) with a body buffer large
//     enough to keep the body in memory: trimtab reads the whole body
//     before it picks an endpoint, and never spills it to disk;
//   - proxy_buffering off: trimtab writes each read of the answer on to
//     the client and flushes, so SSE events are not held back;
//   - HTTP/1.1 keep-alive to the upstream (upstream keepalive 64, the
//     Connection header cleared), as trimtab's transport keeps idle
//     connections;
//   - X-Forwarded-For set to the client's address, as trimtab sets it for
//     an untrusted peer;
//   - access_log off: trimtab writes no line per request;
//   - two workers, one per core, as trimtab's GOMAXPROCS is the core count.
func nginxConf(dir string, port int, upstream string) string {
	return fmt.Sprintf(`worker_processes 2;
daemon off;
master_process on;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    upstream backend {
        server %[3]s;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:%[2]d;
        client_max_body_size 16m;
        client_body_buffer_size 1m;
        proxy_request_buffering on;
        proxy_buffering off;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $remote_addr;
        }
    }
}
`, dir, port, upstream)
}

func startNginx(o options, upstream string) (*proxy, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(o.workdir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf(o.workdir, port, upstream)), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(o.nginx, "-c", conf, "-p", o.workdir, "-e", filepath.Join(o.workdir, "nginx-error.log"))
	p := &proxy{name: "nginx", url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd}
	if err := p.start(o.workdir); err != nil {
		return nil, err
	}
	master := cmd.Process.Pid
	p.pids = func() []int { return withChildren(master) }
	return p, nil
}

func startGoFloor(o options, upstream string) (*proxy, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := &proxy{name: "go-floor", url: "http://" + addr, cmd: exec.Command(self, "go-floor", addr, upstream)}
	if err := p.start(o.workdir); err != nil {
		return nil, err
	}
	pid := p.cmd.Process.Pid
	p.pids = func() []int { return []int{pid} }
	return p, nil
}

func startTrimtab(o options, upstream string) (*proxy, error) {
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	adminPort, err := freePort()
	if err != nil {
		return nil, err
	}
	eps := filepath.Join(o.workdir, "endpoints.yaml")
	if err := os.WriteFile(eps, []byte(fmt.Sprintf("endpoints:\n  - address: %s\n    models: [bench-model]\n", upstream)), 0o644); err != nil {
		return nil, err
	}
	// The shipped default profile's scheduler (configs/default.yaml) with
	// the static endpoints file; ext_proc off (nothing calls it).
	profile := fmt.Sprintf(`scheduler:
  seed: 0
  max_fallbacks: 2
picker:
  type: max-score
filters: [model, healthy]
scorers:
  - type: prefix
    weight: 3
  - type: queue
    weight: 2
  - type: kvcache
    weight: 2
  - type: inflight
    weight: 1
adaptive:
  enabled: false
endpoints:
  mode: static
  file: %s
scrape:
  interval: 50ms
server:
  http:
    addr: 127.0.0.1:%d
  ext_proc:
    enabled: false
  admin:
    addr: 127.0.0.1:%d
`, eps, httpPort, adminPort)
	path := filepath.Join(o.workdir, "trimtab.yaml")
	if err := os.WriteFile(path, []byte(profile), 0o644); err != nil {
		return nil, err
	}
	p := &proxy{name: "trimtab", url: fmt.Sprintf("http://127.0.0.1:%d", httpPort),
		cmd: exec.Command(o.trimtab, "serve", "--config", path, "--log-level", "warn")}
	if err := p.start(o.workdir); err != nil {
		return nil, err
	}
	pid := p.cmd.Process.Pid
	p.pids = func() []int { return []int{pid} }
	return p, nil
}

func (p *proxy) start(dir string) error {
	log, err := os.Create(filepath.Join(dir, p.name+".log"))
	if err != nil {
		return err
	}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	// The child dies with this program, whatever ends it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return err
	}
	go func() { _ = p.cmd.Wait(); log.Close() }()
	return nil
}

// stop ends the process this program started (nginx's master stops its
// workers on SIGQUIT), by pid, and kills it if it lingers.
func (p *proxy) stop() {
	if p.cmd.Process == nil {
		return
	}
	sig := syscall.SIGTERM
	if p.name == "nginx" {
		sig = syscall.SIGQUIT
	}
	_ = p.cmd.Process.Signal(sig)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := p.cmd.Process.Signal(syscall.Signal(0)); err != nil || p.cmd.ProcessState != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = p.cmd.Process.Kill()
}

// waitReady polls p with one real request until it answers 200, for at
// most 30 s.
func waitReady(ctx context.Context, p *proxy, body []byte) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if err = post(ctx, client, p.url, body, make([]byte, 4096)); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not answering after 30 s: %v", err)
}

// perfRecord samples p's stacks (user and kernel, all its processes) with
// perf during one more load window, into o.perf/<name>.perf.
func perfRecord(ctx context.Context, client *http.Client, p *proxy, bodies [][]byte, o options) error {
	var pids []string
	for _, pid := range p.pids() {
		pids = append(pids, strconv.Itoa(pid))
	}
	file := filepath.Join(o.perf, p.name+".perf")
	rec := exec.CommandContext(ctx, "perf", "record", "-F", "1999", "-g", "-p", strings.Join(pids, ","), "-o", file)
	var out bytes.Buffer
	rec.Stdout, rec.Stderr = &out, &out
	if err := rec.Start(); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	time.Sleep(500 * time.Millisecond) // perf attaches
	_, derr := drive(ctx, client, p.url, bodies, o.requests, o.concurrency)
	_ = rec.Process.Signal(syscall.SIGINT)
	_ = rec.Wait() // perf ends by the signal
	if derr != nil {
		return derr
	}
	if st, err := os.Stat(file); err != nil || st.Size() == 0 {
		return fmt.Errorf("perf record wrote nothing: %v\n%s", err, out.String())
	}
	fmt.Printf("perf profile of %s under %d requests: %s (perf report -i %s --no-children --sort dso,symbol)\n", p.name, o.requests, file, file)
	return nil
}

// goFloor is the least a Go proxy does for the same request: net/http
// server, read the whole body, one round trip on a keep-alive transport,
// copy the answer's headers and body through with a flush per read.
func goFloor(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: go-floor LISTEN UPSTREAM")
	}
	listen, upstream := args[0], args[1]
	tr := &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true, WriteBufferSize: 64 << 10, ReadBufferSize: 64 << 10}
	bodies := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	bufs := sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := bodies.Get().(*bytes.Buffer)
		defer bodies.Put(body)
		body.Reset()
		if _, err := body.ReadFrom(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+upstream+r.URL.RequestURI(), bytes.NewReader(body.Bytes()))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		for k, v := range r.Header {
			if k != "Connection" && k != "Host" {
				out.Header[k] = v
			}
		}
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		bp := bufs.Get().(*[]byte)
		defer bufs.Put(bp)
		rc := http.NewResponseController(w)
		for {
			n, err := resp.Body.Read(*bp)
			if n > 0 {
				if _, werr := w.Write((*bp)[:n]); werr != nil {
					return
				}
				_ = rc.Flush()
			}
			if err != nil {
				return
			}
		}
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
