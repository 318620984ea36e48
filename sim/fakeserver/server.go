package fakeserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/sim/engine"
)

// BytesPerToken is the prompt bytes counted as one token.
const BytesPerToken = 4

// Config configures one fake server.
type Config struct {
	// Model is the served model name (default "llama-3.1-8b-instruct").
	Model string `mapstructure:"model"`
	// Name labels the server in the X-Fakeserver-Name response header
	// (default: none).
	Name string `mapstructure:"name"`
	// TimeScale speeds the model up: 10 runs ten times faster than the
	// modelled GPU. Default 1. Must be > 0.
	TimeScale float64 `mapstructure:"time_scale"`
	// DefaultMaxTokens is the output length when a request sets no
	// max_tokens (default 128).
	DefaultMaxTokens int `mapstructure:"default_max_tokens"`
	// MaxTokensLimit caps max_tokens (default 4096).
	MaxTokensLimit int `mapstructure:"max_tokens_limit"`
	// Engine is the engine model (default engine.DefaultConfig()).
	Engine engine.Config `mapstructure:"engine"`
	// Adapters are the LoRA adapters served on top of Model (vLLM
	// --lora-modules): a request naming one as its model runs with it,
	// in the engine's adapter slots when Engine.MaxLoRAs > 0. At most
	// MaxAdapters names of at most 256 bytes.
	Adapters []string `mapstructure:"adapters"`
}

// MaxAdapters bounds Config.Adapters.
const MaxAdapters = 1024

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Model:            "llama-3.1-8b-instruct",
		TimeScale:        1,
		DefaultMaxTokens: 128,
		MaxTokensLimit:   4096,
		Engine:           engine.DefaultConfig(),
	}
}

// Validate checks the config.
func (c Config) Validate() error {
	switch {
	case c.Model == "":
		return errors.New("fakeserver.model: must be set")
	case !(c.TimeScale > 0) || math.IsInf(c.TimeScale, 0):
		return fmt.Errorf("fakeserver.time_scale: must be a finite number > 0, got %v", c.TimeScale)
	case c.DefaultMaxTokens < 1:
		return errors.New("fakeserver.default_max_tokens: must be ≥ 1")
	case c.MaxTokensLimit < c.DefaultMaxTokens:
		return errors.New("fakeserver.max_tokens_limit: must be ≥ default_max_tokens")
	case len(c.Adapters) > MaxAdapters:
		return fmt.Errorf("fakeserver.adapters: %d adapters, at most %d", len(c.Adapters), MaxAdapters)
	}
	for i, a := range c.Adapters {
		if a == "" || len(a) > 256 || a == c.Model || slices.Contains(c.Adapters[:i], a) {
			return fmt.Errorf("fakeserver.adapters[%d]: %q must be a distinct name of 1…256 bytes other than the model", i, a)
		}
	}
	return c.Engine.Validate()
}

// Deps are the server's collaborators.
type Deps struct {
	// Clock times the engine's steps; nil means clock.RealClock{}.
	Clock clock.Clock
	// Logger receives start/stop messages; nil discards.
	Logger *slog.Logger
	// Responses stores Responses API conversations for
	// previous_response_id; a fleet shares one. Nil: a store of the
	// server's own with the default bounds.
	Responses *ResponseStore
}

// Server is one fake vLLM server. Handler may be mounted anywhere; Run
// must be running for requests to make progress.
type Server struct {
	cfg   Config
	clk   clock.Clock
	log   *slog.Logger
	start time.Time
	reg   *prometheus.Registry
	mux   *http.ServeMux
	store *ResponseStore

	mu    sync.Mutex
	eng   *engine.Engine
	wake  chan struct{}
	ids   atomic.Uint64
	succ  int64
	abort int64
}

// New builds a server.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	eng, err := engine.New(cfg.Engine, engine.WithTokenEvents())
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, clk: deps.Clock, log: deps.Logger, eng: eng, wake: make(chan struct{}, 1), store: deps.Responses}
	if s.store == nil {
		s.store, _ = NewResponseStore(DefaultStoredResponses, DefaultStoredBytes)
	}
	if s.clk == nil {
		s.clk = clock.RealClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.start = s.clk.Now()
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(&collector{s: s})
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("POST /v1/responses", s.handleResponses)
	s.mux.HandleFunc("POST /v1/messages", s.handleMessages)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	return s, nil
}

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler { return s.mux }

// vnow is the engine's virtual time: wall time since New × time scale.
func (s *Server) vnow() time.Duration {
	return time.Duration(float64(s.clk.Since(s.start)) * s.cfg.TimeScale)
}

