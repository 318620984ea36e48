package proxy

import (
	"bytes"
	"encoding/binary"
	"unicode/utf16"
	"unicode/utf8"
)

// scan is a validating JSON scanner over b; i is the read position.
type scan struct {
	b []byte
	i int
	// root is where, in the rendered prompt, the conversation's first item
	// that is not a system message ends (0: none yet); tracked while track
	// (see lineage.go).
	root  int
	track bool
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
