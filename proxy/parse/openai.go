package parse

import "github.com/trimtab/trimtab/internal/jsonscan"

// openAI reads the top-level members of an OpenAI completions or chat
// completions body.
type openAI struct{ *chat }

// field reads the top-level member k.
func (o openAI) field(k []byte, out *Parsed, f *fields) (err error) {
	switch string(k) {
	case "session_id":
		f.ids[0].raw, f.ids[0].esc, f.ids[0].ok, err = o.optString(1)
	case "user":
		f.ids[1].raw, f.ids[1].esc, f.ids[1].ok, err = o.optString(1)
	case "prompt":
		if out.Chat {
			return o.s.Value(1)
		}
		out.prompt, err = o.prompt(out.prompt[:0], 1)
	case "messages":
		out.Chat = true
		o.startRoot()
		out.prompt, err = o.messages(out.prompt[:0], 1, false)
		out.rootLen = o.rootLen(0)
	default:
		err = o.s.Value(1)
	}
	return err
}

// token reads a non-negative integer token id that fits 32 bits.
func (o openAI) token(dst []byte) ([]byte, error) {
	b, st := o.s.Bytes(), o.s.Pos()
	i := st
	var v uint64
	for i < len(b) && jsonscan.IsDigit(b[i]) {
		v = v*10 + uint64(b[i]-'0')
		if v > 1<<32-1 {
			return dst, o.wrongType(2)
		}
		i++
	}
	if i == st || (b[st] == '0' && i-st > 1) {
		return dst, o.wrongType(2)
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') { // a float: wrong type
		return dst, o.wrongType(2)
	}
	o.s.Seek(i)
	return append(dst, byte(v), byte(v>>8), byte(v>>16), byte(v>>24)), nil
}

// prompt renders a completions prompt (see the package documentation)
// into dst.
func (o openAI) prompt(dst []byte, depth int) ([]byte, error) {
	s := &o.s
	if s.Peek() == '"' {
		return s.StrAppend(dst)
	}
	if items, err := o.array(depth, 1); err != nil || !items {
		return dst, err
	}
	var err error
	const (
		kindNone = iota
		kindStrings
		kindTokens
		kindTokenArrays
	)
	kind := kindNone
	for n := 0; ; n++ {
		s.WS()
		c := s.Peek()
		switch {
		case c == '"' && (kind == kindNone || kind == kindStrings):
			kind = kindStrings
			if n > 0 {
				dst = append(dst, '\n')
			}
			if dst, err = s.StrAppend(dst); err != nil {
				return dst, err
			}
		case jsonscan.IsDigit(c) && (kind == kindNone || kind == kindTokens):
			kind = kindTokens
			if dst, err = o.token(dst); err != nil {
				return dst, err
			}
		case c == '[' && (kind == kindNone || kind == kindTokenArrays):
			kind = kindTokenArrays
			if depth+2 >= jsonscan.MaxDepth {
				return dst, jsonscan.ErrTooDeep
			}
			empty, err := s.Open('[')
			if err != nil {
				return dst, err
			}
			for !empty {
				s.WS()
				if !jsonscan.IsDigit(s.Peek()) {
					return dst, o.wrongType(depth + 2)
				}
				if dst, err = o.token(dst); err != nil {
					return dst, err
				}
				more, err := s.More(']')
				if err != nil {
					return dst, err
				}
				if !more {
					break
				}
			}
		default:
			return dst, o.wrongType(depth + 1)
		}
		more, err := s.More(']')
		if err != nil || !more {
			return dst, err
		}
	}
}
