package fleet

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Discovery modes (endpoints.mode).
const (
	ModeStatic         = "static"
	ModePods           = "pods"
	ModeEndpointSlices = "endpointslices"
	ModeInferencePool  = "inferencepool"
)

// Config is the fleet's configuration: the endpoints: and scrape: sections.
type Config struct {
	Endpoints EndpointsConfig `mapstructure:"endpoints"`
	Scrape    ScrapeConfig    `mapstructure:"scrape"`
}

// EndpointsConfig says how endpoints are discovered (YAML section
// endpoints:).
type EndpointsConfig struct {
	// Mode is static, pods, endpointslices or inferencepool.
	Mode string `mapstructure:"mode"`
	// File is the static endpoints file (mode static).
	File string `mapstructure:"file"`
	// ReloadInterval is how often the static file is re-read even without
	// a file-system event (default 10s).
	ReloadInterval time.Duration `mapstructure:"reload_interval"`
	// Namespace of the pods, Service or InferencePool (Kubernetes modes;
	// required).
	Namespace string `mapstructure:"namespace"`
	// Selector is the pod label selector (mode pods), e.g. "app=vllm".
	Selector string `mapstructure:"selector"`
	// Service is the Service whose EndpointSlices are read (mode
	// endpointslices).
	Service string `mapstructure:"service"`
	// Pool is the InferencePool name (mode inferencepool).
	Pool string `mapstructure:"pool"`
	// TargetPort is the model-server port (modes pods and endpointslices;
	// for endpointslices 0 takes the slice's first port). InferencePool
	// takes its ports from spec.targetPorts.
	TargetPort int `mapstructure:"target_port"`
	// Models every discovered endpoint serves (Kubernetes modes); a pod
	// annotation trimtab.io/models (comma-separated) overrides it. Empty
	// means any model.
	Models []string `mapstructure:"models"`
	// Kubeconfig is an optional kubeconfig path; empty means in-cluster
	// (used by NewKubeClients, called from cmd).
	Kubeconfig string `mapstructure:"kubeconfig"`
	// Resync is the informers' resync period (default 30s).
	Resync time.Duration `mapstructure:"resync"`
}

// ScrapeConfig says how model servers are scraped (YAML section scrape:).
type ScrapeConfig struct {
	// Interval between scrapes of one endpoint (default 50ms).
	Interval time.Duration `mapstructure:"interval"`
	// Timeout of one scrape (default 200ms).
	Timeout time.Duration `mapstructure:"timeout"`
	// MaxAge is how old metrics may be before the endpoint is stale;
	// 0 means 4 × Interval.
	MaxAge time.Duration `mapstructure:"max_age"`
	// MaxBodyBytes caps a response body (default 4 MiB); a larger body is
	// cut off unread and counted as too_large.
	MaxBodyBytes int64 `mapstructure:"max_body_bytes"`
	// Concurrency bounds the scrapes in flight at once (default 64).
	Concurrency int `mapstructure:"concurrency"`
	// Engine is the pool's default engine: vllm, sglang, trtllm or tgi
	// (default vllm). A target may name its own engine.
	Engine string `mapstructure:"engine"`
	// Metrics overrides fields of the default engine's mapping.
	Metrics Mapping `mapstructure:"metrics"`
	// Path is the metrics path (default /metrics).
	Path string `mapstructure:"path"`
	// Port, when non-zero, is scraped instead of the endpoint's port
	// (for servers that export metrics on a separate port).
	Port int `mapstructure:"port"`
	// UnhealthyAfter consecutive failed scrapes (timeouts, refused
	// connections, HTTP errors) back an endpoint's scrapes off and, unless
	// they were timeouts, mark it unhealthy (default 3).
	UnhealthyAfter int `mapstructure:"unhealthy_after"`
	// MaxBackoff caps the retry delay of an unhealthy endpoint, which
	// doubles from 2 × Interval on every further failure (default 5s).
	MaxBackoff time.Duration `mapstructure:"max_backoff"`
}

