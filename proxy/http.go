package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/trimtab/trimtab/scheduler"
)

// Headers the proxy reads or writes.
const (
	HeaderSessionID   = "X-Session-Id"
	HeaderRequestID   = "X-Request-Id"
	HeaderEndpoint    = "X-Trimtab-Endpoint"
	HeaderScores      = "X-Trimtab-Scores"
	HeaderDestination = "X-Gateway-Destination-Endpoint"
)

// HTTP is the OpenAI-compatible reverse proxy. Create it with NewHTTP and
// run it with Run; it is also an http.Handler.
type HTTP struct {
	cfg       Config
	sched     Scheduler
	parser    *Parser
	deps      Deps
	m         *pathMetrics
	hm        *httpMetrics
	timers    clock.WithDelayedExecution // times the stream idle timeout
	trusted   []netip.Prefix             // HTTPConfig.TrustedProxies
	transport *http.Transport
	inflight  atomic.Int64
	budget    bodyBudget
	rr        atomic.Uint64
	srv       httpServer
	tr        *tracer // nil: tracing off
}

// NewHTTP builds the proxy. cfg must be valid; deps.Scheduler is required.
// It registers trimtab_proxy_* metrics on deps.Registerer.
func NewHTTP(cfg Config, deps Deps) (*HTTP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Scheduler == nil {
		return nil, errors.New("proxy: NewHTTP needs Deps.Scheduler")
	}
	deps.defaults()
	trusted, err := cfg.HTTP.TrustedPrefixes()
	if err != nil {
		return nil, err
	}
	h := &HTTP{
		cfg:    cfg,
		sched:  deps.Scheduler,
		parser: NewParser(cfg.LoRAAdapters),
		deps:   deps,
		tr:     newTracer(deps.Tracer, deps.Scheduler),
		m:      newPathMetrics("proxy", deps.Registerer, deps.Scheduler.Pool, deps.Clock),
		hm:     newHTTPMetrics(deps.Registerer),
		timers: clock.RealClock{},
		transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: cfg.HTTP.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   cfg.HTTP.MaxIdleConnsPerHost,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: cfg.HTTP.ResponseHeaderTimeout,
			DisableCompression:    true, // bytes pass through as the endpoint sent them
			WriteBufferSize:       64 << 10,
			ReadBufferSize:        64 << 10,
		},
		srv: httpServer{name: "http", drain: cfg.DrainTimeout, idle: cfg.IdleTimeout, maxConns: cfg.HTTP.MaxConnections,
			perClient: cfg.HTTP.MaxConnectionsPerClient, exempt: trusted,
			retryAfter: cfg.RetryAfter, ln: deps.Listener, addr: cfg.HTTP.Addr},
	}
	h.budget.limit = cfg.BodyMemoryBytes
	h.trusted = trusted
	h.srv.refused = h.hm.connRefused
	if c, ok := deps.Clock.(clock.WithDelayedExecution); ok {
		h.timers = c
	}
	return h, nil
}

// Listen binds the listen address (or adopts Deps.Listener) and returns
// the bound address, so callers can learn a :0 port before Run. Run calls
// it if needed.
func (h *HTTP) Listen() (net.Addr, error) { return h.srv.bind() }

// Run serves until ctx is cancelled, then drains for up to
// Config.DrainTimeout and returns after every handler has returned.
func (h *HTTP) Run(ctx context.Context) error {
	defer h.transport.CloseIdleConnections()
	return h.srv.run(ctx, h)
}

// ServeHTTP routes /v1/completions, /v1/chat/completions, /v1/responses
// (OpenAI Responses) and /v1/messages (Anthropic Messages) through the
// scheduler, answers /v1/models, and passes other /v1/* paths through.
//
// Paths with dot segments ("." or "..", plain or percent-encoded) get 400;
// doubled slashes are collapsed before routing and forwarding. Pass-through
// accepts the methods the OpenAI API uses (GET, POST, DELETE); others get
// 405.
func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !normalisePath(r.URL) {
		h.reject(w, ErrBadPath)
		return
	}
	switch p := r.URL.Path; {
	case isScheduled(p):
		if r.Method != http.MethodPost {
			h.rejectMethod(w, http.MethodPost)
			return
		}
		h.scheduled(w, r)
	case p == "/v1/models":
		if r.Method != http.MethodGet {
			h.rejectMethod(w, http.MethodGet)
			return
		}
		h.models(w)
	case strings.HasPrefix(p, "/v1/"):
		switch r.Method {
		case http.MethodGet, http.MethodPost, http.MethodDelete:
		default:
			h.rejectMethod(w, passThroughMethods)
			return
		}
		h.passthrough(w, r)
	default:
		h.reject(w, ErrNotFound)
	}
}

