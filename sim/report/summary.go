package report

import (
	"encoding/json"
	"io"
	"math"
	"os"

	"github.com/trimtab/trimtab/sim/scenario"
)

// SummaryFile is the machine-readable result of a sim (or bench) command:
// DIR/summary.json, one entry per run.
type SummaryFile struct {
	Runs []RunSummary `json:"runs"`
}

// RunSummary is one run: a scenario at one level under one policy with
// one seed. Latencies are in milliseconds; a percentile of no requests is
// null. The percentiles count every measured request: one that failed or
// timed out (a miss, counted in Misses) counts at the client timeout
// (Latencies), so a policy whose requests time out cannot read fast.
type RunSummary struct {
	Scenario string  `json:"scenario"`
	Level    float64 `json:"level"`
	Policy   string  `json:"policy"`
	Seed     uint64  `json:"seed"`
	// Engine names the engine calibration of the run (absent: the
	// scenario's own engine section).
	Engine             string   `json:"engine,omitempty"`
	TTFTP50            *float64 `json:"ttft_p50_ms"`
	TTFTP90            *float64 `json:"ttft_p90_ms"`
	TTFTP99            *float64 `json:"ttft_p99_ms"`
	E2EP50             *float64 `json:"e2e_p50_ms"`
	E2EP99             *float64 `json:"e2e_p99_ms"`
	OutputTokensPerSec float64  `json:"output_tokens_per_s"`
	PrefixHitRatio     float64  `json:"prefix_hit_ratio"`
	// Failed and TimedOut count measured requests; Misses is their sum,
	// the requests the percentiles count at the client timeout.
	Failed   int `json:"failed"`
	TimedOut int `json:"timed_out"`
	Misses   int `json:"misses"`
	// Goodput is the measured requests that completed within SLO per
	// second of the window (null: not measured).
	Goodput *float64    `json:"goodput"`
	SLO     *SLOSummary `json:"slo,omitempty"`
	// BusiestPodShare is the busiest pod's share of the time-averaged load
	// (1/N when even); BusiestPodRatio its capacity-divided load ÷ the
	// pool's (1 when even).
	BusiestPodShare float64 `json:"busiest_pod_share"`
	BusiestPodRatio float64 `json:"busiest_pod_ratio"`
	Measured        int     `json:"measured"`
	WeightChanges   int     `json:"weight_changes"`
	WatchdogFreezes int     `json:"watchdog_freezes"`
	// CachedTokenRatio (prompt tokens the servers reported cached ÷
	// prompt tokens, of measured successful requests) and Errors
	// (measured failed requests by kind: http_<status>, cut_stream,
	// timeout, connect, canceled) are measured client side by trimtab
	// bench; the simulator writes null for both, and bench writes null
	// for the ratio when no server reported cached tokens.
	// PodLoad is each pod's time-averaged load (running + waiting) during
	// the window, in pod order.
	PodLoad []float64 `json:"pod_load,omitempty"`
	// Routers describes the router replicas of a multi-router run
	// (absent: one router).
	Routers          *RoutersSummary `json:"routers,omitempty"`
	CachedTokenRatio *float64        `json:"cached_token_ratio"`
	Errors           map[string]int  `json:"errors"`
	Phases           []PhaseSummary  `json:"phases"`

	// ContinuationHitRatio is the prompt tokens of measured session
	// continuations found in the prefix cache ÷ their prompt tokens
	// (agentic workloads; absent otherwise).
	ContinuationHitRatio *float64 `json:"continuation_hit_ratio,omitempty"`
	// HerdPicks counts picks whose calm choice was over the guard's bound
	// (simulator runs; absent when none).
	HerdPicks int64 `json:"herd_picks,omitempty"`
	// Retune is every run of the slow loop (a profile with retune.mode
	// apply), in order.
	Retune []RetuneSummary `json:"retune,omitempty"`
	// AdapterLoads counts LoRA adapters loaded into GPU slots during the
	// window, over all servers (absent when the engine models no
	// adapters).
	AdapterLoads *int64 `json:"adapter_loads,omitempty"`
	// Classes are the run's classes of request (workload.class, streams;
	// absent when the scenario names none).
	Classes []ClassSummary `json:"classes,omitempty"`
	// Calibration is what the (first) router's calibrator had learned of
	// each endpoint when the run ended, beside what the simulated engine
	// really does (simulator runs; absent from bench, which has no
	// ground truth: its router serves /debug/calibration).
	Calibration []CalibrationSummary `json:"calibration,omitempty"`
}

