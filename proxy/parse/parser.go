package parse

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/trimtab/trimtab/internal/jsonscan"
	"github.com/trimtab/trimtab/scheduler"
)

// API is the dialect of a request body.
type API uint8

const (
	// OpenAI is OpenAI completions and chat completions
	// (POST /v1/completions, /v1/chat/completions).
	OpenAI API = iota
	// Responses is the OpenAI Responses API (POST /v1/responses).
	Responses
	// Messages is the Anthropic Messages API (POST /v1/messages).
	Messages
)

// Errors of a well-formed body that is not a request. They are values so
// the error path does not allocate; compare with errors.Is.
var (
	// ErrNotObject: the body is valid JSON but not an object.
	ErrNotObject = errors.New("parse: request body is not a JSON object")
	// ErrMissingModel: "model" is absent or an empty string.
	ErrMissingModel = errors.New("parse: request names no model")
	// ErrBadField: a field the parser reads has the wrong type.
	ErrBadField = errors.New("parse: a request field has the wrong type")
)

// Continuations give a Responses continuation its session key: the key
// of the request whose response has the id previous_response_id names.
// ContinuationKey must be safe for concurrent use, must not keep id and
// returns 0 for no key.
type Continuations interface {
	ContinuationKey(id []byte) uint64
}

// Parser parses request bodies. It is safe for concurrent use.
type Parser struct {
	adapters map[string]loraEntry
	names    interner
	cont     Continuations
}

type loraEntry struct{ adapter, base string }

// New returns a parser. loraAdapters maps adapter names, as clients put
// them in "model", to their base model; it is copied. cont gives
// Responses continuations their session key; nil: a continuation's key
// comes from its conversation like any other request's.
func New(loraAdapters map[string]string, cont Continuations) *Parser {
	p := &Parser{adapters: make(map[string]loraEntry, len(loraAdapters)), cont: cont}
	for a, b := range loraAdapters {
		p.adapters[a] = loraEntry{adapter: a, base: b}
	}
	return p
}

// Parsed is one parsed request. It is reusable: Parse resets it and keeps
// its buffers, so recycle it to avoid allocating.
type Parsed struct {
	// Request is the scheduler request. Request.Prompt aliases a buffer of
	// the Parsed and is valid until the next Parse or Reset.
	Request scheduler.Request
	// Stream is the request's "stream" flag.
	Stream bool
	// Chat is true when the prompt was rendered from chat completions'
	// "messages".
	Chat bool

	prompt  []byte
	alt     []byte // the prompt's sections put in order (swapped with prompt)
	scratch []byte
	secs    [numSections]span
	// rootLen is the length of the conversation's root within its section
	// (0: none).
	rootLen int
}

// Reset clears the request, keeping the buffers.
func (p *Parsed) Reset() {
	p.Request = scheduler.Request{}
	p.Stream, p.Chat = false, false
	p.prompt = p.prompt[:0]
	p.alt = p.alt[:0]
	p.scratch = p.scratch[:0]
	p.secs = [numSections]span{}
	p.rootLen = 0
}

// DropHugeBuffers forgets prompt buffers larger than limit bytes, so a
// pooled Parsed does not keep one huge request's memory.
func (p *Parsed) DropHugeBuffers(limit int) {
	if cap(p.prompt) > limit {
		p.prompt = nil
	}
	if cap(p.alt) > limit {
		p.alt = nil
	}
}

// rawStr is a string value as it appears in the body.
type rawStr struct {
	raw []byte
	esc bool
	ok  bool
}

func (r rawStr) set() bool { return r.ok && len(r.raw) > 0 }

// fields are the top-level values of a body, before rendering.
type fields struct {
	model, salt rawStr
	// ids are the body's session id candidates, most preferred first
	// (which keys fill which slot depends on the API).
	ids [2]rawStr
	// prev is a Responses continuation's previous_response_id.
	prev rawStr
}

