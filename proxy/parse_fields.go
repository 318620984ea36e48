package proxy

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

// messages renders chat messages (see Parser) into dst. With items set it
// renders Responses input items instead: an item with a role is a message;
// any other item (function_call, function_call_output, reasoning, …)
// renders as "<|" + type + "|>" + its raw JSON + "\n".
func (s *scan) messages(dst []byte, depth int, items bool) ([]byte, error) {
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
		var role, content, typ []byte
		var roleEsc, typEsc, haveRole, rendered, badContent bool
		msgStart, itemStart := len(dst), s.i
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
					rendered, badContent = true, false
				case c == '"' || c == '[' || c == 'n':
					if err := s.value(depth + 2); err != nil {
						return dst, err
					}
					rendered, badContent = false, false
				case items: // wrong only if the item turns out to be a message
					if err := s.value(depth + 2); err != nil {
						return dst, err
					}
					rendered, badContent = false, true
				default:
					return dst, s.wrongType(depth + 2)
				}
				content = s.b[st:s.i]
			case items && !kesc && string(k) == "type" && s.peek() == '"':
				if typ, typEsc, err = s.str(); err != nil {
					return dst, err
				}
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
		switch {
		case items && !haveRole:
			dst = append(dst[:msgStart], "<|"...)
			dst = appendStr(dst, typ, typEsc)
			dst = append(dst, "|>"...)
			dst = append(dst, s.b[itemStart:s.i]...)
		case badContent:
			return dst, ErrBadField
		case !rendered:
			dst = append(dst[:msgStart], "<|"...)
			dst = appendStr(dst, role, roleEsc)
			dst = append(dst, "|>\n"...)
			if dst, err = renderContent(dst, content, depth+2); err != nil {
				return dst, err
			}
		}
		dst = append(dst, '\n')
		if s.track && s.root == 0 && !(haveRole && !roleEsc && systemRole(role)) {
			s.root = len(dst)
		}
		more, err := s.more(']')
		if err != nil || !more {
			return dst, err
		}
	}
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
