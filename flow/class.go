package flow

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// Class is where a request stands in flow control.
type Class struct {
	// Band is the index of the request's band in Config.Bands (0 is the
	// highest priority).
	Band int
	// Tenant is the fairness key: requests of one band share dispatches
	// equally across tenants while they wait. At most 64 bytes.
	Tenant string
	// TTL is the request's own bound on its wait (0: none).
	TTL time.Duration
}

// Classifier turns request headers and the model into a Class. It is
// immutable and safe for concurrent use.
type Classifier struct {
	cfg     Config
	bands   map[string]int
	models  map[string]int
	def     int
	headers []string
}

// NewClassifier builds a classifier for a valid cfg.
func NewClassifier(cfg Config) (*Classifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Classifier{cfg: cfg, bands: map[string]int{}, models: map[string]int{}}
	for i, b := range cfg.Bands {
		c.bands[b.Name] = i
	}
	c.def = c.bands[cfg.DefaultBand]
	c.headers = []string{"authorization", HeaderTTL, HeaderLLMDTTL}
	for _, h := range []string{cfg.PriorityHeader, cfg.TenantHeader} {
		if h != "" {
			c.headers = append(c.headers, strings.ToLower(h))
		}
	}
	for m, b := range cfg.ModelBands {
		c.models[m] = c.bands[b]
	}
	return c, nil
}

// Bands returns the number of bands.
func (c *Classifier) Bands() int { return len(c.cfg.Bands) }

// BandName returns band i's name.
func (c *Classifier) BandName(i int) string { return c.cfg.Bands[i].Name }

// Band returns the index of the band named name, false when there is none.
func (c *Classifier) Band(name string) (int, bool) {
	i, ok := c.bands[name]
	return i, ok
}

// maxTenant bounds a tenant key's length.
const maxTenant = 64

// DefaultTenant is the tenant of a request with neither a tenant header
// nor an API key.
const DefaultTenant = "default"

// Classify returns the class of a request for model whose headers header
// returns (by lower-case name; "" when absent). The band is the priority
// header's when it names a band, else the model's (model_bands), else
// the default band. The tenant is the tenant header's value (cut to 64
// bytes) when configured and present, else "key-" and 16 hex digits of a
// hash of the Authorization bearer token, else "default". The TTL is the
// first valid of x-trimtab-ttl and x-llm-d-inference-ttl.
func (c *Classifier) Classify(model string, header func(name string) string) Class {
	cl := Class{Band: c.def, Tenant: DefaultTenant}
	if i, ok := c.models[model]; ok {
		cl.Band = i
	}
	if h := c.cfg.PriorityHeader; h != "" {
		if i, ok := c.bands[strings.TrimSpace(header(h))]; ok {
			cl.Band = i
		}
	}
	if h := c.cfg.TenantHeader; h != "" {
		if v := strings.TrimSpace(header(h)); v != "" {
			cl.Tenant = v[:min(len(v), maxTenant)]
		}
	}
	if cl.Tenant == DefaultTenant {
		if v := header("authorization"); len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			f := fnv.New64a()
			f.Write([]byte(strings.TrimSpace(v[7:])))
			cl.Tenant = fmt.Sprintf("key-%016x", f.Sum64())
		}
	}
	if ttl, ok := ParseTTL(header(HeaderTTL)); ok {
		cl.TTL = ttl
	} else if ttl, ok := ParseTTL(header(HeaderLLMDTTL)); ok {
		cl.TTL = ttl
	}
	return cl
}

// ParseTTL reads a TTL header value: a Go duration ("250ms", "2s") or a
// number of seconds ("2", "0.5"), more than 0 and at most 24h. ok is false
// for anything else, which the caller ignores.
func ParseTTL(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 32 {
		return 0, false
	}
	var d time.Duration
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if !(f > 0 && f <= 86400) {
			return 0, false
		}
		d = time.Duration(f * float64(time.Second))
	} else if v, err := time.ParseDuration(s); err == nil {
		d = v
	} else {
		return 0, false
	}
	if d <= 0 || d > 24*time.Hour {
		return 0, false
	}
	return d, true
}

// TTL returns the wait bound of a request of class cl: the minimum of the
// global TTL, its band's and its own, ignoring those that are 0.
func (c *Classifier) TTL(cl Class) time.Duration {
	ttl := c.cfg.TTL
	if b := c.cfg.Bands[cl.Band].TTL; b > 0 && b < ttl {
		ttl = b
	}
	if cl.TTL > 0 && cl.TTL < ttl {
		ttl = cl.TTL
	}
	return ttl
}

// Headers returns the lower-case names of the headers Classify reads.
// The caller must not modify the slice.
func (c *Classifier) Headers() []string { return c.headers }
