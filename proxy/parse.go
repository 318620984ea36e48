package proxy

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/trimtab/trimtab/scheduler"
)

// Parser extracts what the scheduler needs from an OpenAI request body
// (/v1/completions or /v1/chat/completions): model, stream flag, session
// id, LoRA adapter and the prompt bytes. It is shared by the HTTP proxy and
// the ext_proc server and is safe for concurrent use.
//
// It is a single-pass, validating JSON scanner that looks only at the
// top-level keys it needs and skips everything else without building
// values, so an 8k-token body is parsed without allocating at steady state
// (model names are interned; the prompt is rendered into the caller's
// reusable buffer). Keys match exactly (case-sensitive); when a key repeats,
// the last one wins.
//
// Prompt bytes:
//   - completions, "prompt" a string: its unescaped text;
//   - an array of strings (a batch): the strings joined by "\n";
//   - token ids (an array of integers, or an array of such arrays): each id
//     as 4 little-endian bytes, so 64 tokens make 256 bytes, the prefix
//     scorer's block size;
//   - chat, "messages": every message rendered in order as
//     "<|" + role + "|>\n" + content + "\n", where content is the string,
//     or for an array of parts the parts joined by "\n": a text part as its
//     text, any other part as "<|" + type + "|>" followed by the part's raw
//     JSON. A shared system prompt and shared earlier turns therefore
//     become shared leading bytes. When both keys appear, messages win.
type Parser struct {
	adapters map[string]loraEntry
	names    interner
}

type loraEntry struct{ adapter, base string }

// NewParser returns a parser. loraAdapters maps adapter names, as clients
// put them in "model", to their base model; it is copied.
func NewParser(loraAdapters map[string]string) *Parser {
	p := &Parser{adapters: make(map[string]loraEntry, len(loraAdapters))}
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
	// Chat is true when the prompt was rendered from "messages".
	Chat bool

	prompt  []byte
	scratch []byte
	subset  []string
}

// Reset clears the request, keeping the buffers.
func (p *Parsed) Reset() {
	p.Request = scheduler.Request{}
	p.Stream, p.Chat = false, false
	p.prompt = p.prompt[:0]
	p.scratch = p.scratch[:0]
	clear(p.subset)
	p.subset = p.subset[:0]
}

var parsedPool = sync.Pool{New: func() any { return new(Parsed) }}

func getParsed() *Parsed { p := parsedPool.Get().(*Parsed); p.Reset(); return p }

func putParsed(p *Parsed) {
	if cap(p.prompt) > 4<<20 { // do not keep huge buffers around
		p.prompt = nil
	}
	p.Request = scheduler.Request{}
	parsedPool.Put(p)
}

// maxDepth bounds nesting, like encoding/json.
const maxDepth = 10000

