package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

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
	h.forwardedFor(out.Header, r.RemoteAddr)
	h.tr.inject(ctx, out.Header)
	return out, nil
}

// forwardedHeaders are the headers by which proxies tell an endpoint who
// the client was; only a trusted peer's are forwarded.
var forwardedHeaders = [...]string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"}

// forwardedFor records the peer at remote ("ip:port") in hdr's
// X-Forwarded-For: appended to the list when the peer is a trusted proxy
// (HTTPConfig.TrustedProxies), the list's only entry otherwise, after the
// untrusted peer's forwarding headers are dropped. A remote address that is
// not ip:port (not TCP) is recorded nowhere, and trusted by no one.
func (h *HTTP) forwardedFor(hdr http.Header, remote string) {
	ap, err := netip.ParseAddrPort(remote)
	peer := ap.Addr().Unmap().WithZone("")
	trusted := err == nil && h.isTrusted(peer)
	if !trusted {
		for _, k := range forwardedHeaders {
			delete(hdr, k)
		}
	}
	if err != nil {
		return
	}
	ip := peer.String()
	if prior := hdr["X-Forwarded-For"]; len(prior) > 0 {
		ip = strings.Join(prior, ", ") + ", " + ip
	}
	hdr["X-Forwarded-For"] = []string{ip}
}

// isTrusted reports whether a is in one of the trusted proxies' prefixes.
func (h *HTTP) isTrusted(a netip.Addr) bool {
	for _, p := range h.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func retryableStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable
}

// forward sends the request to d.Endpoint and streams the answer back. It
// moves to the next fallback, while nothing has reached the client, on any
// failure before the response headers, on a 502/503, and on an endpoint
// that sends its headers but fails or goes silent (http.stream_idle_timeout)
// before the first body byte. It finishes d exactly once.
//
// While a retry is possible, and for a body of declared length, the
// response headers are held until the first body byte, so a failure
// before it can still be retried or answered in the API's error format.
// With no retry left, a stream's headers go out at once, as the endpoint
// sent them.
func (h *HTTP) forward(w http.ResponseWriter, r *http.Request, api API, d *scheduler.Decision, st *reqState, key uint64) {
	body := st.body
	clk := h.deps.Clock
	start := clk.Now()
	ctx := r.Context()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var (
		resp *http.Response
		ub   *upstreamBody
		held bool // the first body bytes are in buf (ub.peek)
	)
	for attempt := 0; ; attempt++ {
		addr := d.Endpoint.Address
		retry := attempt < h.cfg.HTTP.Retries && d.Fallbacks() > 0
		actx, cancel := context.WithCancel(ctx)
		out, err := h.outbound(actx, r, addr, body)
		if err != nil {
			cancel()
			h.m.count(addr, http.StatusBadGateway)
			d.Done(scheduler.Outcome{Kind: scheduler.OutcomeError, Latency: clk.Since(start)})
			w.Header().Set(HeaderEndpoint, addr)
			writeError(w, api, ErrUpstream, h.cfg.RetryAfter)
			return
		}
		resp, err = h.transport.RoundTrip(out)
		switch {
		case err == nil && !retryableStatus(resp.StatusCode):
		case err == nil && retry:
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			cancel()
			h.m.count(addr, resp.StatusCode)
			h.m.retries.Inc()
			d.Advance()
			continue
		case err == nil: // a 502/503 with no fallback left: pass it on
		case ctx.Err() == nil && attempt < h.cfg.HTTP.Retries && d.Advance():
			// Any failure before the first response byte (refused, reset
			// or closed before the headers, header timeout): nothing has
			// reached the client, so a fallback may still answer.
			cancel()
			h.m.count(addr, 0)
			h.m.retries.Inc()
			h.deps.Logger.Debug("endpoint failed before answering, retrying on fallback", "endpoint", addr, "err", err)
			continue
		default:
			cancel()
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
				writeError(w, api, ErrUpstream, h.cfg.RetryAfter)
			}
			return
		}
		ub = newUpstreamBody(resp.Body, h.timers, h.cfg.HTTP.StreamIdleTimeout, cancel)
		held = retry || resp.ContentLength >= 0
		if !held {
			break
		}
		n, err := ub.peek(buf)
		if n > 0 || err == nil || err == io.EOF {
			break
		}
		// Headers, then a failure or silence before the first body byte:
		// nothing has reached the client yet.
		ub.Close()
		h.m.count(addr, 0)
		timedOut := ub.timedOut()
		if timedOut {
			h.hm.streamTimeout(0)
		}
		if ctx.Err() == nil && retry {
			h.m.retries.Inc()
			h.deps.Logger.Debug("endpoint failed before its first body byte, retrying on fallback", "endpoint", addr, "err", err)
			d.Advance()
			continue
		}
		kind := scheduler.OutcomeError
		if ctx.Err() != nil {
			kind = scheduler.OutcomeCanceled
		}
		h.recordIfSampled(d)
		d.Done(scheduler.Outcome{Kind: kind, Status: resp.StatusCode, Latency: clk.Since(start)})
		if kind == scheduler.OutcomeError {
			h.deps.Logger.Warn("endpoint failed before its first body byte", "endpoint", addr, "attempts", attempt+1, "err", err)
			e := ErrUpstreamBroken
			if timedOut {
				e = ErrUpstreamTimeout
			}
			w.Header().Set(HeaderEndpoint, addr)
			writeError(w, api, e, h.cfg.RetryAfter)
		}
		return
	}
	defer ub.Close()
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
	var sn *idSniffer
	if api == APIResponses && key != 0 && resp.StatusCode == http.StatusOK {
		sn = sniffers.Get().(*idSniffer)
		sn.p, sn.key = h.parser, key
		defer putSniffer(sn)
	}
	us := &st.us
	us.reset(isEventStream(resp.Header.Get("Content-Type")))
	res := stream(w, ub, !held && resp.ContentLength < 0, buf, clk, start, d, sn, us)
	us.finish()
	o := scheduler.Outcome{Status: resp.StatusCode, TTFT: res.ttfb, Latency: clk.Since(start), Usage: us.usage()}
	switch {
	case res.clientGone || (res.err != nil && ctx.Err() != nil):
		o.Kind = scheduler.OutcomeCanceled
	case res.err != nil || resp.StatusCode >= 500:
		o.Kind = scheduler.OutcomeError
	}
	em.observe(res.ttfb.Seconds(), res.n > 0, o.Latency.Seconds())
	if res.err != nil && ub.timedOut() {
		h.hm.streamTimeout(res.n)
	}
	if o.Kind == scheduler.OutcomeSuccess {
		st.rec.SetOutput(outputTokens(o.Usage)) // before Done: a finished request's trace entry is whole
	}
	d.Done(o)
	if res.err != nil && o.Kind == scheduler.OutcomeError {
		h.deps.Logger.Warn("endpoint failed mid-response", "endpoint", addr, "err", res.err)
		abortStream(w, resp, api, streamError(ub))
	}
}

