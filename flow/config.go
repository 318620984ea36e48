package flow

import (
	"fmt"
	"strings"
	"time"
)

// Default band names. A request's band is one of Config.Bands; these are
// the three the default configuration has, highest priority first.
const (
	BandInteractive = "interactive"
	BandStandard    = "standard"
	BandSheddable   = "sheddable"
)

// Headers flow control reads (lower case, as HTTP/2 and ext_proc carry
// them). A header names a band; the TTL headers carry a duration ("250ms",
// "2s") or a number of seconds ("2", "0.5").
const (
	HeaderPriority = "x-trimtab-priority"
	HeaderTTL      = "x-trimtab-ttl"
	HeaderLLMDTTL  = "x-llm-d-inference-ttl"
	// HeaderDropReason is set on every answer flow control refuses, with
	// one of the Reason values.
	HeaderDropReason = "X-Trimtab-Drop-Reason"
)

// BandConfig is one priority band.
type BandConfig struct {
	// Name identifies the band in the priority header, model_bands,
	// metrics and the simulator's workload (lower-case letters, digits,
	// '-' and '_').
	Name string `mapstructure:"name"`
	// TTL bounds how long a request of this band waits in the router's
	// queue (0: only the global and request TTLs apply).
	TTL time.Duration `mapstructure:"ttl"`
	// Sheddable bands give up their queued requests first when the queue
	// is full: a full queue drops the latest deadline of the lowest
	// sheddable band to make room for a request of a higher band.
	Sheddable bool `mapstructure:"sheddable"`
	// MaxWait is this band's prefill budget: an endpoint whose pending
	// prefill wait (Detector.Wait) is at least this is saturated for the
	// band's requests. At most the budget of the band above, so a lower
	// band fills an endpoint to a shorter wait and leaves the rest to the
	// higher ones (0: the band above's, or saturation.max_wait for the
	// first band).
	MaxWait time.Duration `mapstructure:"max_wait"`
	// Threshold is the share of an endpoint's KV capacity this band's
	// requests may fill (the KV bound, SaturationConfig.Threshold, for
	// this band), in (0,1]; at most the band above's, so the higher
	// bands keep the rest (0: the band above's, or saturation.threshold
	// for the first band).
	Threshold float64 `mapstructure:"threshold"`
	// Reserve is how many eligible endpoints this band leaves to the
	// bands above: an endpoint carrying none of the router's requests of
	// this band or a lower one is clear, and this band's requests go to a
	// clear endpoint only while more than Reserve of them (at most the
	// eligible endpoints − 1) have room (0: none kept). The reserve is
	// sticky: the clear endpoints stay clear while the band's work runs
	// on the others. Not for the first band. A reserve above the eligible
	// endpoints − 1 keeps all but one clear: the band runs on as few
	// endpoints as it can, as batch work whose deadline is far should.
	Reserve int `mapstructure:"reserve"`
	// ReserveRelease (reserve_release, in [0,1)) lifts the reserve for a
	// request once less than this share of its TTL is left, so work kept
	// to a few endpoints still meets its deadline: a queued batch request
	// that has waited half its TTL (0.5) may use any endpoint with room.
	// 0 (the default): the reserve always holds.
	ReserveRelease float64 `mapstructure:"reserve_release"`
}

