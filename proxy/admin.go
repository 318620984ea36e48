package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trimtab/trimtab/scheduler"
)

// Admin is the admin HTTP server: /metrics, /healthz, /readyz and the JSON
// debug views /debug/weights, /debug/endpoints, /debug/decisions, and the
// recorded traffic /debug/trace (traffic.go). More
// handlers (a UI) can be added with Handle before Run. With
// Config.Admin.Token set, everything but /metrics, /healthz and /readyz
// needs the token.
type Admin struct {
	cfg  Config
	deps Deps
	mux  *http.ServeMux
	srv  httpServer
	// token is the SHA-256 of Config.Admin.Token; nil when none is set.
	token *[sha256.Size]byte
}

// NewAdmin builds the admin server. deps.View is required; deps.Gatherer
// is exposed on /metrics; deps.Recorder feeds /debug/decisions.
func NewAdmin(cfg Config, deps Deps) (*Admin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.View == nil {
		return nil, errors.New("proxy: NewAdmin needs Deps.View")
	}
	deps.defaults()
	g := deps.Gatherer
	if g == nil {
		g = prometheus.NewRegistry()
	}
	a := &Admin{cfg: cfg, deps: deps, mux: http.NewServeMux(),
		srv: httpServer{name: "admin", drain: min(cfg.DrainTimeout, 5*time.Second), idle: cfg.IdleTimeout, ln: deps.Listener, addr: cfg.Admin.Addr}}
	if cfg.Admin.Token != "" {
		sum := sha256.Sum256([]byte(cfg.Admin.Token))
		a.token = &sum
	}
	// Open to probes and scrapers, with or without a token.
	a.mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	a.mux.HandleFunc("GET /readyz", a.readyz)
	// Behind the token, when one is set.
	a.Handle("GET /debug/weights", http.HandlerFunc(a.weights))
	a.Handle("GET /debug/endpoints", http.HandlerFunc(a.endpoints))
	a.Handle("GET /debug/decisions", http.HandlerFunc(a.decisions))
	a.Handle("GET /debug/trace", http.HandlerFunc(a.trace))
	a.Handle("POST /debug/trace/restart", http.HandlerFunc(a.traceRestart))
	return a, nil
}

// Handle adds a handler to the admin mux (http.ServeMux patterns). With
// Config.Admin.Token set it requires the token. Call it before Run.
func (a *Admin) Handle(pattern string, h http.Handler) { a.mux.Handle(pattern, a.authorize(h)) }

// authorize wraps h with the token check: 401 with Bearer and Basic
// challenges unless the request carries the token (constant-time
// comparison of SHA-256 digests, so neither content nor length leaks).
func (a *Admin) authorize(h http.Handler) http.Handler {
	if a.token == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := credential(r)
		if ok {
			sum := sha256.Sum256([]byte(got))
			ok = subtle.ConstantTimeCompare(sum[:], a.token[:]) == 1
		}
		if !ok {
			challenge := `Bearer realm="trimtab admin"`
			if r.Header.Get("Authorization") != "" {
				challenge += `, error="invalid_token"`
			}
			w.Header().Add("WWW-Authenticate", challenge)
			w.Header().Add("WWW-Authenticate", `Basic realm="trimtab admin", charset="UTF-8"`)
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]string{
				"message": "this admin path needs the server.admin token (Authorization: Bearer <token>)",
				"type":    "authentication_error",
			}})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// credential returns the token a request presents: a Bearer token, or the
// password of Basic authentication.
func credential(r *http.Request) (string, bool) {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass, true
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}

// ServeHTTP serves the admin mux.
func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// Listen binds the listen address (or adopts Deps.Listener) and returns
// the bound address. Run calls it if needed.
func (a *Admin) Listen() (net.Addr, error) { return a.srv.bind() }

// Run serves until ctx is cancelled, then shuts down (up to 5 s or
// Config.DrainTimeout, whichever is shorter).
func (a *Admin) Run(ctx context.Context) error { return a.srv.run(ctx, a.mux) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// readyz is 200 when at least one endpoint has fresh metrics, else 503.
func (a *Admin) readyz(w http.ResponseWriter, _ *http.Request) {
	fresh, total := freshEndpoints(a.deps.View.Pool())
	code := http.StatusOK
	if fresh == 0 {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]int{"fresh_endpoints": fresh, "endpoints": total})
}