// CalibrationSummary is one endpoint's learned calibration at the end of
// a simulated run against its engine's true value
// (docs/calibration.md, "How close it gets").
type CalibrationSummary struct {
	Endpoint string `json:"endpoint"`
	// Source is what the published prefill throughput rests on: prior,
	// blended or learned; Pooled says it is the endpoint's class's fit
	// (fleet.EndpointCalibration).
	Source string `json:"source"`
	Pooled bool   `json:"pooled"`
	// PrefillTokensPerS is the published prefill throughput;
	// TruePrefillTokensPerS the engine's at MeanPromptTokens (null when
	// the endpoint was sent no request); Ratio the first over the second.
	PrefillTokensPerS     float64  `json:"prefill_tokens_per_s"`
	TruePrefillTokensPerS *float64 `json:"true_prefill_tokens_per_s"`
	Ratio                 *float64 `json:"ratio"`
	PrefillSamples        int      `json:"prefill_samples"`
	MeanPromptTokens      float64  `json:"mean_prompt_tokens"`
	// UncachedShare is the share of the prompt tokens the server had to
	// compute (1 when it reported none cached).
	UncachedShare float64 `json:"uncached_share"`
	// DecodeSecondsPerSeq is the published decode step slope: what each
	// running request adds to a step, its context included.
	DecodeSecondsPerSeq float64 `json:"decode_seconds_per_seq"`
	// DecodeFixedSeconds is the published decode step line's fixed part,
	// what a step costs whatever runs in it.
	DecodeFixedSeconds float64 `json:"decode_fixed_seconds"`
	// EngineDecode* are the published engine decode step line: fixed,
	// per sequence apart from its context, per context token
	// (fleet.EndpointCalibration's engine line).
	EngineDecodeFixedSeconds           float64 `json:"engine_decode_fixed_seconds"`
	EngineDecodeSecondsPerSeq          float64 `json:"engine_decode_seconds_per_seq"`
	EngineDecodeSecondsPerContextToken float64 `json:"engine_decode_seconds_per_context_token"`
	// EngineDecodeBatchSeconds is the per-sequence term as the trade
	// law's batch cost reads it (scheduler.Calibration's).
	EngineDecodeBatchSeconds float64 `json:"engine_decode_batch_seconds"`
}

// ClassSummary is one class of request in a run. Latencies and goodput
// cover its measured requests, misses included (see RunSummary); the
// counts cover all of its requests in the run, the warm-up included.
type ClassSummary struct {
	Name    string   `json:"name"`
	TTFTP50 *float64 `json:"ttft_p50_ms"`
	TTFTP99 *float64 `json:"ttft_p99_ms"`
	E2EP99  *float64 `json:"e2e_p99_ms"`
	Goodput *float64 `json:"goodput"`
	// ServerTTFTP99 is the p99 of the servers' own time to first token,
	// the failed and timed-out requests the router did not refuse counted
	// as in TTFTP99 (their TTFT, or the timeout without one), and
	// RouterTTFTP99 the p99 over completed requests of the client's TTFT
	// minus the server's: what lies in front of the servers (router,
	// proxy, network, the client). trimtab bench against trimtab
	// fakeservers, which report it for completion streams; nil when no
	// completed request of the class reported it.
	ServerTTFTP99 *float64 `json:"server_ttft_p99_ms,omitempty"`
	RouterTTFTP99 *float64 `json:"router_ttft_p99_ms,omitempty"`
	Measured      int      `json:"measured"`
	// Issued = Completed + Dropped (refused by flow control) + TimedOut
	// + Failed.
	Issued    int `json:"issued"`
	Completed int `json:"completed"`
	Dropped   int `json:"dropped"`
	TimedOut  int `json:"timed_out"`
	Failed    int `json:"failed"`
	// DropReasons splits Dropped by the router's X-Trimtab-Drop-Reason
	// (trimtab bench; nil in the simulator and when nothing was dropped).
	DropReasons map[string]int `json:"drop_reasons,omitempty"`
}