// Run steps the engine until ctx is done; it returns ctx.Err(). Only one
// Run may be active per Server.
func (s *Server) Run(ctx context.Context) error {
	for {
		s.mu.Lock()
		d, ok := s.eng.StartStep()
		s.mu.Unlock()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		t := s.clk.NewTimer(time.Duration(float64(d) / s.cfg.TimeScale))
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		s.mu.Lock()
		s.eng.FinishStep(s.vnow(), deliver)
		s.mu.Unlock()
	}
}

// Serve runs the engine and an HTTP server on ln until ctx is done, then
// shuts the HTTP server down (waiting up to 5 s for open requests) and
// returns after both have stopped.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(runCtx) }()
	httpDone := make(chan error, 1)
	go func() { httpDone <- hs.Serve(ln) }()
	s.log.Info("fake vLLM server listening", "addr", ln.Addr().String(), "model", s.cfg.Model, "time_scale", s.cfg.TimeScale)
	var err error
	select {
	case <-ctx.Done():
	case err = <-httpDone:
		httpDone <- err
	}
	shCtx, shCancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer shCancel()
	_ = hs.Shutdown(shCtx) // the engine keeps running so open requests can finish
	if herr := <-httpDone; err == nil && !errors.Is(herr, http.ErrServerClosed) {
		err = herr
	}
	cancel()
	<-runDone
	return err
}

// request is one HTTP request in the engine.
type request struct {
	seq    engine.Seq
	events chan tokenEvent
	// arrived is when the handler began reading the request and firstAt
	// when its first token was written (zero: not yet; streams only):
	// the server's own time to first token, which a stream's usage chunk
	// reports (usage.go) so a client can tell the server's share of its
	// TTFT from what lies in front of the server.
	arrived, firstAt time.Time
}

// tokenEvent is an engine event with the number of tokens generated so
// far (the first-token event of a one-token output and its finish event
// both carry 1).
type tokenEvent struct {
	kind      engine.EventKind
	generated int
}

// deliver hands an engine event to its request; the channel has room for
// every event the sequence can produce, so this never blocks.
func deliver(ev engine.Event) {
	ev.Seq.Data.(*request).events <- tokenEvent{ev.Kind, ev.Seq.Generated}
}

// adapterFor resolves a request's model: "" for the base model (or no
// model named), the adapter's name for one of Config.Adapters; ok is
// false for anything else.
func (s *Server) adapterFor(model string) (lora string, ok bool) {
	if model == "" || model == s.cfg.Model {
		return "", true
	}
	return model, slices.Contains(s.cfg.Adapters, model)
}

// submit adds a request for prompt with maxTokens output tokens, run
// with adapter lora ("" for the base model).
func (s *Server) submit(prompt []byte, maxTokens int, lora string) (*request, error) {
	r := &request{events: make(chan tokenEvent, maxTokens+1)}
	r.seq.ID = s.ids.Add(1)
	r.seq.PromptTokens = max(1, (len(prompt)+BytesPerToken-1)/BytesPerToken)
	r.seq.OutputTokens = maxTokens
	r.seq.Hashes = engine.HashBlocks(nil, prompt, s.cfg.Engine.BlockSize*BytesPerToken)
	if lora != "" {
		// vLLM keys cached blocks by adapter.
		salt := xxhash.Sum64String(lora)
		for i := range r.seq.Hashes {
			r.seq.Hashes[i] ^= salt
		}
		r.seq.LoRA = lora
	}
	r.seq.Data = r
	s.mu.Lock()
	err := s.eng.Add(&r.seq)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return r, nil
}

func (s *Server) cancel(r *request) {
	s.mu.Lock()
	if r.seq.Active() {
		s.eng.Abort(&r.seq)
		s.abort++
	}
	s.mu.Unlock()
}

func (s *Server) finished() {
	s.mu.Lock()
	s.succ++
	s.mu.Unlock()
}

// collector exports the engine's state under vLLM's metric names at scrape
// time.
type collector struct{ s *Server }

