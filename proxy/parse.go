package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/trimtab/trimtab/scheduler"
)

// Parser extracts what the scheduler needs from a request body: model,
// stream flag, session id, LoRA adapter and the prompt bytes. It reads
// three request formats (API): OpenAI completions and chat completions,
// the OpenAI Responses API and the Anthropic Messages API. It is shared by
// the HTTP proxy and the ext_proc server and is safe for concurrent use.
//
// It is a single-pass, validating JSON scanner that looks only at the
// top-level keys it needs and skips everything else without building
// values, so an 8k-token body is parsed without allocating at steady state
// (model names are interned; the prompt is rendered into the caller's
// reusable buffer). Keys match exactly (case-sensitive); when a key repeats,
// the last one wins.
//
// Prompt bytes (APIOpenAI):
//   - completions, "prompt" a string: its unescaped text;
//   - an array of strings (a batch): the strings joined by "\n";
//   - token ids (an array of integers, or an array of such arrays): each id
//     as 4 little-endian bytes, so 64 tokens make 256 bytes, the prefix
//     scorer's block size;
//   - chat, "messages": every message rendered in order as
//     "<|" + role + "|>\n" + content + "\n", where content is the string,
//     or for an array of parts the parts joined by "\n": a text part (type
//     "text", "input_text" or "output_text", or none) as its text, any
//     other part as "<|" + type + "|>" followed by the part's raw JSON. A
//     shared system prompt and shared earlier turns therefore become shared
//     leading bytes. When both keys appear, messages win.
//
// Prompt bytes (APIResponses, APIMessages): three sections, in this order
// whatever the order of the keys in the body, so that an agent's shared
// system prompt and tool list are shared leading bytes:
//   - the system prompt, "instructions" (Responses) or "system"
//     (Messages): a string as "<|system|>\n" + text + "\n"; Messages'
//     array of text blocks as "<|system|>\n" + the blocks as content
//     parts + "\n"; Responses' array of items as input items;
//   - "tools": "<|tools|>\n" + the array's raw JSON + "\n";
//   - the conversation: Responses "input", a string as "<|user|>\n" +
//     text + "\n", an array of items each as a chat message when it has
//     a role, else as "<|" + type + "|>" + its raw JSON + "\n"
//     (function_call, function_call_output, reasoning, …); Messages
//     "messages" as chat messages (tool_use, tool_result and other blocks
//     as non-text parts).
//
// A section whose key is null or absent renders nothing.
type Parser struct {
	adapters map[string]loraEntry
	names    interner
	lineage  *lineage
}

type loraEntry struct{ adapter, base string }

// NewParser returns a parser. loraAdapters maps adapter names, as clients
// put them in "model", to their base model; it is copied.
func NewParser(loraAdapters map[string]string) *Parser {
	p := &Parser{adapters: make(map[string]loraEntry, len(loraAdapters)), lineage: newLineage()}
	for a, b := range loraAdapters {
		p.adapters[a] = loraEntry{adapter: a, base: b}
	}
	return p
}

// Parsed is one parsed request. It is reusable: Parse resets it and keeps
// its buffers, so recycle it (the proxy pools them) to avoid allocating.
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
	subset  []string
	secs    [numSections]span
	// rootLen is the length of the conversation's root within its section
	// (0: none), see lineage.go.
	rootLen int
}

// Reset clears the request, keeping the buffers.
func (p *Parsed) Reset() {
	p.Request = scheduler.Request{}
	p.Stream, p.Chat = false, false
	p.prompt = p.prompt[:0]
	p.alt = p.alt[:0]
	p.scratch = p.scratch[:0]
	clear(p.subset)
	p.subset = p.subset[:0]
	p.secs = [numSections]span{}
	p.rootLen = 0
}

var parsedPool = sync.Pool{New: func() any { return new(Parsed) }}

func getParsed() *Parsed { p := parsedPool.Get().(*Parsed); p.Reset(); return p }

func putParsed(p *Parsed) {
	p.dropHugeBuffers(4 << 20) // do not keep huge buffers around
	p.Request = scheduler.Request{}
	parsedPool.Put(p)
}

// dropHugeBuffers forgets prompt buffers larger than limit bytes.
func (p *Parsed) dropHugeBuffers(limit int) {
	if cap(p.prompt) > limit {
		p.prompt = nil
	}
	if cap(p.alt) > limit {
		p.alt = nil
	}
}

// maxDepth bounds nesting, like encoding/json.
const maxDepth = 10000

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

// Parse parses an OpenAI completions or chat completions body; it is
// ParseAPI(APIOpenAI, …).
func (ps *Parser) Parse(body []byte, sessionHeader string, out *Parsed) error {
	return ps.ParseAPI(APIOpenAI, body, sessionHeader, out)
}

