package parse

import "github.com/trimtab/trimtab/internal/jsonscan"

// chat holds the scanner of one body and renders what the dialects share:
// typed top-level values, chat messages, content parts, system prompts,
// tool lists. While track is set it records root: where, in the rendered
// prompt, the conversation's first item that is not a system message ends
// (0: none yet).
type chat struct {
	s     jsonscan.Scanner
	root  int
	track bool
}

// wrongType validates the value at the read position and reports
// ErrBadField when it is well-formed (the field simply has the wrong type).
func (c *chat) wrongType(depth int) error {
	if err := c.s.Value(depth); err != nil {
		return err
	}
	return ErrBadField
}

// stringField reads a string value; other types are ErrBadField.
func (c *chat) stringField(depth int) ([]byte, bool, error) {
	if c.s.Peek() != '"' {
		return nil, false, c.wrongType(depth)
	}
	return c.s.Str()
}

// optString reads a string value, or skips a value of any other type
// (ok false).
func (c *chat) optString(depth int) (raw []byte, esc, ok bool, err error) {
	if c.s.Peek() != '"' {
		return nil, false, false, c.s.Value(depth)
	}
	raw, esc, err = c.s.Str()
	return raw, esc, err == nil, err
}

// boolField reads true, false or null (false).
func (c *chat) boolField() (bool, error) {
	switch c.s.Peek() {
	case 't':
		return true, c.s.Lit("true")
	case 'f':
		return false, c.s.Lit("false")
	case 'n':
		return false, c.s.Lit("null")
	}
	return false, c.wrongType(1)
}

// array starts an array value at depth whose items nest up to nest
// levels below it: items is false for null or an empty array (consumed
// whole), true when the first item is next. Any other value is
// ErrBadField.
func (c *chat) array(depth, nest int) (items bool, err error) {
	switch c.s.Peek() {
	case 'n':
		return false, c.s.Lit("null")
	case '[':
	default:
		return false, c.wrongType(depth)
	}
	if depth+nest >= jsonscan.MaxDepth {
		return false, jsonscan.ErrTooDeep
	}
	empty, err := c.s.Open('[')
	return !empty, err
}

// startRoot starts root tracking of a conversation section.
func (c *chat) startRoot() { c.track, c.root = true, 0 }

// rootLen ends root tracking of a conversation section rendered from
// start: the length of its root within the section (0: none).
func (c *chat) rootLen(start int) int {
	c.track = false
	if c.root == 0 {
		return 0
	}
	return c.root - start
}

// messages renders chat messages (see the package documentation) into
// dst. With items set it renders Responses input items instead: an item
// with a role is a message; any other item (function_call,
// function_call_output, reasoning, …) renders as "<|" + type + "|>" + its
// raw JSON + "\n".
func (c *chat) messages(dst []byte, depth int, items bool) ([]byte, error) {
	s := &c.s
	if items, err := c.array(depth, 2); err != nil || !items {
		return dst, err
	}
	for {
		s.WS()
		if s.Peek() != '{' {
			return dst, c.wrongType(depth + 1)
		}
		var role, content, typ []byte
		var roleEsc, typEsc, haveRole, rendered, badContent bool
		msgStart, itemStart := len(dst), s.Pos()
		empty, err := s.Open('{')
		if err != nil {
			return dst, err
		}
		for !empty {
			k, kesc, err := s.Key()
			if err != nil {
				return dst, err
			}
			s.WS()
			switch {
			case !kesc && string(k) == "role":
				if role, roleEsc, err = c.stringField(depth + 2); err != nil {
					return dst, err
				}
				haveRole, rendered = true, false
			case !kesc && string(k) == "content":
				st := s.Pos()
				switch b := s.Peek(); {
				case b == '"' && haveRole: // the common order: render in one pass
					dst = appendTag(dst[:msgStart], role, roleEsc)
					dst = append(dst, '\n')
					if dst, err = s.StrAppend(dst); err != nil {
						return dst, err
					}
					rendered, badContent = true, false
				case b == '"' || b == '[' || b == 'n':
					if err := s.Value(depth + 2); err != nil {
						return dst, err
					}
					rendered, badContent = false, false
				case items: // wrong only if the item turns out to be a message
					if err := s.Value(depth + 2); err != nil {
						return dst, err
					}
					rendered, badContent = false, true
				default:
					return dst, c.wrongType(depth + 2)
				}
				content = s.Since(st)
			case items && !kesc && string(k) == "type" && s.Peek() == '"':
				if typ, typEsc, err = s.Str(); err != nil {
					return dst, err
				}
			default:
				if err := s.Value(depth + 2); err != nil {
					return dst, err
				}
			}
			more, err := s.More('}')
			if err != nil {
				return dst, err
			}
			if !more {
				break
			}
		}
		switch {
		case items && !haveRole:
			dst = appendTag(dst[:msgStart], typ, typEsc)
			dst = append(dst, s.Since(itemStart)...)
		case badContent:
			return dst, ErrBadField
		case !rendered:
			dst = appendTag(dst[:msgStart], role, roleEsc)
			dst = append(dst, '\n')
			if dst, err = renderContent(dst, content, depth+2); err != nil {
				return dst, err
			}
		}
		dst = append(dst, '\n')
		if c.track && c.root == 0 && !(haveRole && !roleEsc && systemRole(role)) {
			c.root = len(dst)
		}
		more, err := s.More(']')
		if err != nil || !more {
			return dst, err
		}
	}
}

