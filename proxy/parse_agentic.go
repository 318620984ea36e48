package proxy

import corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

// API is the format of a scheduled request body.
type API uint8

const (
	// APIOpenAI is OpenAI completions and chat completions
	// (POST /v1/completions, /v1/chat/completions).
	APIOpenAI API = iota
	// APIResponses is the OpenAI Responses API (POST /v1/responses).
	APIResponses
	// APIMessages is the Anthropic Messages API (POST /v1/messages).
	APIMessages
)

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

// Sections of a Responses or Messages prompt, in the order they are
// rendered.
const (
	secSystem = iota // "instructions" / "system"
	secTools         // "tools"
	secConv          // "input" / "messages"
	numSections
)

// span locates a rendered section in Parsed.prompt.
type span struct {
	start, end int
	set        bool
}

// agentField reads a top-level key of a Responses or Messages body.
// Sections (see Parser) are rendered at the end of out.prompt as their
// keys come and put in order by Parsed.order.
func (s *scan) agentField(api API, k []byte, out *Parsed, f *fields) (err error) {
	start := len(out.prompt)
	sec := -1
	switch api {
	case APIResponses:
		switch string(k) {
		case "instructions":
			sec = secSystem
			if s.peek() == '[' {
				out.prompt, err = s.messages(out.prompt, 1, true)
			} else {
				out.prompt, err = s.system(out.prompt, 1)
			}
		case "tools":
			sec = secTools
			out.prompt, err = s.tools(out.prompt, 1)
		case "input":
			sec = secConv
			s.track, s.root = true, 0
			out.prompt, err = s.input(out.prompt, 1)
			out.rootLen = rootLen(s, start)
		case "conversation":
			f.ids[0], err = s.member(1, "id", true)
		case "previous_response_id":
			f.prev.raw, f.prev.esc, f.prev.ok, err = s.optString(1)
		case "user":
			f.ids[1].raw, f.ids[1].esc, f.ids[1].ok, err = s.optString(1)
		default:
			err = s.value(1)
		}
	case APIMessages:
		switch string(k) {
		case "system":
			sec = secSystem
			out.prompt, err = s.system(out.prompt, 1)
		case "tools":
			sec = secTools
			out.prompt, err = s.tools(out.prompt, 1)
		case "messages":
			sec = secConv
			s.track, s.root = true, 0
			out.prompt, err = s.messages(out.prompt, 1, false)
			out.rootLen = rootLen(s, start)
		case "metadata":
			f.ids[0], err = s.member(1, "user_id", false)
		default:
			err = s.value(1)
		}
	}
	if sec >= 0 {
		out.secs[sec] = span{start: start, end: len(out.prompt), set: true}
	}
	return err
}

// system renders a system prompt: a string, null (nothing), or an array
// of content parts.
func (s *scan) system(dst []byte, depth int) ([]byte, error) {
	var err error
	switch s.peek() {
	case 'n':
		return dst, s.lit("null")
	case '"':
		dst = append(dst, "<|system|>\n"...)
		if dst, err = s.strAppend(dst); err != nil {
			return dst, err
		}
	case '[':
		st := s.i
		if err := s.value(depth); err != nil {
			return dst, err
		}
		dst = append(dst, "<|system|>\n"...)
		if dst, err = renderContent(dst, s.b[st:s.i], depth); err != nil {
			return dst, err
		}
	default:
		return dst, s.wrongType(depth)
	}
	return append(dst, '\n'), nil
}

// tools renders a tool list, an array or null (nothing), as its raw JSON:
// the definitions an agent sends are the same bytes on every request.
func (s *scan) tools(dst []byte, depth int) ([]byte, error) {
	switch s.peek() {
	case 'n':
		return dst, s.lit("null")
	case '[':
	default:
		return dst, s.wrongType(depth)
	}
	st := s.i
	if err := s.value(depth); err != nil {
		return dst, err
	}
	dst = append(dst, "<|tools|>\n"...)
	dst = append(dst, s.b[st:s.i]...)
	return append(dst, '\n'), nil
}

// input renders a Responses input: a string (one user message), an array
// of items, or null (nothing).
func (s *scan) input(dst []byte, depth int) ([]byte, error) {
	if s.peek() != '"' {
		return s.messages(dst, depth, true)
	}
	dst = append(dst, "<|user|>\n"...)
	dst, err := s.strAppend(dst)
	if err != nil {
		return dst, err
	}
	dst = append(dst, '\n')
	if s.track && s.root == 0 {
		s.root = len(dst)
	}
	return dst, nil
}

// rootLen ends root tracking of a conversation section rendered from
// start: the length of its root within the section (0: none).
func rootLen(s *scan, start int) int {
	s.track = false
	if s.root == 0 {
		return 0
	}
	return s.root - start
}

// member reads an object's string member name (a session id), or, with
// orString, a string value itself. Values of any other type are skipped
// (ok false), as for session_id.
func (s *scan) member(depth int, name string, orString bool) (r rawStr, err error) {
	switch c := s.peek(); {
	case c == '"' && orString:
		r.raw, r.esc, err = s.str()
		r.ok = err == nil
		return r, err
	case c != '{':
		return r, s.value(depth)
	}
	if depth >= maxDepth {
		return r, ErrTooDeep
	}
	empty, err := s.open('{')
	for err == nil && !empty {
		var k []byte
		var kesc, more bool
		if k, kesc, err = s.key(); err != nil {
			break
		}
		s.ws()
		if !kesc && string(k) == name && s.peek() == '"' {
			r.raw, r.esc, err = s.str()
			r.ok = err == nil
		} else {
			err = s.value(depth + 1)
		}
		if err != nil {
			break
		}
		if more, err = s.more('}'); !more {
			break
		}
	}
	return r, err
}

// order puts the rendered sections in section order. Sections rendered
// in that order already, with no repeated key, are left where they are;
// otherwise they are copied into p.alt, which then becomes the prompt
// (buffers are swapped, not allocated).
func (p *Parsed) order() {
	pos, inOrder := 0, true
	for _, sp := range p.secs {
		if !sp.set {
			continue
		}
		if sp.start != pos {
			inOrder = false
			break
		}
		pos = sp.end
	}
	if inOrder && pos == len(p.prompt) {
		return
	}
	alt := p.alt[:0]
	for _, sp := range p.secs {
		if sp.set {
			alt = append(alt, p.prompt[sp.start:sp.end]...)
		}
	}
	p.prompt, p.alt = alt, p.prompt[:0]
}
