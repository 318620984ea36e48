package proxy

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/scheduler"
)

// Answers to requests flow control refuses. Each carries its drop reason
// (the X-Trimtab-Drop-Reason header) and, being 429 or 503, Retry-After.
var (
	ErrFlowQueueFull = &Error{Status: http.StatusTooManyRequests, Type: "server_error", Code: "flow_queue_full",
		DropReason: flow.ReasonQueueFull, Message: "every endpoint is saturated and the router's queue is full; retry later"}
	ErrFlowShed = &Error{Status: http.StatusTooManyRequests, Type: "server_error", Code: "flow_shed",
		DropReason: flow.ReasonShed, Message: "the request was shed to make room for higher-priority requests; retry later"}
	ErrFlowExpired = &Error{Status: http.StatusTooManyRequests, Type: "server_error", Code: "flow_ttl_expired",
		DropReason: flow.ReasonTTL, Message: "no endpoint had room within the request's TTL; retry later"}
	ErrFlowStopped = &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "flow_stopped",
		DropReason: flow.ReasonStopped, Message: "the router is shutting down; retry later"}
)

// flowError maps a flow-control refusal to its answer; nil for other
// errors.
func flowError(err error) *Error {
	var de *flow.DropError
	if !errors.As(err, &de) {
		return nil
	}
	switch de {
	case flow.ErrShed:
		return ErrFlowShed
	case flow.ErrExpired:
		return ErrFlowExpired
	case flow.ErrStopped:
		return ErrFlowStopped
	default:
		return ErrFlowQueueFull
	}
}

// pickFlow picks for req through flow control when fl is set (classifying
// by header, which returns a request header by lower-case name), else
// straight from sched. The caller releases the Lease when the request
// ends.
func pickFlow(ctx context.Context, sched Scheduler, fl *flow.Controller, req *scheduler.Request, header func(string) string) (*scheduler.Decision, flow.Lease, error) {
	if fl == nil {
		d, err := sched.Pick(ctx, req)
		return d, flow.Lease{}, err
	}
	return fl.Pick(ctx, req, fl.Classifier().Classify(req.Model, header), 0)
}

// pick is the HTTP proxy's pickFlow.
func (h *HTTP) pick(r *http.Request, req *scheduler.Request) (*scheduler.Decision, flow.Lease, error) {
	if h.deps.Flow == nil {
		d, err := h.sched.Pick(r.Context(), req)
		return d, flow.Lease{}, err
	}
	return pickFlow(r.Context(), h.sched, h.deps.Flow, req, r.Header.Get)
}

// flowHeaders keeps, for an ext_proc exchange, the request headers flow
// control classifies by (Classifier.Headers), at most maxFlowHeaders.
type flowHeaders struct {
	n    int
	keys [maxFlowHeaders]string
	vals [maxFlowHeaders]string
}

const maxFlowHeaders = 8

// keep records the header key (lower case) when fl classifies by it.
func (f *flowHeaders) keep(fl *flow.Controller, key, value string) {
	if f.n == maxFlowHeaders {
		return
	}
	for _, name := range fl.Classifier().Headers() {
		if key == name {
			f.keys[f.n], f.vals[f.n] = key, value
			f.n++
			return
		}
	}
}

// get returns the value kept for name ("" when none).
func (f *flowHeaders) get(name string) string {
	name = strings.ToLower(name)
	for i := 0; i < f.n; i++ {
		if f.keys[i] == name {
			return f.vals[i]
		}
	}
	return ""
}
