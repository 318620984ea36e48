package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	transport *http.Transport
	inflight  atomic.Int64
	budget    bodyBudget
	rr        atomic.Uint64
	srv       httpServer
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
	h := &HTTP{
		cfg:    cfg,
		sched:  deps.Scheduler,
		parser: NewParser(cfg.LoRAAdapters),
		deps:   deps,
		m:      newPathMetrics("proxy", deps.Registerer, deps.Scheduler.Pool, deps.Clock),
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
			retryAfter: cfg.RetryAfter, ln: deps.Listener, addr: cfg.HTTP.Addr},
	}
	h.budget.limit = cfg.BodyMemoryBytes
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

// ServeHTTP routes /v1/completions and /v1/chat/completions through the
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
	case p == "/v1/completions" || p == "/v1/chat/completions":
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

func (h *HTTP) reject(w http.ResponseWriter, e *Error) {
	h.m.count("none", e.Status)
	writeError(w, e, h.cfg.RetryAfter)
}

// reqState is the pooled per-request state of the scheduled path.
type reqState struct {
	p    Parsed
	body []byte
}

var statePool = sync.Pool{New: func() any { return new(reqState) }}

const maxPooledBody = 4 << 20

func putState(st *reqState) {
	if cap(st.body) > maxPooledBody {
		st.body = nil
	}
	if cap(st.p.prompt) > maxPooledBody {
		st.p.prompt = nil
	}
	st.p.Request = scheduler.Request{}
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
	clk := h.deps.Clock
	arrival := clk.Now()
	if !h.admit() {
		h.reject(w, ErrOverloaded)
		return
	}
	defer h.release()
	st := statePool.Get().(*reqState)
	defer putState(st)
	body, reserved, rerr := h.readRequestBody(w, r, st.body)
	st.body = body
	defer h.budget.free(reserved)
	if rerr != nil {
		h.reject(w, rerr)
		return
	}
	if err := h.parser.Parse(st.body, r.Header.Get(HeaderSessionID), &st.p); err != nil {
		h.reject(w, asError(err))
		return
	}
	req := &st.p.Request
	req.ID = r.Header.Get(HeaderRequestID)
	req.Arrival = arrival
	d, err := h.sched.Pick(r.Context(), req)
	if err != nil {
		h.reject(w, asError(err))
		return
	}
	h.forward(w, r, d, st.body)
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

func copyHeader(dst, src http.Header, drop map[string]bool) {
	var listed []string
	for _, v := range src["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				listed = append(listed, http.CanonicalHeaderKey(f))
			}
		}
	}
	for k, v := range src {
		if drop[k] || slices.Contains(listed, k) {
			continue
		}
		dst[k] = v
	}
}

func (h *HTTP) outbound(ctx context.Context, r *http.Request, addr string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, "http://"+addr+r.URL.RequestURI(), rd)
	if err != nil {
		return nil, err
	}
	copyHeader(out.Header, r.Header, dropRequestHeader)
	return out, nil
}

func retryableStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable
}