// Parse parses body into out (which it resets first). sessionHeader is the
// x-session-id header value; when empty the session id comes from the
// body's "session_id", else its "user". Errors are *Error values: 400 for
// invalid JSON, a non-object body, a missing model or a mistyped field.
func (ps *Parser) Parse(body []byte, sessionHeader string, out *Parsed) error {
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
	var (
		model, session, user, salt []byte
		modelEsc, sessEsc, userEsc bool
		saltEsc, haveModel         bool
		haveSession, haveUser      bool
	)
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
			if model, modelEsc, err = s.stringField(1); err != nil {
				return err
			}
			haveModel = true
		case "stream":
			if out.Stream, err = s.boolField(); err != nil {
				return err
			}
		case "session_id":
			session, sessEsc, haveSession, err = s.optString(1)
		case "user":
			user, userEsc, haveUser, err = s.optString(1)
		case "cache_salt":
			salt, saltEsc, _, err = s.optString(1)
		case "prompt":
			if out.Chat {
				err = s.value(1)
				break
			}
			out.prompt, err = s.prompt(out.prompt[:0], 1)
		case "messages":
			out.Chat = true
			out.prompt, err = s.messages(out.prompt[:0], 1)
		default:
			err = s.value(1)
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
	if !haveModel || len(model) == 0 {
		return ErrMissingModel
	}
	if modelEsc {
		out.scratch = unescape(out.scratch[:0], model)
		model = out.scratch
	}
	r := &out.Request
	if e, ok := ps.adapters[string(model)]; ok {
		r.Model, r.LoRA = e.base, e.adapter
	} else {
		r.Model = ps.names.intern(model)
	}
	switch {
	case sessionHeader != "":
		r.SessionID = sessionHeader
	case haveSession && len(session) > 0:
		r.SessionID = unescapeString(session, sessEsc)
	case haveUser && len(user) > 0:
		r.SessionID = unescapeString(user, userEsc)
	}
	if len(salt) > 0 {
		r.CacheSalt = unescapeString(salt, saltEsc)
	}
	r.Prompt = out.prompt
	return nil
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

// scan is a validating JSON scanner over b; i is the read position.
type scan struct {
	b []byte
	i int
}

func (s *scan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// open consumes the opening bracket c and reports whether the container is
// empty (in which case the closing bracket is consumed too).
func (s *scan) open(c byte) (empty bool, err error) {
	if s.i >= len(s.b) || s.b[s.i] != c {
		return false, ErrInvalidJSON
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c+2 { // '{'+2 == '}', '['+2 == ']'
		s.i++
		return true, nil
	}
	return false, nil
}

// more consumes a ',' (true) or the closing bracket (false).
func (s *scan) more(closing byte) (bool, error) {
	s.ws()
	if s.i >= len(s.b) {
		return false, ErrInvalidJSON
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return true, nil
	case closing:
		s.i++
		return false, nil
	}
	return false, ErrInvalidJSON
}

// key reads an object key and the colon after it.
func (s *scan) key() (raw []byte, esc bool, err error) {
	s.ws()
	if raw, esc, err = s.str(); err != nil {
		return nil, false, err
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, false, ErrInvalidJSON
	}
	s.i++
	return raw, esc, nil
}

// strSafe marks bytes that need no attention inside a string.
var strSafe = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// skipPlain returns the first index ≥ i where b is not a run of plain
// string bytes, 8 at a time (SWAR): a word is plain when none of its bytes
// is < 0x20, '"' or '\\'. The tail shorter than a word is left to the caller.
func skipPlain(b []byte, i int) int {
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		const lo, hi = 0x0101010101010101, 0x8080808080808080
		q := x ^ (lo * '"')
		bs := x ^ (lo * '\\')
		if ((x-lo*0x20)|(q-lo)|(bs-lo))&^x&hi != 0 {
			break
		}
		i += 8
	}
	return i
}

// str reads a string at s.i and returns its raw contents (between the
// quotes) and whether it contains escapes.
func (s *scan) str() (raw []byte, esc bool, err error) {
	b := s.b
	if s.i >= len(b) || b[s.i] != '"' {
		return nil, false, ErrInvalidJSON
	}
	start := s.i + 1
	i := start
	for i < len(b) {
		i = skipPlain(b, i)
		if i >= len(b) {
			break
		}
		c := b[i]
		if strSafe[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			s.i = i + 1
			return b[start:i], esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return nil, false, ErrInvalidJSON
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return nil, false, ErrInvalidJSON
				}
				if _, ok := hex4(b[i+2 : i+6]); !ok {
					return nil, false, ErrInvalidJSON
				}
				i += 6
			default:
				return nil, false, ErrInvalidJSON
			}
		default: // control character
			return nil, false, ErrInvalidJSON
		}
	}
	return nil, false, ErrInvalidJSON
}

// strAppend reads a string at s.i and appends its decoded contents to
// dst in the same pass (validation, unescaping and copying together).
func (s *scan) strAppend(dst []byte) ([]byte, error) {
	b := s.b
	if s.i >= len(b) || b[s.i] != '"' {
		return dst, ErrInvalidJSON
	}
	i := s.i + 1
	run := i
	for i < len(b) {
		i = skipPlain(b, i)
		if i >= len(b) {
			break
		}
		c := b[i]
		if strSafe[c] {
			i++
			continue
		}
		switch c {
		case '"':
			s.i = i + 1
			return append(dst, b[run:i]...), nil
		case '\\':
			dst = append(dst, b[run:i]...)
			if i+1 < len(b) {
				if e := simpleEscape[b[i+1]]; e != 0 {
					dst = append(dst, e)
					i += 2
					run = i
					continue
				}
			}
			n, ok := escapeLen(b[i:])
			if !ok {
				return dst, ErrInvalidJSON
			}
			dst = unescape(dst, b[i:i+n])
			i += n
			run = i
		default: // control character
			return dst, ErrInvalidJSON
		}
	}
	return dst, ErrInvalidJSON
}