// streamError is the error a stream cut by body's failure reports.
func streamError(body *upstreamBody) *Error {
	if body.timedOut() {
		return ErrUpstreamTimeout
	}
	return ErrUpstreamBroken
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

// stream copies body to w through buf, flushing after every read so SSE
// events reach the client as they arrive; flushFirst sends the headers
// before the first body byte (for a stream, which may take a while to
// produce it). The first body byte (for a streamed completion, the first
// token) is reported to the decision, which stops counting the prompt as
// pending prefill on the endpoint (d is nil for pass-through requests,
// which are not scheduled). sn, when not nil, is fed the body's bytes (a
// Responses response's id). Each read, once sent on and flushed, is given
// to us (nil: none) to find the usage the endpoint reports.
func stream(w http.ResponseWriter, body io.Reader, flushFirst bool, buf []byte, clk interface{ Since(time.Time) time.Duration }, start time.Time, d *scheduler.Decision, sn *idSniffer, us *usageScan) streamResult {
	rc := http.NewResponseController(w)
	var res streamResult
	if flushFirst {
		if err := rc.Flush(); err != nil {
			res.clientGone = true
			return res
		}
	}
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if res.n == 0 {
				res.ttfb = clk.Since(start)
				if d != nil {
					d.FirstByte()
				}
			}
			res.n += int64(n)
			sn.feed(buf[:n])
			if _, werr := w.Write(buf[:n]); werr != nil {
				res.clientGone = true
				return res
			}
			if ferr := rc.Flush(); ferr != nil {
				res.clientGone = true
				return res
			}
			if us != nil {
				us.write(buf[:n])
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
// gets e as an error event in its API's format first (sseError); then the
// connection is cut (no clean end of the chunked body), so no client
// mistakes a truncated answer for a complete one.
func abortStream(w http.ResponseWriter, resp *http.Response, api API, e *Error) {
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		_, _ = w.Write(sseError(api, e))
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
		actx, cancel := context.WithCancel(r.Context())
		out, err := h.outbound(actx, r, addr, body)
		if err != nil {
			cancel()
			w.Header().Set(HeaderEndpoint, addr)
			h.reject(w, ErrUpstream)
			return
		}
		resp, err := h.transport.RoundTrip(out)
		if err != nil {
			cancel()
			h.m.count(addr, 0)
			// As on the scheduled path: any failure before the first
			// response byte moves on to the next endpoint.
			if attempt < h.cfg.HTTP.Retries && attempt+1 < len(fresh) && r.Context().Err() == nil {
				h.m.retries.Inc()
				continue
			}
			if r.Context().Err() == nil {
				w.Header().Set(HeaderEndpoint, addr)
				writeError(w, APIOpenAI, ErrUpstream, h.cfg.RetryAfter)
			}
			return
		}
		copyHeader(w.Header(), resp.Header, dropResponseHeader)
		w.Header().Set(HeaderEndpoint, addr)
		w.WriteHeader(resp.StatusCode)
		h.m.count(addr, resp.StatusCode)
		ub := newUpstreamBody(resp.Body, h.timers, h.cfg.HTTP.StreamIdleTimeout, cancel)
		bp := bufPool.Get().(*[]byte)
		res := stream(w, ub, resp.ContentLength < 0, *bp, clk, start, nil, nil, nil)
		bufPool.Put(bp)
		ub.Close()
		if res.err != nil && ub.timedOut() {
			h.hm.streamTimeout(res.n)
		}
		if res.err != nil && r.Context().Err() == nil {
			abortStream(w, resp, APIOpenAI, streamError(ub))
		}
		return
	}
}
