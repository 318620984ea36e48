// Package settings holds the types of a profile's server: section, the
// configuration of the data path's three servers (the OpenAI-compatible
// HTTP proxy, the Envoy ext_proc server and the admin server), with their
// defaults and validation. It imports no trimtab package, so the profile
// schema (configs) can embed it without depending on the servers.
package settings

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"
	"unicode"
)

// Body send modes of the Envoy ext_proc filter that the server supports.
// They are used when Envoy does not announce its mode in protocol_config.
const (
	// BodyModeFullDuplex is FULL_DUPLEX_STREAMED: the EPP answers the
	// request headers only after the whole body, then streams the body back.
	BodyModeFullDuplex = "full-duplex-streamed"
	// BodyModeBuffered is BUFFERED: headers are answered at once, the
	// destination travels in the body response's header mutation.
	BodyModeBuffered = "buffered"
	// BodyModeNone means Envoy sends no body (response side only).
	BodyModeNone = "none"
)

// Config configures the three servers of the data path: a profile's
// server: section, decoded by configs with mapstructure; durations are Go
// duration strings ("30s").
type Config struct {
	// HTTP is the OpenAI-compatible reverse proxy.
	HTTP HTTPConfig `mapstructure:"http"`
	// ExtProc is the Envoy ext_proc endpoint picker.
	ExtProc ExtProcConfig `mapstructure:"ext_proc"`
	// Admin serves metrics, health and debug endpoints.
	Admin AdminConfig `mapstructure:"admin"`
	// MaxBodyBytes bounds a request body on both paths; larger bodies get
	// 413. Default 16 MiB.
	MaxBodyBytes int64 `mapstructure:"max_body_bytes"`
	// BodyMemoryBytes is the memory all request bodies being read or held
	// may take together, per server (HTTP proxy and ext_proc each). A
	// body is charged as its bytes arrive, not by its declared length; a
	// request that would go over is answered 503 body_memory_exhausted
	// with Retry-After. At least max_body_bytes. Default 256 MiB.
	BodyMemoryBytes int64 `mapstructure:"body_memory_bytes"`
	// BodyReadTimeout bounds reading a whole request body on the HTTP
	// proxy, from the end of the headers; a slower body gets 408
	// body_timeout. Default 30s.
	BodyReadTimeout time.Duration `mapstructure:"body_read_timeout"`
	// IdleTimeout is how long the HTTP proxy and the admin server keep an
	// idle keep-alive connection open. Default 30s.
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	// DrainTimeout is how long in-flight requests (SSE streams included)
	// may run after shutdown begins before they are cut. Default 30s.
	DrainTimeout time.Duration `mapstructure:"drain_timeout"`
	// RetryAfter is the Retry-After sent with 429 and 503 answers, rounded
	// up to whole seconds. Default 1s.
	RetryAfter time.Duration `mapstructure:"retry_after"`
	// LoRAAdapters maps an adapter name, as clients put it in "model", to
	// the base model that serves it. A request naming an adapter is
	// scheduled for the base model with Request.LoRA set.
	LoRAAdapters map[string]string `mapstructure:"lora_adapters"`
}