// WeightsView is the JSON shape of /debug/weights.
type WeightsView struct {
	// Version, Mode, Reason and At are those of the weights in force.
	Version uint64    `json:"version"`
	Mode    string    `json:"mode"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
	// Signal is the detector's latest signal, measured at SignalAt (with
	// Deps.Control; otherwise WeightsSignal and no SignalAt).
	Signal   float64   `json:"signal"`
	SignalAt time.Time `json:"signal_at,omitzero"`
	// WeightsSignal is the signal the weights in force were made from.
	WeightsSignal float64      `json:"weights_signal"`
	Scorers       []ScorerView `json:"scorers"`
}

// ScorerView is one scorer in WeightsView.
type ScorerView struct {
	Name     string  `json:"name"`
	Type     string  `json:"type"`
	Category string  `json:"category"`
	Weight   float64 `json:"weight"`
	// BaseWeight is the profile's weight in force (after reloads).
	BaseWeight float64 `json:"base_weight"`
}

func (a *Admin) weights(w http.ResponseWriter, _ *http.Request) {
	wt := a.deps.View.Weights()
	v := WeightsView{Version: wt.Version, Mode: wt.Mode, Reason: wt.Reason, At: wt.At, Signal: wt.Signal, WeightsSignal: wt.Signal}
	var base []float64
	if c := a.deps.Control; c != nil {
		if sig, at, ok := c.Signal(); ok {
			v.Signal, v.SignalAt = sig, at
		}
		base = c.BaseWeights()
	}
	for i, s := range a.deps.View.Scorers() {
		sv := ScorerView{Name: s.Name, Type: s.Type, BaseWeight: s.Weight}
		if s.Scorer != nil {
			sv.Category = s.Scorer.Category().String()
		}
		if i < len(wt.Values) {
			sv.Weight = wt.Values[i]
		}
		if i < len(base) {
			sv.BaseWeight = base[i]
		}
		v.Scorers = append(v.Scorers, sv)
	}
	writeJSON(w, http.StatusOK, v)
}

// EndpointView is one endpoint on /debug/endpoints.
type EndpointView struct {
	Address        string            `json:"address"`
	Name           string            `json:"name,omitempty"`
	Models         []string          `json:"models,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	State          string            `json:"state"`
	Waiting        float64           `json:"waiting"`
	Running        float64           `json:"running"`
	KVUtil         float64           `json:"kv_util"`
	Capacity       float64           `json:"capacity"`
	InFlight       int64             `json:"in_flight"`
	Picks          uint64            `json:"picks"`
	LoRAActive     []string          `json:"lora_active,omitempty"`
	LoRAWaiting    []string          `json:"lora_waiting,omitempty"`
	ScrapedAt      time.Time         `json:"scraped_at"`
	CacheBlockSize int               `json:"cache_block_size,omitempty"`
	CacheBlocks    int               `json:"cache_blocks,omitempty"`
	// Ejected: outlier ejection leaves the endpoint out of picks until
	// EjectedUntil after consecutive failures.
	Ejected      bool       `json:"ejected"`
	EjectedUntil *time.Time `json:"ejected_until,omitempty"`
	// HalfOpen: ejected, but its server answered a scrape again since,
	// so it takes trial requests (scheduler.OutlierConfig).
	HalfOpen bool `json:"half_open,omitempty"`
	// Ejections counts the endpoint's ejections; ConsecutiveFailures its
	// failures in a row so far.
	Ejections           uint64 `json:"ejections"`
	ConsecutiveFailures int    `json:"consecutive_failures"`
}

func (a *Admin) endpoints(w http.ResponseWriter, _ *http.Request) {
	pool := a.deps.View.Pool()
	out := struct {
		Version uint64 `json:"version"`
		// Now is the server's time, so clients measure metrics age
		// against it rather than their own clock.
		Now       time.Time      `json:"now"`
		Endpoints []EndpointView `json:"endpoints"`
	}{Version: pool.Version, Now: a.deps.Clock.Now(), Endpoints: []EndpointView{}}
	for _, e := range pool.Pointers() {
		var until *time.Time
		ejected := e.Ejected(out.Now)
		if ejected {
			u := e.EjectedUntil()
			until = &u
		}
		out.Endpoints = append(out.Endpoints, EndpointView{
			Address: e.Address, Name: e.Name, Models: e.Models, Labels: e.Labels, State: e.State.String(),
			Waiting: e.Waiting, Running: e.Running, KVUtil: e.KVUtil, Capacity: e.CapacityOrOne(),
			InFlight: e.InFlight(), Picks: e.Picks(), LoRAActive: e.LoRA.Active, LoRAWaiting: e.LoRA.Waiting,
			ScrapedAt: e.ScrapedAt, CacheBlockSize: e.CacheBlockSize, CacheBlocks: e.CacheBlocks,
			Ejected: ejected, EjectedUntil: until, Ejections: e.Ejections(), ConsecutiveFailures: e.ConsecutiveFailures(),
			HalfOpen: ejected && e.HalfOpen(),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Admin) decisions(w http.ResponseWriter, _ *http.Request) {
	d := a.deps.Recorder.Recent()
	if d == nil {
		d = []scheduler.Explanation{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"decisions": d})
}

// HeaderTraceEndpoints, on a /debug/trace download, is the number of
// endpoints in the pool when it was taken: the pool size to replay the
// trace on (`trimtab sim --trace FILE --servers N`).
const HeaderTraceEndpoints = "Trimtab-Trace-Endpoints"

var errRecordingOff = map[string]any{"error": map[string]string{
	"message": "traffic recording is off: set server.admin.record.enabled: true and restart",
	"type":    "not_found_error",
}}

// trace streams the traffic window as Mooncake JSONL (TrafficRecorder.WriteTrace).
func (a *Admin) trace(w http.ResponseWriter, _ *http.Request) {
	if !a.deps.Traffic.Enabled() {
		writeJSON(w, http.StatusNotFound, errRecordingOff)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/jsonl")
	h.Set("Content-Disposition", `attachment; filename="trimtab-trace.jsonl"`)
	if p := a.deps.View.Pool(); p != nil {
		h.Set(HeaderTraceEndpoints, strconv.Itoa(len(p.Endpoints)))
	}
	if _, err := a.deps.Traffic.WriteTrace(w); err != nil {
		a.deps.Logger.Debug("trace download cut", "err", err)
	}
}

// traceRestart discards the traffic window; the next request opens a new one.
func (a *Admin) traceRestart(w http.ResponseWriter, _ *http.Request) {
	if !a.deps.Traffic.Enabled() {
		writeJSON(w, http.StatusNotFound, errRecordingOff)
		return
	}
	a.deps.Traffic.Restart()
	w.WriteHeader(http.StatusNoContent)
}