// passThroughMethods are the methods of the OpenAI API, the only ones
// passed through.
const passThroughMethods = "GET, POST, DELETE"

func (h *HTTP) rejectMethod(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	h.reject(w, ErrMethod)
}

// normalisePath collapses doubled slashes in u's path (decoded and
// escaped alike) and reports false when the decoded path has a dot
// segment: "." or "..", however it was encoded, split at "/" or "\\".
func normalisePath(u *url.URL) bool {
	p := u.Path
	for start := 0; start <= len(p); {
		end := start
		for end < len(p) && p[end] != '/' && p[end] != '\\' {
			end++
		}
		if seg := p[start:end]; seg == "." || seg == ".." {
			return false
		}
		start = end + 1
	}
	if strings.Contains(u.Path, "//") {
		u.Path = collapseSlashes(u.Path)
		if u.RawPath != "" {
			u.RawPath = collapseSlashes(u.RawPath)
		}
	}
	return true
}

func collapseSlashes(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && i > 0 && p[i-1] == '/' {
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

func (h *HTTP) reject(w http.ResponseWriter, e *Error) { h.rejectAPI(w, APIOpenAI, e) }

// rejectAPI answers a request to api with e, in api's error envelope.
func (h *HTTP) rejectAPI(w http.ResponseWriter, api API, e *Error) {
	h.m.count("none", e.Status)
	writeError(w, api, e, h.cfg.RetryAfter)
}

// reqState is the pooled per-request state of the scheduled path.
type reqState struct {
	p    Parsed
	body []byte
	us   usageScan // the response's usage, once the pick is made
	rec  TraceSlot // the request's record in the traffic window
}

var statePool = sync.Pool{New: func() any { return new(reqState) }}

const maxPooledBody = 4 << 20

func putState(st *reqState) {
	if cap(st.body) > maxPooledBody {
		st.body = nil
	}
	st.p.DropHugeBuffers(maxPooledBody)
	st.p.Request = scheduler.Request{}
	st.rec = TraceSlot{}
	statePool.Put(st)
}

func (h *HTTP) admit() bool {
	if h.cfg.HTTP.MaxInFlight <= 0 {
		return true
	}
	if h.inflight.Add(1) > int64(h.cfg.HTTP.MaxInFlight) {
		h.inflight.Add(-1)
		return false
	}
	return true
}

func (h *HTTP) release() {
	if h.cfg.HTTP.MaxInFlight > 0 {
		h.inflight.Add(-1)
	}
}

func (h *HTTP) scheduled(w http.ResponseWriter, r *http.Request) {
	if h.tr != nil {
		tw, tr, span := h.tr.startHTTP(w, r)
		defer h.tr.endHTTP(span, tw)
		w, r = tw, tr
	}
	clk := h.deps.Clock
	arrival := clk.Now()
	api, _ := scheduledAPI(r.URL.Path)
	if !h.admit() {
		h.rejectAPI(w, api, ErrOverloaded)
		return
	}
	defer h.release()
	st := statePool.Get().(*reqState)
	defer putState(st)
	body, reserved, rerr := h.readRequestBody(w, r, st.body)
	st.body = body
	defer h.budget.free(reserved)
	if rerr != nil {
		h.rejectAPI(w, api, rerr)
		return
	}
	if err := h.parser.ParseAPI(api, st.body, r.Header.Get(HeaderSessionID), &st.p); err != nil {
		h.rejectAPI(w, api, asError(err))
		return
	}
	req := &st.p.Request
	req.ID = r.Header.Get(HeaderRequestID)
	req.Arrival = arrival
	d, lease, err := h.pick(r, req)
	if err != nil {
		h.rejectAPI(w, api, pickError(err, req))
		return
	}
	st.rec = h.deps.Traffic.Record(req)
	h.tr.decided(r.Context(), d)
	h.forward(w, r, api, d, st, effectiveKey(req))
	lease.Release()
}

// dropRequestHeader lists inbound headers never forwarded: hop-by-hop
// headers and any that could steer routing.
var dropRequestHeader = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	HeaderDestination: true, HeaderDestination + "-Subset": true, "Host": true,
}

var dropResponseHeader = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