// ParseAPI parses body, in the format of api, into out (which it resets
// first). sessionHeader is the x-session-id header value; when empty the
// session id comes from the body: "session_id", else "user" (OpenAI);
// "conversation" (a string, or an object's "id"), else "user"
// (Responses); "metadata"."user_id" (Messages). Without a session id the
// request's SessionKey is derived from the conversation's lineage (see
// lineage.go). Errors are *Error values: 400 for invalid JSON, a non-object
// body, a missing model or a mistyped field.
func (ps *Parser) ParseAPI(api API, body []byte, sessionHeader string, out *Parsed) error {
	out.Reset()
	s := scan{b: body}
	s.ws()
	if s.i >= len(body) {
		return ErrInvalidJSON
	}
	if body[s.i] != '{' {
		if err := s.value(0); err != nil {
			return err
		}
		if s.ws(); s.i != len(body) {
			return ErrInvalidJSON
		}
		return ErrNotObject
	}
	var f fields
	empty, err := s.open('{')
	if err != nil {
		return err
	}
	for !empty {
		k, kesc, err := s.key()
		if err != nil {
			return err
		}
		if kesc {
			out.scratch = unescape(out.scratch[:0], k)
			k = out.scratch
		}
		s.ws()
		switch string(k) {
		case "model":
			if f.model.raw, f.model.esc, err = s.stringField(1); err != nil {
				return err
			}
			f.model.ok = true
		case "stream":
			out.Stream, err = s.boolField()
		case "cache_salt":
			f.salt.raw, f.salt.esc, f.salt.ok, err = s.optString(1)
		default:
			if api == APIOpenAI {
				err = s.openAIField(k, out, &f)
			} else {
				err = s.agentField(api, k, out, &f)
			}
		}
		if err != nil {
			return err
		}
		more, err := s.more('}')
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	if s.ws(); s.i != len(body) {
		return ErrInvalidJSON
	}
	if !f.model.ok || len(f.model.raw) == 0 {
		return ErrMissingModel
	}
	model := f.model.raw
	if f.model.esc {
		out.scratch = unescape(out.scratch[:0], model)
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
				r.SessionID = unescapeString(id.raw, id.esc)
				break
			}
		}
	}
	if f.salt.set() {
		r.CacheSalt = unescapeString(f.salt.raw, f.salt.esc)
	}
	if api != APIOpenAI {
		out.order()
	}
	r.Prompt = out.prompt
	if r.SessionID == "" {
		r.SessionKey = ps.lineageKey(api, out, &f)
	}
	return nil
}

// lineageKey derives the session key of a request without a session id
// (see lineage.go); 0 when it has no lineage.
func (ps *Parser) lineageKey(api API, out *Parsed, f *fields) uint64 {
	if api == APIResponses && f.prev.set() {
		id := f.prev.raw
		if f.prev.esc {
			out.scratch = unescape(out.scratch[:0], id)
			id = out.scratch
		}
		return ps.lineage.continuationKey(id)
	}
	if out.rootLen == 0 {
		return 0
	}
	end := out.rootLen
	if api != APIOpenAI {
		for _, sp := range out.secs[:secConv] {
			if sp.set {
				end += sp.end - sp.start
			}
		}
	}
	return scheduler.LineageKey(out.prompt[:end])
}

// Learn records that the Responses response with id answered a request
// whose session key was key, so that its continuations (by
// previous_response_id) take that key. Safe for concurrent use.
func (ps *Parser) Learn(id []byte, key uint64) { ps.lineage.learn(idHash(id), key) }

// openAIField reads a top-level key of a completions or chat completions
// body.
func (s *scan) openAIField(k []byte, out *Parsed, f *fields) (err error) {
	switch string(k) {
	case "session_id":
		f.ids[0].raw, f.ids[0].esc, f.ids[0].ok, err = s.optString(1)
	case "user":
		f.ids[1].raw, f.ids[1].esc, f.ids[1].ok, err = s.optString(1)
	case "prompt":
		if out.Chat {
			return s.value(1)
		}
		out.prompt, err = s.prompt(out.prompt[:0], 1)
	case "messages":
		out.Chat = true
		s.track, s.root = true, 0
		out.prompt, err = s.messages(out.prompt[:0], 1, false)
		out.rootLen = rootLen(s, 0)
	default:
		err = s.value(1)
	}
	return err
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

// strSafe marks bytes that need no attention inside a string.
var strSafe = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// simpleEscape maps the character after a backslash to what it stands
// for, for the two-byte escapes (0: not one).
var simpleEscape = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// textPart reports whether a content part of type typ (nil: no type) is
// rendered as its text: "text" (chat completions, Messages) or
// "input_text" / "output_text" (Responses).
func textPart(typ []byte) bool {
	switch string(typ) {
	case "text", "input_text", "output_text":
		return true
	}
	return typ == nil
}

// renderContent renders a validated content value: a string, null or an
// array of parts.
func renderContent(dst, content []byte, depth int) ([]byte, error) {
	s := scan{b: content}
	switch s.peek() {
	case 0, 'n':
		return dst, nil
	case '"':
		raw, esc, _ := s.str()
		return appendStr(dst, raw, esc), nil
	}
	empty, _ := s.open('[')
	for n := 0; !empty; n++ {
		s.ws()
		if s.peek() != '{' {
			return dst, ErrBadField
		}
		st := s.i
		var typ, text []byte
		var typEsc, textEsc, haveText bool
		empty, _ := s.open('{')
		for !empty {
			k, kesc, _ := s.key()
			s.ws()
			switch {
			case !kesc && string(k) == "type" && s.peek() == '"':
				typ, typEsc, _ = s.str()
			case !kesc && string(k) == "text" && s.peek() == '"':
				text, textEsc, _ = s.str()
				haveText = true
			default:
				_ = s.value(depth + 2)
			}
			if more, _ := s.more('}'); !more {
				break
			}
		}
		if n > 0 {
			dst = append(dst, '\n')
		}
		if haveText && textPart(typ) {
			dst = appendStr(dst, text, textEsc)
		} else {
			dst = append(dst, "<|"...)
			dst = appendStr(dst, typ, typEsc)
			dst = append(dst, "|>"...)
			dst = append(dst, content[st:s.i]...)
		}
		if more, _ := s.more(']'); !more {
			break
		}
	}
	return dst, nil
}
