package sim

import (
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

func loadShipped(t *testing.T, name string, d time.Duration) *scenario.Scenario {
	t.Helper()
	sc, err := LoadScenario(name)
	if err != nil {
		t.Fatal(err)
	}
	if d > 0 {
		sc = sc.Scaled(d)
	}
	return sc
}

func runOne(t *testing.T, sc *scenario.Scenario, policy string, level float64) *Result {
	t.Helper()
	pols, err := Policies([]string{policy})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(RunConfig{Scenario: sc, Policy: pols[0], Level: level, Seed: 1, Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Completed+r.Failed+r.TimedOut != r.Issued {
		t.Fatalf("%s/%s: %d issued, %d completed + %d failed + %d timed out", sc.Name, policy, r.Issued, r.Completed, r.Failed, r.TimedOut)
	}
	return r
}

// sampleAt returns the timeline index of the first sample at or after s.
func sampleAt(tl *Timeline, s time.Duration) int {
	i, _ := slices.BinarySearch(tl.T, s.Seconds())
	return i
}

// TestPodLoss: pod 0 dies mid-burst (least-queue, so it carries load). Requests without a first token are
// retried on fallbacks and requests already streaming fail; nothing is
// lost, and the dead pod carries no load afterwards.
func TestPodLoss(t *testing.T) {
	sc := loadShipped(t, "pod-loss", time.Minute)
	r := runOne(t, sc, PolicyLeastQueue, 64)
	if r.Retried == 0 || r.Failed == 0 {
		t.Errorf("retried %d, failed %d: the pod's queued requests should be retried and its streaming ones fail", r.Retried, r.Failed)
	}
	at := sc.Events[0].At
	tl := r.Timeline
	for i := sampleAt(tl, at+time.Second); i < len(tl.T); i++ {
		if tl.PodLoad[0][i] != 0 {
			t.Fatalf("t=%.2fs: dead pod 0 has load %v", tl.T[i], tl.PodLoad[0][i])
		}
	}
	var before float64
	for i := sampleAt(tl, at-5*time.Second); i < sampleAt(tl, at); i++ {
		before += tl.PodLoad[0][i]
	}
	if before == 0 {
		t.Error("pod 0 carried no load before it died")
	}
}

// TestScaleUp: two cold pods join mid-burst; a load-aware policy sends them
// work, and before the join they do not exist.
func TestScaleUp(t *testing.T) {
	sc := loadShipped(t, "scale-up", time.Minute)
	r := runOne(t, sc, PolicyLeastQueue, 64)
	tl := r.Timeline
	if len(tl.PodLoad) != sc.Servers+2 {
		t.Fatalf("%d pods in the timeline, want %d + 2", len(tl.PodLoad), sc.Servers)
	}
	at := sc.Events[0].At
	for _, p := range tl.PodLoad[sc.Servers:] {
		var pre, post float64
		for i, v := range p {
			if tl.T[i] < at.Seconds() {
				pre += v
			} else {
				post += v
			}
		}
		if pre != 0 || post == 0 {
			t.Errorf("joined pod: load %v before the join, %v after; want 0 and > 0", pre, post)
		}
	}
}

// TestHeterogeneous: pods of capacity 2 get twice the KV blocks and half
// the step costs of capacity-1 pods.
func TestHeterogeneous(t *testing.T) {
	sc := loadShipped(t, "heterogeneous", 0)
	caps := sc.Capacities()
	if !slices.Contains(caps, 2) || !slices.Contains(caps, 1) || len(caps) != sc.Servers {
		t.Fatalf("capacities %v, want a mix of 2 and 1 over %d servers", caps, sc.Servers)
	}
	one, two := sc.EngineFor(1), sc.EngineFor(2)
	if two.NumBlocks != 2*one.NumBlocks || two.StepPerPrefillToken*2 != one.StepPerPrefillToken {
		t.Errorf("capacity 2: %d blocks, %v per prefill token; capacity 1: %d, %v", two.NumBlocks, two.StepPerPrefillToken, one.NumBlocks, one.StepPerPrefillToken)
	}
}

// TestClientTenancy: with tenancy: client a client's requests always carry
// its tenant's system prompt (the first segment), and close to
// hot_fraction of the clients are hot.
func TestClientTenancy(t *testing.T) {
	sc := loadShipped(t, "rotating-hot-prefix", 0)
	w := sc.Phases[1].Work()
	g, err := scenario.NewGenerator(sc, w, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const clients = 100
	first := map[int]uint64{}
	hot := 0
	var r scenario.Request
	for round := 0; round < 5; round++ {
		for c := 0; c < clients; c++ {
			g.Next(rng, c, &r)
			if k, ok := first[c]; ok && k != r.Segs[0].Key {
				t.Fatalf("client %d changed tenant between requests", c)
			}
			if round == 0 {
				first[c] = r.Segs[0].Key
				if r.Segs[0].Tokens == w.HotSystemTokens {
					hot++
				}
			}
		}
	}
	if want := int(w.HotFraction * clients); hot < want-2 || hot > want+2 {
		t.Errorf("%d of %d clients hot, want about %d", hot, clients, want)
	}
}

// TestTraceSliceSameAtEverySpeed: every speed-up replays the same slice of
// the trace (its first Duration), in Duration / speed-up of run time.
func TestTraceSliceSameAtEverySpeed(t *testing.T) {
	sc, err := LoadScenario(filepath.Join("testdata", "trace-small.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var issued []int
	for _, lv := range []float64{1, 2, 4} {
		issued = append(issued, runOne(t, sc, PolicyRoundRobin, lv).Issued)
	}
	if issued[0] == 0 || issued[0] != issued[1] || issued[1] != issued[2] {
		t.Errorf("issued %v at 1×, 2×, 4×; want the same slice at every speed", issued)
	}
}

// TestSummarySchema: summary.json carries the fields the schema
// names, one entry per run, with phases.
func TestSummarySchema(t *testing.T) {
	sc := loadShipped(t, "small-pool-burst", 30*time.Second)
	r := runOne(t, sc, PolicyAdaptive, 16)
	b, err := json.Marshal(report.SummaryFile{Runs: []report.RunSummary{r.Summary()}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Runs []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	run := got.Runs[0]
	for _, k := range []string{"scenario", "level", "policy", "seed", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "output_tokens_per_s", "prefix_hit_ratio", "failed", "timed_out", "misses", "goodput", "slo", "busiest_pod_share", "phases"} {
		if _, ok := run[k]; !ok {
			t.Errorf("run lacks %q", k)
		}
	}
	phases := run["phases"].([]any)
	if len(phases) != 3 {
		t.Fatalf("%d phases, want 3", len(phases))
	}
	for _, p := range phases {
		for _, k := range []string{"name", "rebalance_entries", "ttft_p99_ms", "misses", "goodput"} {
			if _, ok := p.(map[string]any)[k]; !ok {
				t.Errorf("phase lacks %q", k)
			}
		}
	}
	// Goodput counts measured requests within SLO per second of the
	// window: above 0 (the pool serves this load) and at most every
	// measured request.
	if g, ok := run["goodput"].(float64); !ok || g <= 0 || g > float64(r.Measured)/(sc.Duration-sc.Warmup).Seconds() {
		t.Errorf("goodput %v, want in (0, %d measured ÷ window]", run["goodput"], r.Measured)
	}
	if slo := run["slo"].(map[string]any); slo["ttft_ms"] != 2000.0 || slo["tpot_ms"] != 100.0 {
		t.Errorf("slo %v, want ttft_ms 2000, tpot_ms 100", slo)
	}
	if phases[0].(map[string]any)["name"] != "calm" {
		t.Errorf("first phase %v, want calm", phases[0])
	}
}
