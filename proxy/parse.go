package proxy

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/trimtab/trimtab/internal/jsonscan"
	"github.com/trimtab/trimtab/proxy/parse"
)

// API is the format of a scheduled request body.
type API = parse.API

const (
	// APIOpenAI is OpenAI completions and chat completions
	// (POST /v1/completions, /v1/chat/completions).
	APIOpenAI = parse.OpenAI
	// APIResponses is the OpenAI Responses API (POST /v1/responses).
	APIResponses = parse.Responses
	// APIMessages is the Anthropic Messages API (POST /v1/messages).
	APIMessages = parse.Messages
)

// Parsed is one parsed request (see parse.Parsed).
type Parsed = parse.Parsed

// Parser reads request bodies for both request paths: package parse
// does the reading (its documentation says what the prompt bytes are),
// Parser answers its errors as *Error values and keeps the table of
// Responses continuations (lineage.go). It is safe for concurrent use.
type Parser struct {
	p       *parse.Parser
	lineage *lineage
}

// NewParser returns a parser. loraAdapters maps adapter names, as clients
// put them in "model", to their base model; it is copied.
func NewParser(loraAdapters map[string]string) *Parser {
	l := newLineage()
	return &Parser{p: parse.New(loraAdapters, l), lineage: l}
}

// Parse parses an OpenAI completions or chat completions body; it is
// ParseAPI(APIOpenAI, …).
func (ps *Parser) Parse(body []byte, sessionHeader string, out *Parsed) error {
	return ps.ParseAPI(APIOpenAI, body, sessionHeader, out)
}

// ParseAPI parses body, in the format of api, into out (see
// parse.Parser.Parse). Errors are *Error values, all 400: ErrInvalidJSON,
// ErrTooDeep, ErrNotObject, ErrMissingModel, ErrBadField.
func (ps *Parser) ParseAPI(api API, body []byte, sessionHeader string, out *Parsed) error {
	if err := ps.p.Parse(api, body, sessionHeader, out); err != nil {
		return parseError(err)
	}
	return nil
}

// parseError maps an error of package parse to the answer it gets.
func parseError(err error) *Error {
	switch err {
	case parse.ErrNotObject:
		return ErrNotObject
	case parse.ErrMissingModel:
		return ErrMissingModel
	case parse.ErrBadField:
		return ErrBadField
	case jsonscan.ErrTooDeep:
		return ErrTooDeep
	}
	return ErrInvalidJSON
}

// Learn records that the Responses response with id answered a request
// whose session key was key, so that its continuations (by
// previous_response_id) take that key. Safe for concurrent use.
func (ps *Parser) Learn(id []byte, key uint64) { ps.lineage.learn(idHash(id), key) }

// Paths of the scheduled APIs. Other paths under them (/v1/responses/{id},
// /v1/messages/count_tokens, …) are passed through, not scheduled.
const (
	PathCompletions = "/v1/completions"
	PathChat        = "/v1/chat/completions"
	PathResponses   = "/v1/responses"
	PathMessages    = "/v1/messages"
)

// scheduledAPI returns the API of a scheduled path; ok is false for any
// other path.
func scheduledAPI(path string) (api API, ok bool) {
	switch path {
	case PathCompletions, PathChat:
		return APIOpenAI, true
	case PathResponses:
		return APIResponses, true
	case PathMessages:
		return APIMessages, true
	}
	return APIOpenAI, false
}

func isScheduled(path string) bool { _, ok := scheduledAPI(path); return ok }

// apiOfPath returns the API of an HTTP/2 :path value (query string
// ignored), without allocating; APIOpenAI for any path that is not a
// Responses or Messages one.
func apiOfPath(path []byte) API {
	for i, c := range path {
		if c == '?' {
			path = path[:i]
			break
		}
	}
	switch string(path) {
	case PathResponses:
		return APIResponses
	case PathMessages:
		return APIMessages
	}
	return APIOpenAI
}

// apiOfHeader is apiOfPath of an ext_proc :path header.
func apiOfHeader(hv *corev3.HeaderValue) API {
	if raw := hv.GetRawValue(); len(raw) > 0 {
		return apiOfPath(raw)
	}
	return apiOfPath([]byte(hv.GetValue()))
}