// appendTag appends "<|" + name + "|>", name decoded when esc.
func appendTag(dst, name []byte, esc bool) []byte {
	dst = append(dst, "<|"...)
	dst = jsonscan.AppendString(dst, name, esc)
	return append(dst, "|>"...)
}

// systemRole reports whether role is a system prompt's ("system",
// "developer"), which belongs to the scaffold, not the conversation.
func systemRole(role []byte) bool {
	switch string(role) {
	case "system", "developer":
		return true
	}
	return false
}

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
	var s jsonscan.Scanner
	s.Reset(content)
	switch s.Peek() {
	case 0, 'n':
		return dst, nil
	case '"':
		raw, esc, _ := s.Str()
		return jsonscan.AppendString(dst, raw, esc), nil
	}
	empty, _ := s.Open('[')
	for n := 0; !empty; n++ {
		s.WS()
		if s.Peek() != '{' {
			return dst, ErrBadField
		}
		st := s.Pos()
		var typ, text []byte
		var typEsc, textEsc, haveText bool
		empty, _ := s.Open('{')
		for !empty {
			k, kesc, _ := s.Key()
			s.WS()
			switch {
			case !kesc && string(k) == "type" && s.Peek() == '"':
				typ, typEsc, _ = s.Str()
			case !kesc && string(k) == "text" && s.Peek() == '"':
				text, textEsc, _ = s.Str()
				haveText = true
			default:
				_ = s.Value(depth + 2)
			}
			if more, _ := s.More('}'); !more {
				break
			}
		}
		if n > 0 {
			dst = append(dst, '\n')
		}
		if haveText && textPart(typ) {
			dst = jsonscan.AppendString(dst, text, textEsc)
		} else {
			dst = appendTag(dst, typ, typEsc)
			dst = append(dst, s.Since(st)...)
		}
		if more, _ := s.More(']'); !more {
			break
		}
	}
	return dst, nil
}

// system renders a system prompt: a string, null (nothing), or an array
// of content parts.
func (c *chat) system(dst []byte, depth int) ([]byte, error) {
	s := &c.s
	var err error
	switch s.Peek() {
	case 'n':
		return dst, s.Lit("null")
	case '"':
		dst = append(dst, "<|system|>\n"...)
		if dst, err = s.StrAppend(dst); err != nil {
			return dst, err
		}
	case '[':
		st := s.Pos()
		if err := s.Value(depth); err != nil {
			return dst, err
		}
		dst = append(dst, "<|system|>\n"...)
		if dst, err = renderContent(dst, s.Since(st), depth); err != nil {
			return dst, err
		}
	default:
		return dst, c.wrongType(depth)
	}
	return append(dst, '\n'), nil
}

// tools renders a tool list, an array or null (nothing), as its raw JSON:
// the definitions an agent sends are the same bytes on every request.
func (c *chat) tools(dst []byte, depth int) ([]byte, error) {
	s := &c.s
	if s.Peek() == 'n' {
		return dst, s.Lit("null")
	}
	if s.Peek() != '[' {
		return dst, c.wrongType(depth)
	}
	st := s.Pos()
	if err := s.Value(depth); err != nil {
		return dst, err
	}
	dst = append(dst, "<|tools|>\n"...)
	dst = append(dst, s.Since(st)...)
	return append(dst, '\n'), nil
}

// member reads an object's string member name (a session id), or, with
// orString, a string value itself. Values of any other type are skipped
// (ok false), as for session_id.
func (c *chat) member(depth int, name string, orString bool) (r rawStr, err error) {
	s := &c.s
	switch b := s.Peek(); {
	case b == '"' && orString:
		r.raw, r.esc, err = s.Str()
		r.ok = err == nil
		return r, err
	case b != '{':
		return r, s.Value(depth)
	}
	if depth >= jsonscan.MaxDepth {
		return r, jsonscan.ErrTooDeep
	}
	empty, err := s.Open('{')
	for err == nil && !empty {
		var k []byte
		var kesc, more bool
		if k, kesc, err = s.Key(); err != nil {
			break
		}
		s.WS()
		if !kesc && string(k) == name && s.Peek() == '"' {
			r.raw, r.esc, err = s.Str()
			r.ok = err == nil
		} else {
			err = s.Value(depth + 1)
		}
		if err != nil {
			break
		}
		if more, err = s.More('}'); !more {
			break
		}
	}
	return r, err
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