// HTTPConfig configures the reverse proxy.
type HTTPConfig struct {
	// Enabled says whether cmd runs the proxy. Default true.
	Enabled bool `mapstructure:"enabled"`
	// Addr is the listen address. Default ":8080".
	Addr string `mapstructure:"addr"`
	// Retries is how many times a request that failed before any byte
	// reached the client (any failure before the endpoint's response
	// headers — refused, reset, closed, header timeout —, or a 502 or
	// 503) is retried on the next fallback endpoint. Default 2; 0
	// disables retries.
	Retries int `mapstructure:"retries"`
	// ScoresHeader adds x-trimtab-scores with the per-scorer breakdown of
	// the chosen endpoint to every response. Default false (it allocates).
	ScoresHeader bool `mapstructure:"scores_header"`
	// ConnectTimeout bounds dialing an endpoint. Default 5s.
	ConnectTimeout time.Duration `mapstructure:"connect_timeout"`
	// ResponseHeaderTimeout bounds the wait for an endpoint's response
	// headers; 0 (default) waits as long as the client does, since prefill
	// of a long prompt can take a while.
	ResponseHeaderTimeout time.Duration `mapstructure:"response_header_timeout"`
	// StreamIdleTimeout bounds how long the proxy waits for an endpoint's
	// next response body bytes: from its response headers to the first
	// body byte, and between reads after that. An endpoint that goes
	// silent for longer has its connection cut; the attempt counts as a
	// failure towards its outlier ejection. When nothing has reached the
	// client yet the request is retried on the next fallback (within
	// retries); otherwise the stream ends with an error in the API's
	// format. A streamed answer's first byte follows the engine's queue
	// and the prompt's prefill, so keep it above the longest those take.
	// Default 60s, nginx's proxy_read_timeout; 1ms…24h.
	StreamIdleTimeout time.Duration `mapstructure:"stream_idle_timeout"`
	// MaxIdleConnsPerHost is the keep-alive pool size per endpoint.
	// Default 256.
	MaxIdleConnsPerHost int `mapstructure:"max_idle_conns_per_host"`
	// MaxInFlight caps concurrent scheduled requests; more get 429.
	// 0 means unlimited. Default 4096.
	MaxInFlight int `mapstructure:"max_in_flight"`
	// MaxConnections caps open client connections, idle keep-alive ones
	// included; a connection over the cap is answered 503 and closed at
	// once. 0 means unlimited. Default 4096: an HTTP/1.1 connection
	// carries one request at a time, so max_in_flight requests need as
	// many connections.
	MaxConnections int `mapstructure:"max_connections"`
	// MaxConnectionsPerClient caps the open connections from one client
	// address, so one client cannot hold all max_connections; a connection
	// over it is answered 429 too_many_client_connections and closed at
	// once. Peers in TrustedProxies are exempt: they carry many clients. 0
	// turns the cap off. Default 1024, a quarter of the default
	// max_connections. A value above max_connections is allowed and then
	// never binds before max_connections does (a profile that lowers only
	// max_connections stays valid).
	MaxConnectionsPerClient int `mapstructure:"max_connections_per_client"`
	// TrustedProxies lists the addresses (CIDR prefixes such as
	// "10.0.0.0/8", or single IPs) of proxies in front of trimtab whose
	// X-Forwarded-For is believed. A request from a trusted peer is
	// forwarded with the peer's address appended to its X-Forwarded-For
	// (net/http/httputil.ReverseProxy's practice); one from any other peer
	// has its X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto and
	// Forwarded headers dropped and X-Forwarded-For set to the peer's
	// address alone, so a client cannot forge the address an endpoint
	// sees. At most 1024 entries. Default none: no peer is trusted.
	TrustedProxies []string `mapstructure:"trusted_proxies"`
}

// MaxTrustedProxies bounds HTTPConfig.TrustedProxies.
const MaxTrustedProxies = 1024