// SaturationConfig says when an endpoint has no room for another request.
// An endpoint is saturated when the router's own opinion (its pending
// prefill wait against the band's budget, or its tokens in flight against
// its KV capacity) or, with fresh metrics, the scraped one says so; with
// none of them (no rate or capacity known and stale metrics) it is not:
// flow control fails open.
type SaturationConfig struct {
	// MaxWait is the first band's prefill budget, the pending prefill
	// wait at which an endpoint is saturated (default 2s; bands below
	// have their own, BandConfig.MaxWait).
	MaxWait time.Duration `mapstructure:"max_wait"`
	// PrefillTokensPerSecond is an endpoint's prefill rate per unit of
	// Endpoint.Capacity, used to turn its pending prefill tokens into a
	// wait when the endpoint has no learned rate
	// (Calibration.PrefillTokensPerSecond); default 13,100, the
	// calibrator's prior. 0: no prior, the wait is only known once
	// learned.
	PrefillTokensPerSecond float64 `mapstructure:"prefill_tokens_per_second"`
	// CapacityTokens is an endpoint's token capacity (uncached prompt
	// plus output tokens of the requests it holds at once) per unit of
	// Endpoint.Capacity, used when the endpoint has no learned KV capacity
	// (Calibration.KVCapacityTokens). 0: no configured capacity.
	CapacityTokens float64 `mapstructure:"capacity_tokens"`
	// Threshold is the share of the capacity in flight at which the
	// router holds further requests, in (0,1] (default 0.8, the KV-cache
	// threshold of llm-d's utilisation detector).
	Threshold float64 `mapstructure:"threshold"`
	// MaxInFlight, when positive, also saturates an endpoint holding this
	// many of the router's requests per unit of Endpoint.Capacity (llm-d's
	// concurrency detector). 0: off.
	MaxInFlight int `mapstructure:"max_in_flight"`
	// QueueDepth saturates an endpoint whose fresh scraped waiting count
	// is at least this (default 5, llm-d's queue-depth threshold). 0: off.
	QueueDepth float64 `mapstructure:"queue_depth"`
	// KVUtil saturates an endpoint whose fresh scraped KV-cache
	// utilisation is at least this, in (0,1] (default 0.8, llm-d's). 0: off.
	KVUtil float64 `mapstructure:"kv_util"`
	// MaxAge is how old scraped metrics may be to count (default 1s);
	// older ones are ignored, so a pool whose scrapes stop is not held.
	MaxAge time.Duration `mapstructure:"max_age"`
	// OutputTokens is the output a request is charged for when it does
	// not say (default 256); BytesPerToken converts prompt bytes to tokens
	// (default 4, the usual ratio for English text with BPE tokenisers).
	OutputTokens  int     `mapstructure:"output_tokens"`
	BytesPerToken float64 `mapstructure:"bytes_per_token"`
}

// Config is the flow: section of a profile.
type Config struct {
	// Enabled turns flow control on. Off, the proxy calls the scheduler
	// directly and flow control costs nothing.
	Enabled bool `mapstructure:"enabled"`
	// Bands, highest priority first (default interactive, standard,
	// sheddable; sheddable has Sheddable set).
	Bands []BandConfig `mapstructure:"bands"`
	// DefaultBand is the band of a request nothing else classifies
	// (default standard).
	DefaultBand string `mapstructure:"default_band"`
	// PriorityHeader names the header that picks a band by name (default
	// x-trimtab-priority; "" ignores it). The gateway in front must set or
	// strip it: a client that can send it can claim any band.
	PriorityHeader string `mapstructure:"priority_header"`
	// TenantHeader names a header, set by the gateway after
	// authentication, that carries the tenant ("" by default: the tenant
	// is the API key's, a hash of the Authorization bearer token).
	TenantHeader string `mapstructure:"tenant_header"`
	// ModelBands maps a model name to a band, for requests the header
	// does not classify.
	ModelBands map[string]string `mapstructure:"model_bands"`
	// TTL bounds every request's wait in the queue (default 30s). A
	// request's TTL is the minimum of this, its band's and its own
	// (x-trimtab-ttl or x-llm-d-inference-ttl).
	TTL time.Duration `mapstructure:"ttl"`
	// MaxQueue bounds the requests waiting in the router (default 1024).
	MaxQueue int `mapstructure:"max_queue"`
	// Poll is how often the dispatcher re-checks saturation while
	// requests wait, besides the completions that wake it (default 10ms).
	Poll time.Duration `mapstructure:"poll"`
	// MetricTenants is how many tenants get a label of their own in the
	// metrics (default 16); the rest are counted as "other".
	MetricTenants int `mapstructure:"metric_tenants"`
	// Saturation says when an endpoint is full.
	Saturation SaturationConfig `mapstructure:"saturation"`
}