// simpleEscape maps the character after a backslash to what it stands
// for, for the two-byte escapes (0: not one).
var simpleEscape = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escapeLen validates the escape at the start of b and returns its length:
// 2, 6 for \uXXXX, or 12 for a \uXXXX\uXXXX surrogate pair (which unescape
// decodes as one rune).
func escapeLen(b []byte) (int, bool) {
	if len(b) < 2 {
		return 0, false
	}
	switch b[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, true
	case 'u':
		if len(b) < 6 {
			return 0, false
		}
		r, ok := hex4(b[2:6])
		if !ok {
			return 0, false
		}
		if utf16.IsSurrogate(r) && len(b) >= 12 && b[6] == '\\' && b[7] == 'u' {
			if r2, ok := hex4(b[8:12]); ok && utf16.DecodeRune(r, r2) != utf8.RuneError {
				return 12, true
			}
		}
		return 6, true
	}
	return 0, false
}

func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// unescape appends the decoded contents of a validated raw string to dst.
// Lone surrogates become U+FFFD, as in encoding/json; other bytes are
// copied as they are.
func unescape(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			j := bytes.IndexByte(raw[i:], '\\')
			if j < 0 {
				return append(dst, raw[i:]...)
			}
			dst = append(dst, raw[i:i+j]...)
			i += j
			continue
		}
		switch raw[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					r2, _ = hex4(raw[i+2:])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, raw[i+1])
		}
		i += 2
	}
	return dst
}

func unescapeString(raw []byte, esc bool) string {
	if !esc {
		return string(raw)
	}
	return string(unescape(nil, raw))
}

func appendStr(dst, raw []byte, esc bool) []byte {
	if !esc {
		return append(dst, raw...)
	}
	return unescape(dst, raw)
}

// value validates and skips one value at nesting depth.
func (s *scan) value(depth int) error {
	s.ws()
	if s.i >= len(s.b) {
		return ErrInvalidJSON
	}
	switch c := s.b[s.i]; c {
	case '"':
		_, _, err := s.str()
		return err
	case '{', '[':
		if depth >= maxDepth {
			return ErrTooDeep
		}
		empty, err := s.open(c)
		if err != nil || empty {
			return err
		}
		for {
			if c == '{' {
				if _, _, err := s.key(); err != nil {
					return err
				}
			}
			if err := s.value(depth + 1); err != nil {
				return err
			}
			more, err := s.more(c + 2)
			if err != nil || !more {
				return err
			}
		}
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		return s.number()
	}
}

func (s *scan) lit(w string) error {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return ErrInvalidJSON
	}
	s.i += len(w)
	return nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (s *scan) digits() bool {
	st := s.i
	for s.i < len(s.b) && isDigit(s.b[s.i]) {
		s.i++
	}
	return s.i > st
}

func (s *scan) number() error {
	b := s.b
	if s.i < len(b) && b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(b) && b[s.i] == '0':
		s.i++
	case s.i < len(b) && b[s.i] >= '1' && b[s.i] <= '9':
		s.digits()
	default:
		return ErrInvalidJSON
	}
	if s.i < len(b) && b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return ErrInvalidJSON
		}
	}
	if s.i < len(b) && (b[s.i] == 'e' || b[s.i] == 'E') {
		s.i++
		if s.i < len(b) && (b[s.i] == '+' || b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return ErrInvalidJSON
		}
	}
	return nil
}

// wrongType validates the value at s.i and reports ErrBadField when it is
// well-formed (the field simply has the wrong type).
func (s *scan) wrongType(depth int) error {
	if err := s.value(depth); err != nil {
		return err
	}
	return ErrBadField
}

func (s *scan) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// stringField reads a string value; other types are ErrBadField.
func (s *scan) stringField(depth int) ([]byte, bool, error) {
	if s.peek() != '"' {
		return nil, false, s.wrongType(depth)
	}
	return s.str()
}

// optString reads a string value, or skips a value of any other type
// (ok false).
func (s *scan) optString(depth int) (raw []byte, esc, ok bool, err error) {
	if s.peek() != '"' {
		return nil, false, false, s.value(depth)
	}
	raw, esc, err = s.str()
	return raw, esc, err == nil, err
}

// boolField reads true, false or null (false).
func (s *scan) boolField() (bool, error) {
	switch s.peek() {
	case 't':
		return true, s.lit("true")
	case 'f':
		return false, s.lit("false")
	case 'n':
		return false, s.lit("null")
	}
	return false, s.wrongType(1)
}

// token reads a non-negative integer token id that fits 32 bits.
func (s *scan) token(dst []byte) ([]byte, error) {
	st := s.i
	var v uint64
	for s.i < len(s.b) && isDigit(s.b[s.i]) {
		v = v*10 + uint64(s.b[s.i]-'0')
		if v > 1<<32-1 {
			s.i = st
			return dst, s.wrongType(2)
		}
		s.i++
	}
	if s.i == st || (s.b[st] == '0' && s.i-st > 1) {
		s.i = st
		return dst, s.wrongType(2)
	}
	if c := s.peek(); c == '.' || c == 'e' || c == 'E' { // a float: wrong type
		s.i = st
		return dst, s.wrongType(2)
	}
	return append(dst, byte(v), byte(v>>8), byte(v>>16), byte(v>>24)), nil
}