// TrustedPrefixes parses TrustedProxies: a CIDR prefix, or a single IP as
// its one-address prefix. IPv4-mapped IPv6 addresses are read as IPv4.
func (c HTTPConfig) TrustedPrefixes() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(c.TrustedProxies))
	for i, s := range c.TrustedProxies {
		s = strings.TrimSpace(s)
		var p netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			p, err = netip.ParsePrefix(s)
			if err == nil && p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(s)
			if err == nil && a.Zone() == "" {
				a = a.Unmap()
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil || !p.IsValid() {
			return nil, fmt.Errorf("server.http.trusted_proxies[%d]: %q is not a CIDR prefix (10.0.0.0/8) or an IP address", i, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// ExtProcConfig configures the Envoy ext_proc server.
type ExtProcConfig struct {
	// Enabled says whether cmd runs the server. Default true.
	Enabled bool `mapstructure:"enabled"`
	// Addr is the gRPC listen address. Default ":9002".
	Addr string `mapstructure:"addr"`
	// RequestBodyMode is Envoy's request_body_mode, used when Envoy does
	// not send protocol_config: "full-duplex-streamed" (default) or
	// "buffered". Full duplex needs protocol_config: without it
	// "full-duplex-streamed" is served as "buffered".
	RequestBodyMode string `mapstructure:"request_body_mode"`
	// ResponseBodyMode is Envoy's response_body_mode, used when Envoy does
	// not send protocol_config: "full-duplex-streamed" (default),
	// "buffered" or "none". Without protocol_config
	// "full-duplex-streamed" is served as "buffered".
	ResponseBodyMode string `mapstructure:"response_body_mode"`
	// DestinationFallbacks appends the decision's fallback endpoints to
	// the destination header and metadata ("ip:port,ip:port,…"), for
	// gateways whose load balancer retries along the list (Envoy's
	// override_host policy, as deploy/envoy/envoy.yaml ships it: set it
	// true there). Default false, because an Envoy routing with an
	// ORIGINAL_DST cluster accepts a single address.
	DestinationFallbacks bool `mapstructure:"destination_fallbacks"`
	// ScoresHeader adds x-trimtab-scores to responses (via a response
	// header mutation). Default false.
	ScoresHeader bool `mapstructure:"scores_header"`
	// EmitScores puts the decision's scores into the dynamic metadata of
	// the answer that carries the destination, so the gateway's access
	// logs can explain each route: envoy.lb gets ScoresKey, a map of
	// endpoint → total score (the shape of llm-d-router's
	// --emit-endpoint-scores), and the ScoresNamespace ("trimtab") gets
	// the chosen endpoint, the weights (version, mode, per scorer) and,
	// per listed endpoint, its total and per-scorer scores. Default false:
	// it copies the decision on every request.
	EmitScores bool `mapstructure:"emit_scores"`
	// EmitScoresTop bounds the endpoints EmitScores lists, to keep the
	// message small: the chosen endpoint and the best others by total
	// score. 1…64, default 8.
	EmitScoresTop int `mapstructure:"emit_scores_top"`
	// MaxInFlight caps concurrent scheduled requests; more get 429.
	// 0 means unlimited. Default 4096.
	MaxInFlight int `mapstructure:"max_in_flight"`
	// MaxMessageBytes is the largest gRPC message the server receives. A
	// buffered body over max_body_bytes but within this limit is answered
	// with an ImmediateResponse 413; a larger message ends the stream with
	// ResourceExhausted, which Envoy answers 500. Keep Envoy's buffer
	// limit below it. 0 (default) means 2 × max_body_bytes + 1 MiB.
	MaxMessageBytes int64 `mapstructure:"max_message_bytes"`
}

// MessageLimit resolves MaxMessageBytes against the body limit maxBody:
// the largest gRPC message the server receives, in bytes.
func (c ExtProcConfig) MessageLimit(maxBody int64) int64 {
	if c.MaxMessageBytes > 0 {
		return c.MaxMessageBytes
	}
	return 2*maxBody + 1<<20
}

// MaxEmitScoresTop is the most endpoints ExtProcConfig.EmitScoresTop may
// list.
const MaxEmitScoresTop = 64

// DefaultStreamIdleTimeout is HTTPConfig.StreamIdleTimeout's default:
// nginx's proxy_read_timeout, the wait "between two successive read
// operations" of a proxied response.
const DefaultStreamIdleTimeout = 60 * time.Second

// MaxStreamIdleTimeout is the longest HTTPConfig.StreamIdleTimeout.
const MaxStreamIdleTimeout = 24 * time.Hour

// DefaultMaxInFlight is the default concurrency limit of each request
// path: a pool of 16 pods running 256 sequences each.
const DefaultMaxInFlight = 4096

// AdminConfig configures the admin server.
type AdminConfig struct {
	// Enabled says whether cmd runs the server. Default true.
	Enabled bool `mapstructure:"enabled"`
	// Addr is the listen address. Default "127.0.0.1:9090": loopback only,
	// since the debug views show the pool and recent decisions. Set it to
	// ":9090" where Prometheus or kubelet probes reach it over the network
	// (the Kubernetes manifests do), and set Token there.
	Addr string `mapstructure:"addr"`
	// Token, when set, is required for every admin path except /metrics,
	// /healthz and /readyz (so /debug/* and /ui): as
	// "Authorization: Bearer <token>", or as the password of HTTP Basic
	// authentication with any user name, which is how a browser opening
	// /ui sends it. At least 16 bytes, no spaces. Default "" (open).
	Token string `mapstructure:"token"`
	// TokenFile names a file holding Token (surrounding white space is
	// trimmed), e.g. a mounted Kubernetes Secret; cmd reads it at start.
	// Set Token or TokenFile, not both. Changing either, or the file's
	// content, needs a restart.
	TokenFile string `mapstructure:"token_file"`
	// Decisions is how many recent decisions /debug/decisions keeps.
	// Default 256; 0 keeps none.
	Decisions int `mapstructure:"decisions"`
	// DecisionsEvery records one decision in every N (1 records all).
	// Recording copies the decision's scores, so the default, 16, keeps it
	// off the hot path.
	DecisionsEvery int `mapstructure:"decisions_every"`
	// Record configures the traffic recorder behind /debug/trace.
	Record RecordConfig `mapstructure:"record"`
}

// RecordConfig configures the traffic recorder: a bounded window of the
// scheduled requests kept as a Mooncake-format trace (arrival time, input
// length and prefix block ids; never prompt text), downloadable from the
// admin server's /debug/trace for `trimtab sim --trace`. A window opens at
// the first request after start (or after POST /debug/trace/restart) and
// closes when Window has passed or MaxRequests or MaxBlocks is reached;
// later requests are dropped and counted. Its memory is fixed when
// recording is enabled: about 24 bytes per request and 8 per block.
type RecordConfig struct {
	// Enabled turns recording on. Default false.
	Enabled bool `mapstructure:"enabled"`
	// Window is the longest span of arrivals one window keeps, 1s…24h.
	// Default 10m.
	Window time.Duration `mapstructure:"window"`
	// MaxRequests is how many requests one window keeps, 1…1,000,000.
	// Default 10,000.
	MaxRequests int `mapstructure:"max_requests"`
	// MaxBlocks is how many 512-token prefix block ids one window keeps
	// over all its requests, 1…16,777,216 (8 bytes each). Default 262,144
	// (2 MiB), two dozen blocks (a 12k-token prompt, the Mooncake trace's
	// mean) for each of MaxRequests.
	MaxBlocks int `mapstructure:"max_blocks"`
}

// Bounds of RecordConfig.MaxRequests and RecordConfig.MaxBlocks.
const (
	MaxRecordRequests = 1_000_000
	MaxRecordBlocks   = 1 << 24
)

// MinAdminToken is the shortest AdminConfig.Token accepted, in bytes.
const MinAdminToken = 16

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	return Config{
		HTTP: HTTPConfig{
			Enabled:             true,
			Addr:                ":8080",
			Retries:             2,
			ConnectTimeout:      5 * time.Second,
			StreamIdleTimeout:   DefaultStreamIdleTimeout,
			MaxIdleConnsPerHost: 256,
			MaxInFlight:         DefaultMaxInFlight,
			MaxConnections:      DefaultMaxInFlight,
			// A quarter: one client address leaves room for three others.
			MaxConnectionsPerClient: DefaultMaxInFlight / 4,
		},
		ExtProc: ExtProcConfig{
			Enabled:          true,
			Addr:             ":9002",
			RequestBodyMode:  BodyModeFullDuplex,
			ResponseBodyMode: BodyModeFullDuplex,
			EmitScoresTop:    8,
			MaxInFlight:      DefaultMaxInFlight,
		},
		Admin: AdminConfig{
			Enabled:        true,
			Addr:           "127.0.0.1:9090",
			Decisions:      256,
			DecisionsEvery: 16,
			Record:         RecordConfig{Window: 10 * time.Minute, MaxRequests: 10000, MaxBlocks: 1 << 18},
		},
		MaxBodyBytes:    16 << 20,
		BodyMemoryBytes: 256 << 20,
		BodyReadTimeout: 30 * time.Second,
		IdleTimeout:     30 * time.Second,
		DrainTimeout:    30 * time.Second,
		RetryAfter:      time.Second,
	}
}

// Validate checks every field and names the offending ones by their
// profile path (server.http.retries).
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("server.%s: "+format, append([]any{field}, args...)...))
	}
	if c.MaxBodyBytes <= 0 {
		bad("max_body_bytes", "%d, must be > 0", c.MaxBodyBytes)
	}
	if c.BodyMemoryBytes < c.MaxBodyBytes {
		bad("body_memory_bytes", "%d, must be ≥ max_body_bytes (%d), or no body of the largest size could be read", c.BodyMemoryBytes, c.MaxBodyBytes)
	}
	if c.BodyReadTimeout <= 0 {
		bad("body_read_timeout", "%v, must be > 0", c.BodyReadTimeout)
	}
	if c.IdleTimeout <= 0 {
		bad("idle_timeout", "%v, must be > 0", c.IdleTimeout)
	}
	if c.DrainTimeout < 0 {
		bad("drain_timeout", "%v, must be ≥ 0", c.DrainTimeout)
	}
	if c.RetryAfter < 0 {
		bad("retry_after", "%v, must be ≥ 0", c.RetryAfter)
	}
	for adapter, base := range c.LoRAAdapters {
		if adapter == "" || base == "" {
			bad("lora_adapters", "adapter %q → base %q: names must be non-empty", adapter, base)
		} else if adapter == base {
			bad("lora_adapters", "adapter %q maps to itself", adapter)
		}
	}
	if c.HTTP.Enabled && c.HTTP.Addr == "" {
		bad("http.addr", "must be set when http.enabled")
	}
	if c.HTTP.Retries < 0 || c.HTTP.Retries > 16 {
		bad("http.retries", "%d, want 0…16", c.HTTP.Retries)
	}
	if c.HTTP.ConnectTimeout <= 0 {
		bad("http.connect_timeout", "%v, must be > 0", c.HTTP.ConnectTimeout)
	}
	if c.HTTP.ResponseHeaderTimeout < 0 {
		bad("http.response_header_timeout", "%v, must be ≥ 0", c.HTTP.ResponseHeaderTimeout)
	}
	if d := c.HTTP.StreamIdleTimeout; d < time.Millisecond || d > MaxStreamIdleTimeout {
		bad("http.stream_idle_timeout", "%v, want 1ms…%v (write e.g. 60s)", d, MaxStreamIdleTimeout)
	}
	if c.HTTP.MaxIdleConnsPerHost < 0 {
		bad("http.max_idle_conns_per_host", "%d, must be ≥ 0", c.HTTP.MaxIdleConnsPerHost)
	}
	if c.HTTP.MaxInFlight < 0 {
		bad("http.max_in_flight", "%d, must be ≥ 0", c.HTTP.MaxInFlight)
	}
	if c.HTTP.MaxConnections < 0 {
		bad("http.max_connections", "%d, must be ≥ 0", c.HTTP.MaxConnections)
	}
	if n := c.HTTP.MaxConnectionsPerClient; n < 0 {
		bad("http.max_connections_per_client", "%d, must be ≥ 0 (0 turns the per-client cap off)", n)
	}
	if n := len(c.HTTP.TrustedProxies); n > MaxTrustedProxies {
		bad("http.trusted_proxies", "%d entries, want at most %d", n, MaxTrustedProxies)
	} else if _, err := c.HTTP.TrustedPrefixes(); err != nil {
		errs = append(errs, err)
	}
	if c.ExtProc.Enabled && c.ExtProc.Addr == "" {
		bad("ext_proc.addr", "must be set when ext_proc.enabled")
	}
	switch c.ExtProc.RequestBodyMode {
	case BodyModeFullDuplex, BodyModeBuffered:
	default:
		bad("ext_proc.request_body_mode", "%q, want %q or %q", c.ExtProc.RequestBodyMode, BodyModeFullDuplex, BodyModeBuffered)
	}
	switch c.ExtProc.ResponseBodyMode {
	case BodyModeFullDuplex, BodyModeBuffered, BodyModeNone:
	default:
		bad("ext_proc.response_body_mode", "%q, want %q, %q or %q", c.ExtProc.ResponseBodyMode, BodyModeFullDuplex, BodyModeBuffered, BodyModeNone)
	}
	if m := c.ExtProc.MaxMessageBytes; m != 0 && (m <= c.MaxBodyBytes || m > math.MaxInt32) {
		bad("ext_proc.max_message_bytes", "%d, want 0 (2 × max_body_bytes + 1 MiB) or more than max_body_bytes (%d), at most %d", m, c.MaxBodyBytes, math.MaxInt32)
	} else if c.ExtProc.MessageLimit(c.MaxBodyBytes) > math.MaxInt32 {
		bad("max_body_bytes", "%d is too large for ext_proc messages (2 × max_body_bytes + 1 MiB must be at most %d)", c.MaxBodyBytes, math.MaxInt32)
	}
	if c.ExtProc.EmitScoresTop < 1 || c.ExtProc.EmitScoresTop > MaxEmitScoresTop {
		bad("ext_proc.emit_scores_top", "%d, want 1…%d", c.ExtProc.EmitScoresTop, MaxEmitScoresTop)
	}
	if c.ExtProc.MaxInFlight < 0 {
		bad("ext_proc.max_in_flight", "%d, must be ≥ 0", c.ExtProc.MaxInFlight)
	}
	if c.Admin.Enabled && c.Admin.Addr == "" {
		bad("admin.addr", "must be set when admin.enabled")
	}
	if c.Admin.Token != "" && c.Admin.TokenFile != "" {
		bad("admin.token_file", "set token or token_file, not both")
	}
	if t := c.Admin.Token; t != "" {
		if len(t) < MinAdminToken {
			bad("admin.token", "%d bytes, want at least %d", len(t), MinAdminToken)
		}
		if strings.ContainsFunc(t, unicode.IsSpace) {
			bad("admin.token", "must not contain spaces")
		}
	}
	if c.Admin.Decisions < 0 || c.Admin.Decisions > 1<<16 {
		bad("admin.decisions", "%d, want 0…65536", c.Admin.Decisions)
	}
	if c.Admin.DecisionsEvery < 1 {
		bad("admin.decisions_every", "%d, must be ≥ 1", c.Admin.DecisionsEvery)
	}
	if r := c.Admin.Record; r.Window < time.Second || r.Window > 24*time.Hour {
		bad("admin.record.window", "%v, want 1s…24h (write e.g. 10m)", r.Window)
	}
	if n := c.Admin.Record.MaxRequests; n < 1 || n > MaxRecordRequests {
		bad("admin.record.max_requests", "%d, want 1…%d", n, MaxRecordRequests)
	}
	if n := c.Admin.Record.MaxBlocks; n < 1 || n > MaxRecordBlocks {
		bad("admin.record.max_blocks", "%d, want 1…%d", n, MaxRecordBlocks)
	}
	return errors.Join(errs...)
}
