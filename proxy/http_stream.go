package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
	h.tr.inject(ctx, out.Header)
	return out, nil
}

func retryableStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable
}

// forward sends the request to d.Endpoint (moving to fallbacks on any
// failure before the response headers, or a 502/503, while nothing
// reached the client yet) and
// streams the answer back. It finishes d exactly once.
func (h *HTTP) forward(w http.ResponseWriter, r *http.Request, api API, d *scheduler.Decision, body []byte) {
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
			writeError(w, api, ErrUpstream, h.cfg.RetryAfter)
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
				writeError(w, api, ErrUpstream, h.cfg.RetryAfter)
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
		abortStream(w, resp, api)
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
// gets an error event in its API's format first (sseError); then the
// connection is cut (no clean end of the chunked body), so no client
// mistakes a truncated answer for a complete one.
func abortStream(w http.ResponseWriter, resp *http.Response, api API) {
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		_, _ = w.Write(sseError(api, ErrUpstreamBroken))
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
				writeError(w, APIOpenAI, ErrUpstream, h.cfg.RetryAfter)
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
			abortStream(w, resp, APIOpenAI)
		}
		return
	}
}