// forward sends the request to d.Endpoint (moving to fallbacks on any
// failure before the response headers, or a 502/503, while nothing
// reached the client yet) and
// streams the answer back. It finishes d exactly once.
func (h *HTTP) forward(w http.ResponseWriter, r *http.Request, d *scheduler.Decision, body []byte) {
	clk := h.deps.Clock
	start := clk.Now()
	ctx := r.Context()
	var resp *http.Response
	for attempt := 0; ; attempt++ {
		addr := d.Endpoint.Address
		out, err := h.outbound(ctx, r, addr, body)
		if err != nil {
			h.m.count(addr, http.StatusBadGateway)
			d.Done(scheduler.Outcome{Kind: scheduler.OutcomeError, Latency: clk.Since(start)})
			w.Header().Set(HeaderEndpoint, addr)
			writeError(w, ErrUpstream, h.cfg.RetryAfter)
			return
		}
		resp, err = h.transport.RoundTrip(out)
		switch {
		case err == nil && !retryableStatus(resp.StatusCode):
		case err == nil && attempt < h.cfg.HTTP.Retries && d.Fallbacks() > 0:
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			h.m.count(addr, resp.StatusCode)
			h.m.retries.Inc()
			d.Advance()
			continue
		case err == nil: // a 502/503 with no fallback left: pass it on
		case ctx.Err() == nil && attempt < h.cfg.HTTP.Retries && d.Advance():
			// Any failure before the first response byte (refused, reset
			// or closed before the headers, header timeout): nothing has
			// reached the client, so a fallback may still answer.
			h.m.count(addr, 0)
			h.m.retries.Inc()
			h.deps.Logger.Debug("endpoint failed before answering, retrying on fallback", "endpoint", addr, "err", err)
			continue
		default:
			kind := scheduler.OutcomeError
			if ctx.Err() != nil {
				kind = scheduler.OutcomeCanceled
			}
			h.m.count(addr, 0)
			h.recordIfSampled(d)
			d.Done(scheduler.Outcome{Kind: kind, Latency: clk.Since(start)})
			if kind == scheduler.OutcomeError {
				h.deps.Logger.Warn("endpoint failed before answering", "endpoint", addr, "attempts", attempt+1, "err", err)
				w.Header().Set(HeaderEndpoint, addr)
				writeError(w, ErrUpstream, h.cfg.RetryAfter)
			}
			return
		}
		break
	}
	defer resp.Body.Close()
	addr := d.Endpoint.Address
	em := h.m.endpoint(addr)
	hdr := w.Header()
	copyHeader(hdr, resp.Header, dropResponseHeader)
	hdr.Set(HeaderEndpoint, addr)
	sampled := h.deps.Recorder.Sample()
	if sampled || h.cfg.HTTP.ScoresHeader {
		x := d.Explain()
		if sampled {
			h.deps.Recorder.Record(x)
		}
		if h.cfg.HTTP.ScoresHeader {
			hdr.Set(HeaderScores, scoresHeader(x))
		}
	}
	w.WriteHeader(resp.StatusCode)
	h.m.count(addr, resp.StatusCode)
	res := stream(w, resp, clk, start, d)
	o := scheduler.Outcome{Status: resp.StatusCode, TTFT: res.ttfb, Latency: clk.Since(start)}
	switch {
	case res.clientGone || (res.err != nil && ctx.Err() != nil):
		o.Kind = scheduler.OutcomeCanceled
	case res.err != nil || resp.StatusCode >= 500:
		o.Kind = scheduler.OutcomeError
	}
	em.observe(res.ttfb.Seconds(), res.n > 0, o.Latency.Seconds())
	d.Done(o)
	if res.err != nil && o.Kind == scheduler.OutcomeError {
		h.deps.Logger.Warn("endpoint failed mid-response", "endpoint", addr, "err", res.err)
		abortStream(w, resp)
	}
}

func (h *HTTP) recordIfSampled(d *scheduler.Decision) {
	if h.deps.Recorder.Sample() {
		h.deps.Recorder.Record(d.Explain())
	}
}

type streamResult struct {
	n          int64
	ttfb       time.Duration
	err        error // upstream read error (not io.EOF)
	clientGone bool
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// stream copies resp.Body to w, flushing after every read so SSE events
// reach the client as they arrive. The first body byte (for a streamed
// completion, the first token) is reported to the decision, which stops
// counting the prompt as pending prefill on the endpoint (d is nil for
// pass-through requests, which are not scheduled).
func stream(w http.ResponseWriter, resp *http.Response, clk interface{ Since(time.Time) time.Duration }, start time.Time, d *scheduler.Decision) streamResult {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	rc := http.NewResponseController(w)
	var res streamResult
	// A stream (SSE, or any body of unknown length) may take a while to
	// produce its first byte: send the headers now, not with it.
	if resp.ContentLength < 0 {
		if err := rc.Flush(); err != nil {
			res.clientGone = true
			return res
		}
	}
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if res.n == 0 {
				res.ttfb = clk.Since(start)
				if d != nil {
					d.FirstByte()
				}
			}
			res.n += int64(n)
			if _, werr := w.Write(buf[:n]); werr != nil {
				res.clientGone = true
				return res
			}
			if ferr := rc.Flush(); ferr != nil {
				res.clientGone = true
				return res
			}
		}
		if err == io.EOF {
			return res
		}
		if err != nil {
			res.err = err
			return res
		}
	}
}