var (
	descRunning  = prometheus.NewDesc("vllm:num_requests_running", "Number of requests in model execution batches.", []string{"model_name"}, nil)
	descWaiting  = prometheus.NewDesc("vllm:num_requests_waiting", "Number of requests waiting to be processed.", []string{"model_name"}, nil)
	descKV       = prometheus.NewDesc("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", []string{"model_name"}, nil)
	descKVOld    = prometheus.NewDesc("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage (pre-V1 name).", []string{"model_name"}, nil)
	descQueries  = prometheus.NewDesc("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", []string{"model_name"}, nil)
	descHits     = prometheus.NewDesc("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", []string{"model_name"}, nil)
	descPrompt   = prometheus.NewDesc("vllm:prompt_tokens_total", "Number of prefill tokens processed.", []string{"model_name"}, nil)
	descGen      = prometheus.NewDesc("vllm:generation_tokens_total", "Number of generation tokens processed.", []string{"model_name"}, nil)
	descPreempt  = prometheus.NewDesc("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", []string{"model_name"}, nil)
	descSuccess  = prometheus.NewDesc("vllm:request_success_total", "Count of successfully processed requests.", []string{"model_name", "finished_reason"}, nil)
	descCacheCfg = prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", []string{"block_size", "num_gpu_blocks", "enable_prefix_caching"}, nil)
	// The adapter gauges of vllm-project/vllm#54830 and the older info
	// gauge, exported when the engine models adapter slots.
	descLoRALoaded = prometheus.NewDesc("vllm:lora_adapter_loaded", "LoRA adapter loaded, by cache level.", []string{"model_name", "adapter_name", "level", "pinned"}, nil)
	descLoRAGPU    = prometheus.NewDesc("vllm:num_gpu_loaded_lora_adapters", "Number of LoRA adapters loaded in GPU slots.", []string{"model_name"}, nil)
	descLoRACPU    = prometheus.NewDesc("vllm:num_cpu_loaded_lora_adapters", "Number of LoRA adapters in the CPU cache only.", []string{"model_name"}, nil)
	descLoRASlots  = prometheus.NewDesc("vllm:max_gpu_lora_adapters", "Number of GPU LoRA adapter slots.", []string{"model_name"}, nil)
	descLoRAInfo   = prometheus.NewDesc("vllm:lora_requests_info", "Running stats on lora requests (deprecated).", []string{"max_lora", "running_lora_adapters", "waiting_lora_adapters"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descKV, descKVOld, descQueries, descHits, descPrompt, descGen, descPreempt, descSuccess, descCacheCfg,
		descLoRALoaded, descLoRAGPU, descLoRACPU, descLoRASlots, descLoRAInfo} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	st := s.eng.Stats()
	var ad engine.AdapterState
	lora := s.cfg.Engine.MaxLoRAs > 0
	if lora {
		ad = s.eng.Adapters()
	}
	succ, aborted := s.succ, s.abort
	s.mu.Unlock()
	m := s.cfg.Model
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(st.Running), m)
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(st.Waiting), m)
	ch <- prometheus.MustNewConstMetric(descKV, prometheus.GaugeValue, st.KVUtil, m)
	ch <- prometheus.MustNewConstMetric(descKVOld, prometheus.GaugeValue, st.KVUtil, m)
	ch <- prometheus.MustNewConstMetric(descQueries, prometheus.CounterValue, float64(st.PrefixQueries), m)
	ch <- prometheus.MustNewConstMetric(descHits, prometheus.CounterValue, float64(st.PrefixHits), m)
	ch <- prometheus.MustNewConstMetric(descPrompt, prometheus.CounterValue, float64(st.PromptTokens), m)
	ch <- prometheus.MustNewConstMetric(descGen, prometheus.CounterValue, float64(st.GenerationTokens), m)
	ch <- prometheus.MustNewConstMetric(descPreempt, prometheus.CounterValue, float64(st.Preemptions), m)
	ch <- prometheus.MustNewConstMetric(descSuccess, prometheus.CounterValue, float64(succ), m, "length")
	ch <- prometheus.MustNewConstMetric(descSuccess, prometheus.CounterValue, float64(aborted), m, "abort")
	ch <- prometheus.MustNewConstMetric(descCacheCfg, prometheus.GaugeValue, 1,
		strconv.Itoa(st.BlockSize), strconv.Itoa(st.NumBlocks), strconv.FormatBool(s.cfg.Engine.PrefixCaching))
	if !lora {
		return
	}
	for _, a := range ad.GPU {
		ch <- prometheus.MustNewConstMetric(descLoRALoaded, prometheus.GaugeValue, 1, m, a, "gpu", "false")
	}
	for _, a := range ad.CPU {
		ch <- prometheus.MustNewConstMetric(descLoRALoaded, prometheus.GaugeValue, 1, m, a, "cpu", "false")
	}
	ch <- prometheus.MustNewConstMetric(descLoRAGPU, prometheus.GaugeValue, float64(len(ad.GPU)), m)
	ch <- prometheus.MustNewConstMetric(descLoRACPU, prometheus.GaugeValue, float64(len(ad.CPU)), m)
	ch <- prometheus.MustNewConstMetric(descLoRASlots, prometheus.GaugeValue, float64(ad.Slots), m)
	// The info gauge's value is the time of the report.
	ch <- prometheus.MustNewConstMetric(descLoRAInfo, prometheus.GaugeValue, float64(s.clk.Now().Unix()),
		strconv.Itoa(ad.Slots), strings.Join(ad.Running, ","), strings.Join(ad.Waiting, ","))
}