// DefaultConfig returns flow control off with the defaults above.
func DefaultConfig() Config {
	return Config{
		Bands: []BandConfig{
			{Name: BandInteractive},
			{Name: BandStandard, MaxWait: time.Second},
			{Name: BandSheddable, Sheddable: true, MaxWait: 25 * time.Millisecond, Threshold: 0.5, Reserve: 1},
		},
		DefaultBand:    BandStandard,
		PriorityHeader: HeaderPriority,
		TTL:            30 * time.Second,
		MaxQueue:       1024,
		Poll:           10 * time.Millisecond,
		MetricTenants:  16,
		Saturation: SaturationConfig{
			MaxWait: 2 * time.Second, PrefillTokensPerSecond: 13100,
			Threshold: 0.8, QueueDepth: 5, KVUtil: 0.8, MaxAge: time.Second,
			OutputTokens: 256, BytesPerToken: 4,
		},
	}
}

// Validate checks the config; errors name the key under flow.
func (c Config) Validate() error {
	if len(c.Bands) == 0 || len(c.Bands) > 16 {
		return fmt.Errorf("flow.bands: %d bands, want 1 … 16", len(c.Bands))
	}
	seen := map[string]bool{}
	for i, b := range c.Bands {
		if !validName(b.Name) {
			return fmt.Errorf("flow.bands[%d].name: %q, want 1 … 32 of a-z, 0-9, '-' and '_'", i, b.Name)
		}
		if seen[b.Name] {
			return fmt.Errorf("flow.bands[%d].name: %q appears twice", i, b.Name)
		}
		seen[b.Name] = true
		if b.TTL < 0 || b.TTL > 24*time.Hour {
			return fmt.Errorf("flow.bands[%d].ttl: %v, want 0 … 24h", i, b.TTL)
		}
		if b.MaxWait < 0 || b.MaxWait > time.Hour {
			return fmt.Errorf("flow.bands[%d].max_wait: %v, want 0 (the band above's) … 1h", i, b.MaxWait)
		}
		if b.Threshold < 0 || b.Threshold > 1 {
			return fmt.Errorf("flow.bands[%d].threshold: %v, want 0 (the band above's) … 1", i, b.Threshold)
		}
		if b.Reserve < 0 || b.Reserve > 1000 || i == 0 && b.Reserve > 0 {
			return fmt.Errorf("flow.bands[%d].reserve: %d, want 0 … 1000, and 0 for the first band (no band above it)", i, b.Reserve)
		}
		if !(b.ReserveRelease >= 0 && b.ReserveRelease < 1) {
			return fmt.Errorf("flow.bands[%d].reserve_release: %v, want a share of the TTL in [0, 1) (0: the reserve always holds)", i, b.ReserveRelease)
		}
	}
	if !seen[c.DefaultBand] {
		return fmt.Errorf("flow.default_band: %q is not one of flow.bands", c.DefaultBand)
	}
	for m, b := range c.ModelBands {
		if !seen[b] {
			return fmt.Errorf("flow.model_bands[%s]: %q is not one of flow.bands", m, b)
		}
	}
	if len(c.PriorityHeader) > 64 || len(c.TenantHeader) > 64 {
		return fmt.Errorf("flow.priority_header, flow.tenant_header: at most 64 bytes")
	}
	if c.TTL <= 0 || c.TTL > 24*time.Hour {
		return fmt.Errorf("flow.ttl: %v, want more than 0, at most 24h", c.TTL)
	}
	if c.MaxQueue < 1 || c.MaxQueue > 1<<20 {
		return fmt.Errorf("flow.max_queue: %d, want 1 … 1048576", c.MaxQueue)
	}
	if c.Poll < time.Millisecond || c.Poll > time.Second {
		return fmt.Errorf("flow.poll: %v, want 1ms … 1s", c.Poll)
	}
	if c.MetricTenants < 0 || c.MetricTenants > 1000 {
		return fmt.Errorf("flow.metric_tenants: %d, want 0 … 1000", c.MetricTenants)
	}
	s := c.Saturation
	if s.MaxWait <= 0 || s.MaxWait > time.Hour {
		return fmt.Errorf("flow.saturation.max_wait: %v, want more than 0, at most 1h", s.MaxWait)
	}
	switch {
	case s.PrefillTokensPerSecond < 0 || s.PrefillTokensPerSecond > 1e9:
		return fmt.Errorf("flow.saturation.prefill_tokens_per_second: %v, want 0 (none) … 1e9", s.PrefillTokensPerSecond)
	case s.CapacityTokens < 0 || s.CapacityTokens > 1e9:
		return fmt.Errorf("flow.saturation.capacity_tokens: %v, want 0 (none) … 1e9", s.CapacityTokens)
	case !(s.Threshold > 0 && s.Threshold <= 1):
		return fmt.Errorf("flow.saturation.threshold: %v, want more than 0, at most 1", s.Threshold)
	case s.MaxInFlight < 0 || s.MaxInFlight > 1e6:
		return fmt.Errorf("flow.saturation.max_in_flight: %d, want 0 (off) … 1000000", s.MaxInFlight)
	case s.QueueDepth < 0 || s.QueueDepth > 1e6:
		return fmt.Errorf("flow.saturation.queue_depth: %v, want 0 (off) … 1e6", s.QueueDepth)
	case s.KVUtil < 0 || s.KVUtil > 1:
		return fmt.Errorf("flow.saturation.kv_util: %v, want 0 (off) … 1", s.KVUtil)
	case s.MaxAge <= 0 || s.MaxAge > time.Hour:
		return fmt.Errorf("flow.saturation.max_age: %v, want more than 0, at most 1h", s.MaxAge)
	case s.OutputTokens < 0 || s.OutputTokens > 1<<20:
		return fmt.Errorf("flow.saturation.output_tokens: %d, want 0 … 1048576", s.OutputTokens)
	case !(s.BytesPerToken >= 1 && s.BytesPerToken <= 16):
		return fmt.Errorf("flow.saturation.bytes_per_token: %v, want 1 … 16", s.BytesPerToken)
	}
	w, th := c.Budgets(), c.Thresholds()
	for i := 1; i < len(w); i++ {
		if w[i] > w[i-1] {
			return fmt.Errorf("flow.bands[%d].max_wait: %v is more than the band above's %v; a lower band's budget must not exceed a higher one's", i, w[i], w[i-1])
		}
		if th[i] > th[i-1] {
			return fmt.Errorf("flow.bands[%d].threshold: %v is more than the band above's %v; a lower band must not fill more of the KV cache than a higher one", i, th[i], th[i-1])
		}
	}
	return nil
}

// Budgets returns each band's prefill budget: its max_wait, else the band
// above's, else (the first band) saturation.max_wait.
func (c Config) Budgets() []time.Duration {
	w := make([]time.Duration, len(c.Bands))
	for i, b := range c.Bands {
		switch {
		case b.MaxWait > 0:
			w[i] = b.MaxWait
		case i == 0:
			w[i] = c.Saturation.MaxWait
		default:
			w[i] = w[i-1]
		}
	}
	return w
}

// Thresholds returns each band's share of the KV capacity: its
// threshold, else the band above's, else (the first band)
// saturation.threshold.
func (c Config) Thresholds() []float64 {
	th := make([]float64, len(c.Bands))
	for i, b := range c.Bands {
		switch {
		case b.Threshold > 0:
			th[i] = b.Threshold
		case i == 0:
			th[i] = c.Saturation.Threshold
		default:
			th[i] = th[i-1]
		}
	}
	return th
}

func validName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) < 0
}