// DefaultConfig returns the defaults: static discovery, vLLM metrics every
// 50 ms.
func DefaultConfig() Config {
	return Config{
		Endpoints: EndpointsConfig{
			Mode:           ModeStatic,
			ReloadInterval: 10 * time.Second,
			Resync:         30 * time.Second,
		},
		Scrape: ScrapeConfig{
			Interval:       50 * time.Millisecond,
			Timeout:        200 * time.Millisecond,
			MaxBodyBytes:   4 << 20,
			Concurrency:    64,
			Engine:         EngineVLLM,
			Path:           "/metrics",
			UnhealthyAfter: 3,
			MaxBackoff:     5 * time.Second,
		},
	}
}

// Validate checks the config; errors name the offending field.
func (c Config) Validate() error {
	return errors.Join(c.Endpoints.Validate(), c.Scrape.Validate())
}

// Validate checks the endpoints section.
func (c EndpointsConfig) Validate() error {
	var errs []error
	bad := func(field, msg string, args ...any) {
		errs = append(errs, fmt.Errorf("endpoints.%s: %s", field, fmt.Sprintf(msg, args...)))
	}
	k8s := false
	switch c.Mode {
	case ModeStatic:
		if c.File == "" {
			bad("file", "required in mode static")
		}
		if c.ReloadInterval <= 0 {
			bad("reload_interval", "must be > 0")
		}
	case ModePods:
		k8s = true
		if c.Selector == "" {
			bad("selector", "required in mode pods")
		} else if _, err := labels.Parse(c.Selector); err != nil {
			bad("selector", "%v", err)
		}
		if c.TargetPort <= 0 {
			bad("target_port", "required in mode pods")
		}
	case ModeEndpointSlices:
		k8s = true
		if c.Service == "" {
			bad("service", "required in mode endpointslices")
		}
	case ModeInferencePool:
		k8s = true
		if c.Pool == "" {
			bad("pool", "required in mode inferencepool")
		}
	default:
		bad("mode", "%q, want static, pods, endpointslices or inferencepool", c.Mode)
	}
	if k8s {
		if c.Namespace == "" {
			bad("namespace", "required in mode %s", c.Mode)
		}
		if c.Resync <= 0 {
			bad("resync", "must be > 0")
		}
	}
	if c.TargetPort < 0 || c.TargetPort > 65535 {
		bad("target_port", "%d out of range 0…65535", c.TargetPort)
	}
	for i, m := range c.Models {
		if m == "" {
			bad(fmt.Sprintf("models[%d]", i), "empty model name")
		}
	}
	return errors.Join(errs...)
}

// Validate checks the scrape section.
func (c ScrapeConfig) Validate() error {
	var errs []error
	bad := func(field, msg string, args ...any) {
		errs = append(errs, fmt.Errorf("scrape.%s: %s", field, fmt.Sprintf(msg, args...)))
	}
	if c.Interval <= 0 {
		bad("interval", "must be > 0")
	}
	if c.Timeout <= 0 {
		bad("timeout", "must be > 0")
	}
	if c.MaxAge < 0 {
		bad("max_age", "must be ≥ 0 (0 means 4 × interval)")
	} else if c.Interval > 0 && c.MaxAge > 0 && c.MaxAge < c.Interval {
		bad("max_age", "%v is shorter than interval %v: every endpoint would be stale", c.MaxAge, c.Interval)
	}
	if c.MaxBodyBytes <= 0 {
		bad("max_body_bytes", "must be > 0")
	}
	if c.Concurrency <= 0 {
		bad("concurrency", "must be > 0")
	}
	if c.UnhealthyAfter <= 0 {
		bad("unhealthy_after", "must be > 0")
	}
	if c.MaxBackoff <= 0 {
		bad("max_backoff", "must be > 0")
	}
	if c.Port < 0 || c.Port > 65535 {
		bad("port", "%d out of range 0…65535", c.Port)
	}
	if c.Path == "" || c.Path[0] != '/' {
		bad("path", "%q must start with /", c.Path)
	}
	if m, ok := EngineMapping(c.Engine); !ok {
		bad("engine", "%q, want one of %v", c.Engine, Engines())
	} else if _, err := m.merge(c.Metrics).compile(); err != nil {
		errs = append(errs, fmt.Errorf("scrape.metrics.%w", err))
	}
	return errors.Join(errs...)
}

// maxAge returns MaxAge, or 4 × Interval when it is 0.
func (c ScrapeConfig) maxAge() time.Duration {
	if c.MaxAge > 0 {
		return c.MaxAge
	}
	return 4 * c.Interval
}