// RoutersSummary is Scenario.Routers in a run summary.
type RoutersSummary struct {
	Replicas int    `json:"replicas"`
	Spread   string `json:"spread"`
	Sync     bool   `json:"sync"`
	// SyncDelayMS and SyncIntervalMS are in milliseconds.
	SyncDelayMS    float64 `json:"sync_delay_ms"`
	SyncIntervalMS float64 `json:"sync_interval_ms"`
	// SyncPicks counts the picks the replicas shipped to each other.
	SyncPicks int `json:"sync_picks"`
}

// SLOSummary is the SLO goodput counts against, in milliseconds.
type SLOSummary struct {
	TTFTMS float64 `json:"ttft_ms"`
	TPOTMS float64 `json:"tpot_ms"`
}

// SummaryOf returns slo for a run summary.
func SummaryOf(slo scenario.SLO) *SLOSummary {
	return &SLOSummary{TTFTMS: msec(slo.TTFT), TPOTMS: msec(slo.TPOT)}
}

// PhaseSummary is one phase of a run. Names starting with "calm" are calm
// phases.
type PhaseSummary struct {
	Name             string `json:"name"`
	RebalanceEntries int    `json:"rebalance_entries"`
	// WarmupRebalanceEntries are entries before the measured window
	// (the cold start of every client at once), not counted above.
	WarmupRebalanceEntries int      `json:"warmup_rebalance_entries"`
	TTFTP50                *float64 `json:"ttft_p50_ms"`
	TTFTP99                *float64 `json:"ttft_p99_ms"`
	E2EP99                 *float64 `json:"e2e_p99_ms"`
	OutputTokensPerSec     float64  `json:"output_tokens_per_s"`
	Measured               int      `json:"measured"`
	// Misses are the phase's measured requests that failed or timed out;
	// Goodput its requests within SLO per second of its part of the
	// window.
	Misses  int      `json:"misses"`
	Goodput *float64 `json:"goodput"`
	// OnsetBusiestRatio: the busiest pod's time-averaged capacity-divided
	// load over the phase's first two seconds ÷ the pool's.
	OnsetBusiestRatio float64 `json:"onset_busiest_ratio"`
}

// ms returns a pointer to v, or nil when v is NaN (no samples).
func Opt(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

// Write writes f as indented JSON.
func (f *SummaryFile) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(f)
}

// WriteFile writes the summary to path as Write does, atomically (a
// reader never sees half a file), so it can be rewritten after every
// scenario.
func (f *SummaryFile) WriteFile(path string) error { return WriteFile(path, f.Write) }

// WriteFile writes path with fn through a temporary file renamed into
// place, so a reader sees the old file or the whole new one.
func WriteFile(path string, fn func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	werr := fn(f)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(tmp)
		return werr
	}
	return os.Rename(tmp, path)
}

// RetuneSummary is one run of the slow loop in a simulated run: when, its
// decision and reason, the window it replayed, and the calm weights it
// applied (apply only).
type RetuneSummary struct {
	AtSeconds float64   `json:"at_s"`
	Action    string    `json:"action"`
	Reason    string    `json:"reason"`
	Requests  int       `json:"requests"`
	To        []float64 `json:"to,omitempty"`
}