// abortStream ends a response whose endpoint broke mid-way: an SSE client
// gets an error event first; then the connection is cut (no clean end of
// the chunked body), so no client mistakes a truncated answer for a
// complete one.
func abortStream(w http.ResponseWriter, resp *http.Response) {
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		_, _ = w.Write([]byte("\n\ndata: "))
		_, _ = w.Write(ErrUpstreamBroken.JSON())
		_, _ = w.Write([]byte("\n\n"))
		_ = http.NewResponseController(w).Flush()
	}
	panic(http.ErrAbortHandler)
}

// scoresHeader renders the chosen endpoint's per-scorer breakdown as
// "total=T; name=score*weight; …", scorers in name order.
func scoresHeader(x scheduler.Explanation) string {
	for _, c := range x.Candidates {
		if c.Address != x.Chosen {
			continue
		}
		names := make([]string, 0, len(c.Scores))
		for n := range c.Scores {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		b.WriteString("total=")
		b.WriteString(strconv.FormatFloat(c.Total, 'f', 4, 64))
		for _, n := range names {
			fmt.Fprintf(&b, "; %s=%.4f*%g", n, c.Scores[n], x.Weights[n])
		}
		return b.String()
	}
	return ""
}

// models answers /v1/models with the union of the pool's models and the
// LoRA adapters of served base models, in the OpenAI list format.
func (h *HTTP) models(w http.ResponseWriter) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
		Parent  string `json:"parent,omitempty"`
	}
	seen := map[string]bool{}
	var list []model
	for _, e := range h.sched.Pool().Endpoints {
		for _, m := range e.Models {
			if !seen[m] {
				seen[m] = true
				list = append(list, model{ID: m, Object: "model", OwnedBy: "trimtab"})
			}
		}
	}
	for a, base := range h.cfg.LoRAAdapters {
		if seen[base] && !seen[a] {
			seen[a] = true
			list = append(list, model{ID: a, Object: "model", OwnedBy: "trimtab", Parent: base})
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	if list == nil {
		list = []model{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", list})
}

// passthrough forwards any other /v1/* request to a fresh endpoint (round
// robin), retrying the next one on any failure before the response
// headers. The scheduler is not
// involved: these are cheap metadata calls (tokenize, version, …).
func (h *HTTP) passthrough(w http.ResponseWriter, r *http.Request) {
	eps := h.sched.Pool().Pointers()
	var fresh []*scheduler.Endpoint
	for _, e := range eps {
		if e.State == scheduler.StateFresh {
			fresh = append(fresh, e)
		}
	}
	if len(fresh) == 0 {
		fresh = eps
	}
	if len(fresh) == 0 {
		h.reject(w, ErrNoEndpoints)
		return
	}
	body, reserved, rerr := h.readRequestBody(w, r, nil)
	defer h.budget.free(reserved)
	if rerr != nil {
		h.reject(w, rerr)
		return
	}
	clk := h.deps.Clock
	start := clk.Now()
	first := int(h.rr.Add(1) % uint64(len(fresh)))
	for attempt := 0; ; attempt++ {
		addr := fresh[(first+attempt)%len(fresh)].Address
		out, err := h.outbound(r.Context(), r, addr, body)
		if err != nil {
			w.Header().Set(HeaderEndpoint, addr)
			h.reject(w, ErrUpstream)
			return
		}
		resp, err := h.transport.RoundTrip(out)
		if err != nil {
			h.m.count(addr, 0)
			// As on the scheduled path: any failure before the first
			// response byte moves on to the next endpoint.
			if attempt < h.cfg.HTTP.Retries && attempt+1 < len(fresh) && r.Context().Err() == nil {
				h.m.retries.Inc()
				continue
			}
			if r.Context().Err() == nil {
				w.Header().Set(HeaderEndpoint, addr)
				writeError(w, ErrUpstream, h.cfg.RetryAfter)
			}
			return
		}
		copyHeader(w.Header(), resp.Header, dropResponseHeader)
		w.Header().Set(HeaderEndpoint, addr)
		w.WriteHeader(resp.StatusCode)
		h.m.count(addr, resp.StatusCode)
		res := stream(w, resp, clk, start, nil)
		resp.Body.Close()
		if res.err != nil && r.Context().Err() == nil {
			abortStream(w, resp)
		}
		return
	}
}