// prompt renders a completions prompt (see Parser) into dst.
func (s *scan) prompt(dst []byte, depth int) ([]byte, error) {
	switch s.peek() {
	case '"':
		return s.strAppend(dst)
	case 'n':
		return dst, s.lit("null")
	case '[':
	default:
		return dst, s.wrongType(depth)
	}
	if depth+1 >= maxDepth {
		return dst, ErrTooDeep
	}
	empty, err := s.open('[')
	if err != nil || empty {
		return dst, err
	}
	const (
		kindNone = iota
		kindStrings
		kindTokens
		kindTokenArrays
	)
	kind := kindNone
	for n := 0; ; n++ {
		s.ws()
		c := s.peek()
		switch {
		case c == '"' && (kind == kindNone || kind == kindStrings):
			kind = kindStrings
			if n > 0 {
				dst = append(dst, '\n')
			}
			if dst, err = s.strAppend(dst); err != nil {
				return dst, err
			}
		case isDigit(c) && (kind == kindNone || kind == kindTokens):
			kind = kindTokens
			if dst, err = s.token(dst); err != nil {
				return dst, err
			}
		case c == '[' && (kind == kindNone || kind == kindTokenArrays):
			kind = kindTokenArrays
			if depth+2 >= maxDepth {
				return dst, ErrTooDeep
			}
			empty, err := s.open('[')
			if err != nil {
				return dst, err
			}
			for !empty {
				s.ws()
				if !isDigit(s.peek()) {
					return dst, s.wrongType(depth + 2)
				}
				if dst, err = s.token(dst); err != nil {
					return dst, err
				}
				more, err := s.more(']')
				if err != nil {
					return dst, err
				}
				if !more {
					break
				}
			}
		default:
			return dst, s.wrongType(depth + 1)
		}
		more, err := s.more(']')
		if err != nil || !more {
			return dst, err
		}
	}
}

// messages renders chat messages (see Parser) into dst.
func (s *scan) messages(dst []byte, depth int) ([]byte, error) {
	switch s.peek() {
	case 'n':
		return dst, s.lit("null")
	case '[':
	default:
		return dst, s.wrongType(depth)
	}
	if depth+2 >= maxDepth {
		return dst, ErrTooDeep
	}
	empty, err := s.open('[')
	if err != nil || empty {
		return dst, err
	}
	for {
		s.ws()
		if s.peek() != '{' {
			return dst, s.wrongType(depth + 1)
		}
		var role, content []byte
		var roleEsc, haveRole, rendered bool
		msgStart := len(dst)
		empty, err := s.open('{')
		if err != nil {
			return dst, err
		}
		for !empty {
			k, kesc, err := s.key()
			if err != nil {
				return dst, err
			}
			s.ws()
			switch {
			case !kesc && string(k) == "role":
				if role, roleEsc, err = s.stringField(depth + 2); err != nil {
					return dst, err
				}
				haveRole, rendered = true, false
			case !kesc && string(k) == "content":
				st := s.i
				switch c := s.peek(); {
				case c == '"' && haveRole: // the common order: render in one pass
					dst = append(dst[:msgStart], "<|"...)
					dst = appendStr(dst, role, roleEsc)
					dst = append(dst, "|>\n"...)
					if dst, err = s.strAppend(dst); err != nil {
						return dst, err
					}
					rendered = true
				case c == '"' || c == '[' || c == 'n':
					if err := s.value(depth + 2); err != nil {
						return dst, err
					}
					rendered = false
				default:
					return dst, s.wrongType(depth + 2)
				}
				content = s.b[st:s.i]
			default:
				if err := s.value(depth + 2); err != nil {
					return dst, err
				}
			}
			more, err := s.more('}')
			if err != nil {
				return dst, err
			}
			if !more {
				break
			}
		}
		if !rendered {
			dst = append(dst[:msgStart], "<|"...)
			dst = appendStr(dst, role, roleEsc)
			dst = append(dst, "|>\n"...)
			if dst, err = renderContent(dst, content, depth+2); err != nil {
				return dst, err
			}
		}
		dst = append(dst, '\n')
		more, err := s.more(']')
		if err != nil || !more {
			return dst, err
		}
	}
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
		if haveText && (typ == nil || string(typ) == "text") {
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
