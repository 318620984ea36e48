package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/scheduler"
)

// Error is a request error with the HTTP status and OpenAI error type and
// code it is answered with. Both paths (HTTP and ext_proc) render it as
// {"error":{"message":…,"type":…,"param":null,"code":…}}, or, for a
// request to the Anthropic Messages API, in that API's envelope (JSONFor).
type Error struct {
	// Status is the HTTP status (400, 404, 405, 408, 413, 429, 502, 503,
	// 504).
	Status int
	// Type is the OpenAI error type ("invalid_request_error", …).
	Type string
	// Code is a short machine-readable code ("model_not_found", …).
	Code string
	// Message is for humans.
	Message string
	// DropReason, when set, is sent as the X-Trimtab-Drop-Reason header
	// (flow control's refusals).
	DropReason string
}

// Error implements error.
func (e *Error) Error() string { return e.Message }

// Errors the proxy answers with. They are values so the error path does not
// allocate either; compare with errors.Is or by pointer.
var (
	ErrBodyTooLarge = &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
		Code: "body_too_large", Message: "request body exceeds the size limit"}
	ErrBodyTimeout = &Error{Status: http.StatusRequestTimeout, Type: "invalid_request_error",
		Code: "body_timeout", Message: "the request body did not arrive within the read deadline"}
	ErrBodyMemory = &Error{Status: http.StatusServiceUnavailable, Type: "server_error",
		Code: "body_memory_exhausted", Message: "request bodies in flight use the whole body memory budget; retry later"}
	ErrInvalidJSON = &Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
		Code: "invalid_json", Message: "request body is not valid JSON"}
	ErrNotObject = &Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
		Code: "invalid_json", Message: "request body must be a JSON object"}
	ErrMissingModel = &Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
		Code: "missing_model", Message: "request must name a model (a non-empty string)"}
	ErrBadField = &Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
		Code: "invalid_field", Message: "a request field has the wrong type (stream must be a boolean; prompt a string, strings or token ids; messages objects with string or part-array content; instructions and system a string or parts; tools an array; input a string or items)"}
	ErrTooDeep = &Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
		Code: "invalid_json", Message: "request body nests too deeply"}
	ErrUnknownModel = &Error{Status: http.StatusNotFound, Type: "invalid_request_error",
		Code: "model_not_found", Message: "no endpoint serves the requested model"}
	ErrNoEndpoints = &Error{Status: http.StatusServiceUnavailable, Type: "server_error",
		Code: "no_endpoints", Message: "no endpoint is available; retry later"}
	ErrUnreachable = &Error{Status: http.StatusServiceUnavailable, Type: "server_error",
		Code: "endpoints_unreachable", Message: "every endpoint for the request is unreachable (its metrics scrapes keep failing); retry later"}
	ErrOverloaded = &Error{Status: http.StatusTooManyRequests, Type: "server_error",
		Code: "overloaded", Message: "too many requests in flight; retry later"}
	ErrConnections = &Error{Status: http.StatusServiceUnavailable, Type: "server_error",
		Code: "too_many_connections", Message: "too many open connections; retry later"}
	ErrClientConnections = &Error{Status: http.StatusTooManyRequests, Type: "server_error",
		Code: "too_many_client_connections", Message: "too many open connections from your address; close idle ones or retry later"}
	ErrUpstream = &Error{Status: http.StatusBadGateway, Type: "server_error",
		Code: "upstream_unreachable", Message: "the chosen endpoint could not be reached"}
	ErrUpstreamBroken = &Error{Status: http.StatusBadGateway, Type: "server_error",
		Code: "upstream_broken", Message: "the endpoint failed while streaming the response"}
	ErrUpstreamTimeout = &Error{Status: http.StatusGatewayTimeout, Type: "server_error",
		Code: "upstream_timeout", Message: "the endpoint sent no response bytes within the stream idle timeout"}
	ErrNotFound = &Error{Status: http.StatusNotFound, Type: "invalid_request_error",
		Code: "not_found", Message: "unknown path"}
	ErrBadPath = &Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
		Code: "invalid_path", Message: "the path must not contain dot segments (. or ..), plain or percent-encoded"}
	ErrMethod = &Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
		Code: "method_not_allowed", Message: "method not allowed on this path"}
)

