package replica

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// BenchmarkSyncCPU measures what replica sync costs at 1,000 requests a
// second: two replicas on loopback, 16 endpoints, 8k-token prompts from 64
// families (a 128-block chain each). Each iteration is one second of
// wall-clock time: 1,000 picks paced on replica A, first with sync off
// (the pick log detached, nothing flows), then with sync on (A's picks
// and loads streamed to B, recorded in B's index). It reports the process
// CPU per wall second of both windows and their difference: sync's cost,
// both ends included, in milliseconds of CPU per second (10 = 1 % of one
// core).
func BenchmarkSyncCPU(b *testing.B) {
	const rate = 1000
	la, lb := listen(b), listen(b)
	cfg := prefix.DefaultConfig()
	eps := make([]scheduler.Endpoint, 16)
	for i := range eps {
		eps[i] = scheduler.Endpoint{Address: fmt.Sprintf("10.0.1.%d:8000", i+1)}
	}
	syncCfg := func(id, peer string) Config {
		c := testConfig(id, peer)
		c.FlushInterval = DefaultConfig().FlushInterval
		return c
	}
	a := start(b, syncCfg("a", lb.Addr().String()), la, cfg, eps...)
	bb := start(b, syncCfg("b", la.Addr().String()), lb, cfg, eps...)
	reqs := workload(64, 8<<10)
	window := func(sync bool) (cpu time.Duration) {
		if sync {
			a.prefix.SetPickLog(a.rep.picks)
		} else {
			a.prefix.SetPickLog(nil)
		}
		start, c0 := time.Now(), processCPU()
		for i := range rate {
			if d := time.Until(start.Add(time.Duration(i) * time.Second / rate)); d > 0 {
				time.Sleep(d)
			}
			dec, err := a.sched.Pick(context.Background(), &reqs[i%len(reqs)])
			if err != nil {
				b.Fatal(err)
			}
			dec.Done(scheduler.Outcome{})
		}
		time.Sleep(time.Until(start.Add(time.Second)))
		return time.Duration(processCPU() - c0)
	}
	window(true) // warm both indexes and the streams
	var off, on time.Duration
	b.ResetTimer()
	for range b.N {
		off += window(false)
		on += window(true)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(off.Milliseconds())/n, "cpu-ms/s-off")
	b.ReportMetric(float64(on.Milliseconds())/n, "cpu-ms/s-on")
	b.ReportMetric(float64((on-off).Milliseconds())/n, "sync-cpu-ms/s")
	if got := bb.rep.Status().Inbound; len(got) == 0 || got[0].Batches == 0 {
		b.Fatalf("b applied no batch: %+v", got)
	}
}

// workload returns n requests over families prompt families of tokens
// tokens (4 bytes each), the first half of each family shared.
func workload(families, tokens int) []scheduler.Request {
	rng := rand.New(rand.NewPCG(1, 2))
	size := tokens * 4
	out := make([]scheduler.Request, 0, families*4)
	for f := range families {
		sys := make([]byte, size/2)
		for i := range sys {
			sys[i] = byte('a' + rng.IntN(26))
		}
		for v := range 4 {
			p := append(append([]byte(nil), sys...), []byte(fmt.Sprintf("%0*d", size/2, f*4+v))...)
			out = append(out, scheduler.Request{Model: "m", Prompt: p})
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
