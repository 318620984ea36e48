package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// benchScheduler is a realistic request path: prefix (3) and queue (2)
// scorers over three endpoints.
func benchScheduler(b *testing.B, addrs ...string) *scheduler.Scheduler {
	prefix, err := prefix.New("prefix", prefix.DefaultConfig(), prefix.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	queue, err := scorers.NewQueue("queue", scorers.DefaultQueueConfig(), scorers.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{
		{Name: "prefix", Type: "prefix", Scorer: prefix, Weight: 3},
		{Name: "queue", Type: "queue", Scorer: queue, Weight: 2},
	}, []scheduler.Filter{scheduler.ModelFilter{}, scheduler.HealthyFilter{}}, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	eps := make([]scheduler.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = scheduler.Endpoint{Address: a, Models: []string{"llama-8b"}, State: scheduler.StateFresh}
	}
	s.SetEndpoints(eps)
	return s
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// BenchmarkProxyOverhead measures the latency the HTTP proxy adds to a
// request with an 8k-token body: each iteration sends the same request
// straight to an upstream and through the proxy, paced at 1,000 iterations
// per second, and reports p50/p99 of both and their difference ("added").
// Any non-200 answer fails the benchmark (no request may be lost).
func BenchmarkProxyOverhead(b *testing.B) {
	body := benchBody(8192, false)
	answer := []byte(`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}`)
	var addrs []string
	for i := 0; i < 3; i++ {
		u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(answer)
		}))
		b.Cleanup(u.Close)
		addrs = append(addrs, u.Listener.Addr().String())
	}
	s := benchScheduler(b, addrs...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	h, err := NewHTTP(DefaultConfig(), Deps{Scheduler: s, Listener: ln})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	do := func(url string) time.Duration {
		t0 := time.Now()
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: status %d", url, resp.StatusCode)
		}
		return time.Since(t0)
	}
	direct := "http://" + addrs[0] + "/v1/completions"
	proxied := "http://" + ln.Addr().String() + "/v1/completions"
	const rate = 1000 // iterations per second
	b.Run(fmt.Sprintf("prompt=8k/rate=%d", rate), func(b *testing.B) {
		do(direct) // warm connections
		do(proxied)
		var dl, pl []time.Duration
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		start := time.Now()
		i := 0
		for b.Loop() {
			if wait := time.Until(start.Add(time.Duration(i) * time.Second / rate)); wait > 0 {
				time.Sleep(wait)
			}
			i++
			dl = append(dl, do(direct))
			pl = append(pl, do(proxied))
		}
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
		b.ReportMetric(us(percentile(dl, 0.50)), "direct-p50-µs")
		b.ReportMetric(us(percentile(pl, 0.50)), "proxy-p50-µs")
		b.ReportMetric(us(percentile(pl, 0.50)-percentile(dl, 0.50)), "added-p50-µs")
		b.ReportMetric(us(percentile(pl, 0.99)-percentile(dl, 0.99)), "added-p99-µs")
		b.ReportMetric(us(percentile(dl, 0.99)), "direct-p99-µs")
		b.ReportMetric(us(percentile(pl, 0.99)), "proxy-p99-µs")
	})
}