// Parse parses body, in the dialect api, into out (which it resets
// first). sessionHeader is the x-session-id header value; when empty the
// session id comes from the body: "session_id", else "user" (OpenAI);
// "conversation" (a string, or an object's "id"), else "user"
// (Responses); "metadata"."user_id" (Messages). Without a session id the
// request's SessionKey is derived from the conversation's lineage (see the
// package documentation).
func (ps *Parser) Parse(api API, body []byte, sessionHeader string, out *Parsed) error {
	out.Reset()
	var c chat
	c.s.Reset(body)
	s := &c.s
	if s.End() {
		return jsonscan.ErrSyntax
	}
	if s.Peek() != '{' {
		if err := s.Value(0); err != nil {
			return err
		}
		if !s.End() {
			return jsonscan.ErrSyntax
		}
		return ErrNotObject
	}
	var f fields
	empty, err := s.Open('{')
	if err != nil {
		return err
	}
	for !empty {
		k, kesc, err := s.Key()
		if err != nil {
			return err
		}
		if kesc {
			out.scratch = jsonscan.Unescape(out.scratch[:0], k)
			k = out.scratch
		}
		s.WS()
		switch string(k) {
		case "model":
			if f.model.raw, f.model.esc, err = c.stringField(1); err != nil {
				return err
			}
			f.model.ok = true
		case "stream":
			out.Stream, err = c.boolField()
		case "cache_salt":
			f.salt.raw, f.salt.esc, f.salt.ok, err = c.optString(1)
		default:
			start, sec := len(out.prompt), -1
			switch api {
			case OpenAI:
				err = openAI{&c}.field(k, out, &f)
			case Responses:
				sec, err = responses{&c}.field(k, out, &f)
			case Messages:
				sec, err = anthropic{&c}.field(k, out, &f)
			default:
				err = s.Value(1)
			}
			if sec >= 0 {
				out.secs[sec] = span{start: start, end: len(out.prompt), set: true}
			}
		}
		if err != nil {
			return err
		}
		more, err := s.More('}')
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	if !s.End() {
		return jsonscan.ErrSyntax
	}
	return ps.finish(api, sessionHeader, out, &f)
}

// finish fills out.Request from the fields of a valid body.
func (ps *Parser) finish(api API, sessionHeader string, out *Parsed, f *fields) error {
	if !f.model.ok || len(f.model.raw) == 0 {
		return ErrMissingModel
	}
	model := f.model.raw
	if f.model.esc {
		out.scratch = jsonscan.Unescape(out.scratch[:0], model)
		model = out.scratch
	}
	r := &out.Request
	if e, ok := ps.adapters[string(model)]; ok {
		r.Model, r.LoRA = e.base, e.adapter
	} else {
		r.Model = ps.names.intern(model)
	}
	if sessionHeader != "" {
		r.SessionID = sessionHeader
	} else {
		for _, id := range f.ids {
			if id.set() {
				r.SessionID = jsonscan.String(id.raw, id.esc)
				break
			}
		}
	}
	if f.salt.set() {
		r.CacheSalt = jsonscan.String(f.salt.raw, f.salt.esc)
	}
	if api != OpenAI {
		out.order()
	}
	r.Prompt = out.prompt
	if r.SessionID == "" {
		r.SessionKey = ps.lineageKey(api, out, f)
	}
	return nil
}

// lineageKey derives the session key of a request without a session id;
// 0 when it has no lineage.
func (ps *Parser) lineageKey(api API, out *Parsed, f *fields) uint64 {
	if api == Responses && f.prev.set() && ps.cont != nil {
		id := f.prev.raw
		if f.prev.esc {
			out.scratch = jsonscan.Unescape(out.scratch[:0], id)
			id = out.scratch
		}
		return ps.cont.ContinuationKey(id)
	}
	if out.rootLen == 0 {
		return 0
	}
	end := out.rootLen
	if api != OpenAI {
		for _, sp := range out.secs[:secConv] {
			if sp.set {
				end += sp.end - sp.start
			}
		}
	}
	return scheduler.LineageKey(out.prompt[:end])
}

// interner returns a shared string for a byte slice it has seen before,
// so the model names of a busy proxy are not allocated per request. It
// keeps at most maxInterned names (copy-on-write map).
type interner struct {
	m  atomic.Pointer[map[string]string]
	mu sync.Mutex
}

const maxInterned = 1024

func (in *interner) intern(b []byte) string {
	if m := in.m.Load(); m != nil {
		if s, ok := (*m)[string(b)]; ok {
			return s
		}
	}
	s := string(b)
	in.mu.Lock()
	defer in.mu.Unlock()
	old := in.m.Load()
	var n int
	if old != nil {
		n = len(*old)
	}
	if n >= maxInterned {
		return s
	}
	m := make(map[string]string, n+1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[s] = s
	in.m.Store(&m)
	return s
}