// asError maps any error from parsing or picking to an *Error; unknown
// errors become 503 (the request could not be placed).
func asError(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case flowError(err) != nil:
		return flowError(err)
	case errors.Is(err, scheduler.ErrUnknownModel):
		return ErrUnknownModel
	case errors.Is(err, scheduler.ErrNoEndpoints):
		return ErrNoEndpoints
	case errors.Is(err, scheduler.ErrUnreachable):
		return ErrUnreachable
	default:
		return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "pick_failed", Message: err.Error()}
	}
}

// errorBody is the OpenAI error envelope.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// JSON renders the OpenAI-style error body.
func (e *Error) JSON() []byte {
	b, _ := json.Marshal(errorBody{Error: errorDetail{Message: e.Message, Type: e.Type, Code: e.Code}})
	return b
}

// JSONFor renders the error body in api's envelope: the Messages API's
// {"type":"error","error":{"type":…,"message":…}} with Anthropic's error
// type for the status; the OpenAI envelope (JSON) for every other API.
func (e *Error) JSONFor(api API) []byte {
	if api != APIMessages {
		return e.JSON()
	}
	return messagesError(anthropicType(e.Status), e.Message)
}

// anthropicType is the Messages API's error type for an HTTP status.
func anthropicType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestTimeout:
		return "invalid_request_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	return "api_error"
}

func messagesError(typ, msg string) []byte {
	type detail struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	b, _ := json.Marshal(struct {
		Type  string `json:"type"`
		Error detail `json:"error"`
	}{"error", detail{typ, msg}})
	return b
}

// sseError renders e as the error event of api's event stream, after a
// blank line that ends any event the endpoint left unfinished: OpenAI
// chat and completions send a bare data line with the error envelope;
// Responses an "error" event {"type":"error","code","message","param"};
// Messages an "error" event {"type":"error","error":{"type","message"}}.
func sseError(api API, e *Error) []byte {
	var v any
	switch api {
	case APIResponses:
		v = struct {
			Type    string  `json:"type"`
			Code    string  `json:"code"`
			Message string  `json:"message"`
			Param   *string `json:"param"`
		}{"error", e.Code, e.Message, nil}
	case APIMessages:
		b := messagesError("api_error", e.Message)
		return append(append([]byte("\n\nevent: error\ndata: "), b...), "\n\n"...)
	default:
		return append(append([]byte("\n\ndata: "), e.JSON()...), "\n\n"...)
	}
	b, _ := json.Marshal(v)
	return append(append([]byte("\n\nevent: error\ndata: "), b...), "\n\n"...)
}

// retryable reports whether an answer should carry Retry-After.
func (e *Error) retryable() bool {
	return e.Status == http.StatusServiceUnavailable || e.Status == http.StatusTooManyRequests
}

// retryAfterValue renders d as whole seconds, rounded up, at least 1.
func retryAfterValue(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}

// writeError answers an HTTP request to api with e.
func writeError(w http.ResponseWriter, api API, e *Error, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.retryable() {
		h.Set("Retry-After", retryAfterValue(retryAfter))
	}
	if e.DropReason != "" {
		h.Set(flow.HeaderDropReason, e.DropReason)
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSONFor(api))
}

// maxEchoedModel bounds the bytes of a client's model name that an error
// message repeats.
const maxEchoedModel = 64

// pickError is asError for an error from picking req: an unknown model is
// answered with a message that names what the request asked for — the
// model, and the LoRA adapter mapped onto it if any — quoted and cut to
// maxEchoedModel bytes each, so a client sees its typo. It allocates only
// on that path.
func pickError(err error, req *scheduler.Request) *Error {
	e := asError(err)
	if e != ErrUnknownModel || req == nil {
		return e
	}
	named := *e
	named.Message = e.Message + " " + echoModel(req.Model)
	if req.LoRA != "" {
		named.Message += " (adapter " + echoModel(req.LoRA) + ")"
	}
	return &named
}

// echoModel quotes a client's model name for an error message, cut to
// maxEchoedModel bytes (on a UTF-8 boundary) and marked "…" when cut.
func echoModel(s string) string {
	if len(s) <= maxEchoedModel {
		return strconv.Quote(s)
	}
	cut := maxEchoedModel
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut] + "…")
}
