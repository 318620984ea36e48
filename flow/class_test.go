package flow

import (
	"strings"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ModelBands = map[string]string{"batch-model": BandSheddable}
	cfg.TenantHeader = "x-tenant"
	c, err := NewClassifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		model   string
		headers map[string]string
		band    int
		tenant  string
		ttl     time.Duration
	}{
		{"nothing: default band and tenant", "m", nil, 1, "default", 0},
		{"priority header", "m", map[string]string{"x-trimtab-priority": "interactive"}, 0, "default", 0},
		{"unknown band name ignored", "m", map[string]string{"x-trimtab-priority": "urgent"}, 1, "default", 0},
		{"model band", "batch-model", nil, 2, "default", 0},
		{"header beats model", "batch-model", map[string]string{"x-trimtab-priority": "standard"}, 1, "default", 0},
		{"tenant header", "m", map[string]string{"x-tenant": "acme", "authorization": "Bearer k"}, 1, "acme", 0},
		{"tenant cut to 64 bytes", "m", map[string]string{"x-tenant": strings.Repeat("t", 100)}, 1, strings.Repeat("t", 64), 0},
		// fnv-64a("sk-1") in hex.
		{"API key's tenant", "m", map[string]string{"authorization": "Bearer sk-1"}, 1, "key-" + fnvHex("sk-1"), 0},
		{"trimtab TTL", "m", map[string]string{"x-trimtab-ttl": "250ms"}, 1, "default", 250 * time.Millisecond},
		{"llm-d TTL in seconds", "m", map[string]string{"x-llm-d-inference-ttl": "1.5"}, 1, "default", 1500 * time.Millisecond},
		{"bad TTL ignored", "m", map[string]string{"x-trimtab-ttl": "-1s", "x-llm-d-inference-ttl": "2s"}, 1, "default", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Classify(tc.model, func(n string) string { return tc.headers[n] })
			if got.Band != tc.band || got.Tenant != tc.tenant || got.TTL != tc.ttl {
				t.Fatalf("got %+v, want band %d tenant %q ttl %v", got, tc.band, tc.tenant, tc.ttl)
			}
		})
	}
}

func fnvHex(s string) string {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	const digits = "0123456789abcdef"
	out := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		out[i] = digits[h&15]
		h >>= 4
	}
	return string(out)
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"default", func(*Config) {}, ""},
		{"no bands", func(c *Config) { c.Bands = nil }, "flow.bands"},
		{"bad band name", func(c *Config) { c.Bands[0].Name = "Inter Active" }, "flow.bands[0].name"},
		{"duplicate band", func(c *Config) { c.Bands[1].Name = BandInteractive }, "appears twice"},
		{"unknown default band", func(c *Config) { c.DefaultBand = "x" }, "flow.default_band"},
		{"unknown model band", func(c *Config) { c.ModelBands = map[string]string{"m": "x"} }, "flow.model_bands[m]"},
		{"ttl 0", func(c *Config) { c.TTL = 0 }, "flow.ttl"},
		{"queue 0", func(c *Config) { c.MaxQueue = 0 }, "flow.max_queue"},
		{"poll too fast", func(c *Config) { c.Poll = time.Microsecond }, "flow.poll"},
		{"threshold 0", func(c *Config) { c.Saturation.Threshold = 0 }, "flow.saturation.threshold"},
		{"kv over 1", func(c *Config) { c.Saturation.KVUtil = 1.5 }, "flow.saturation.kv_util"},
		{"negative capacity", func(c *Config) { c.Saturation.CapacityTokens = -1 }, "flow.saturation.capacity_tokens"},
		{"bytes per token 0", func(c *Config) { c.Saturation.BytesPerToken = 0 }, "flow.saturation.bytes_per_token"},
		{"max wait 0", func(c *Config) { c.Saturation.MaxWait = 0 }, "flow.saturation.max_wait"},
		{"negative rate", func(c *Config) { c.Saturation.PrefillTokensPerSecond = -1 }, "flow.saturation.prefill_tokens_per_second"},
		{"negative band wait", func(c *Config) { c.Bands[1].MaxWait = -time.Second }, "flow.bands[1].max_wait"},
		// standard 1 s, sheddable 3 s: a lower band over a higher one.
		{"lower band waits longer", func(c *Config) { c.Bands[2].MaxWait = 3 * time.Second }, "flow.bands[2].max_wait"},
		{"threshold over 1", func(c *Config) { c.Bands[1].Threshold = 1.5 }, "flow.bands[1].threshold"},
		// sheddable 0.9 over standard's 0.8 (inherited).
		{"lower band fills more", func(c *Config) { c.Bands[2].Threshold = 0.9 }, "flow.bands[2].threshold"},
		{"first band reserve", func(c *Config) { c.Bands[0].Reserve = 1 }, "flow.bands[0].reserve"},
		{"negative reserve", func(c *Config) { c.Bands[2].Reserve = -1 }, "flow.bands[2].reserve"},
	} {
		cfg := DefaultConfig()
		tc.edit(&cfg)
		err := cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A band without max_wait or threshold takes the band above's; the first
// takes saturation.max_wait and saturation.threshold.
func TestBudgets(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Bands = append(cfg.Bands, BandConfig{Name: "bulk"})
	got := cfg.Budgets()
	want := []time.Duration{2 * time.Second, time.Second, 25 * time.Millisecond, 25 * time.Millisecond}
	th, wantTh := cfg.Thresholds(), []float64{0.8, 0.8, 0.5, 0.5}
	for i := range want {
		if got[i] != want[i] || th[i] != wantTh[i] {
			t.Fatalf("budgets %v, thresholds %v; want %v, %v", got, th, want, wantTh)
		}
	}
}

func FuzzParseTTL(f *testing.F) {
	for _, s := range []string{"2s", "0.5", "250ms", "-1", "NaN", "1e400", "24h1s", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseTTL(s)
		if ok && (d <= 0 || d > 24*time.Hour) {
			t.Fatalf("ParseTTL(%q) = %v, outside (0, 24h]", s, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseTTL(%q) rejected with %v", s, d)
		}
	})
}