// BenchmarkExtProc measures one ext_proc exchange for an 8k-token request
// over a loopback gRPC connection: request headers and body in, header
// mutation and body back (p50 of that span reported as p50-µs). The stream
// is then closed, which finishes the decision.
//
// The client stands in for Envoy and shares the process and its cores, so
// the server side is timed apart by a stream interceptor (serverTimer):
// server-p50-µs / server-p99-µs run from the request-headers message
// leaving Recv to the answer carrying the destination returning from Send
// (they include waiting for the client to send the body); server-pick-p50-µs
// runs from the end-of-stream body message leaving Recv to that same Send,
// the server's own work once it has the whole body. cpu-µs/op is the
// process's CPU time (client and server, from /proc/self/stat, 10 ms ticks;
// absent where that file is missing) per exchange. The server's goroutines
// carry the pprof label side=server, so -cpuprofile can be split with
// `go tool pprof -tagfocus=side=server`.
func BenchmarkExtProc(b *testing.B) {
	body := benchBody(8192, false)
	s := benchScheduler(b, "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")
	for _, mode := range []struct {
		name string
		pc   *extprocv3.ProtocolConfiguration
	}{
		{"full-duplex-streamed", &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED}},
		{"buffered", &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED, ResponseBodyMode: filterv3.ProcessingMode_NONE}},
	} {
		b.Run("mode="+mode.name+"/prompt=8k", func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			e, err := NewExtProc(DefaultConfig(), Deps{Scheduler: s, Listener: ln})
			if err != nil {
				b.Fatal(err)
			}
			// Run's server, plus the timing interceptor.
			timer := &serverTimer{}
			gs := grpc.NewServer(append(e.serverOptions(), grpc.StreamInterceptor(timer.intercept))...)
			extprocv3.RegisterExternalProcessorServer(gs, e)
			served := make(chan error, 1)
			go pprof.Do(context.Background(), pprof.Labels("side", "server"), func(context.Context) { served <- gs.Serve(ln) })
			defer func() { gs.Stop(); <-served }()
			// The client uses the same codec so grpc-go's client-side
			// buffer zeroing does not dominate the figure.
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				experimental.WithBufferPool(grpcBuffers), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(protoCodec{})))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := extprocv3.NewExternalProcessorClient(conn)
			hdrs := requestHeaders(false, nil, mode.pc, "content-type", "application/json")
			bodyMsg := requestBody(body, true)
			buffered := mode.pc.RequestBodyMode == filterv3.ProcessingMode_BUFFERED
			var lat []time.Duration
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			cpu0, cpuOK := processCPU()
			n := 0
			for b.Loop() {
				n++
				t0 := time.Now()
				st, err := c.Process(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if err := st.Send(hdrs); err != nil {
					b.Fatal(err)
				}
				if buffered {
					if _, err := st.Recv(); err != nil {
						b.Fatal(err)
					}
				}
				if err := st.Send(bodyMsg); err != nil {
					b.Fatal(err)
				}
				for {
					r, err := st.Recv()
					if err != nil {
						b.Fatal(err)
					}
					if r.GetImmediateResponse() != nil {
						b.Fatalf("immediate response %v", r)
					}
					if buffered && r.GetRequestBody() != nil {
						break
					}
					if br := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse(); br.GetEndOfStream() {
						break
					}
				}
				lat = append(lat, time.Since(t0))
				_ = st.CloseSend()
				if _, err := st.Recv(); err != io.EOF {
					b.Fatalf("stream end: %v", err)
				}
			}
			cpu1, _ := processCPU()
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			b.ReportMetric(us(percentile(lat, 0.5)), "p50-µs")
			b.ReportMetric(us(percentile(lat, 0.99)), "p99-µs")
			srv, pick := timer.spans()
			if len(srv) != n || len(pick) != n {
				b.Fatalf("server timed %d destinations (%d after the body) for %d exchanges", len(srv), len(pick), n)
			}
			b.ReportMetric(us(percentile(srv, 0.5)), "server-p50-µs")
			b.ReportMetric(us(percentile(srv, 0.99)), "server-p99-µs")
			b.ReportMetric(us(percentile(pick, 0.5)), "server-pick-p50-µs")
			if cpuOK {
				b.ReportMetric(us(cpu1-cpu0)/float64(n), "cpu-µs/op")
			}
		})
	}
}

// serverTimer is a grpc stream interceptor that times, per stream, the
// span from the request-headers message (and from the end-of-stream body
// message) leaving RecvMsg to the answer carrying the destination (dynamic
// metadata in DestinationNamespace) returning from SendMsg.
type serverTimer struct {
	mu   sync.Mutex
	srv  []time.Duration // request headers received → destination sent
	pick []time.Duration // last body message received → destination sent
}

func (t *serverTimer) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &timedStream{ServerStream: ss, t: t})
}

func (t *serverTimer) spans() (srv, pick []time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.srv), slices.Clone(t.pick)
}

type timedStream struct {
	grpc.ServerStream
	t             *serverTimer
	headers, body time.Time
	timed         bool
}

func (s *timedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if r, ok := m.(*extprocv3.ProcessingRequest); ok && err == nil {
		switch {
		case r.GetRequestHeaders() != nil:
			s.headers = time.Now()
		case r.GetRequestBody().GetEndOfStream():
			s.body = time.Now()
		}
	}
	return err
}

func (s *timedStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if r, ok := m.(*extprocv3.ProcessingResponse); ok && err == nil && !s.timed &&
		r.GetDynamicMetadata().GetFields()[DestinationNamespace] != nil {
		now := time.Now()
		s.timed = true
		s.t.mu.Lock()
		s.t.srv = append(s.t.srv, now.Sub(s.headers))
		s.t.pick = append(s.t.pick, now.Sub(s.body))
		s.t.mu.Unlock()
	}
	return err
}

// processCPU returns the CPU time (user + system) the process has used,
// from /proc/self/stat (Linux; clock ticks of 10 ms, the USER_HZ of every
// mainstream kernel); ok is false where that cannot be read.
func processCPU() (cpu time.Duration, ok bool) {
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the ")" closing the command name: state is field 3, so
	// utime (14) and stime (15) are the 12th and 13th.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}
