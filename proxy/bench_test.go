package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers"
)

// benchScheduler is a realistic request path: prefix (3) and queue (2)
// scorers over three endpoints.
func benchScheduler(b *testing.B, addrs ...string) *scheduler.Scheduler {
	prefix, err := scorers.NewPrefix("prefix", scorers.DefaultPrefixConfig(), scorers.Deps{})
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
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			defer func() { cancel(); <-done }()
			// The client stands in for Envoy (which is not Go): it uses the
			// same codec so grpc-go's client-side buffer zeroing does not
			// dominate the figure.
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
			for b.Loop() {
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
			b.ReportMetric(float64(percentile(lat, 0.5).Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds())/1e3, "p99-µs")
		})
	}
}
