// Package jsonscan is a validating JSON scanner for parsers that read a few
// members of a document and skip the rest without building values, so a
// large body is validated and read without allocating.
//
// A Scanner reads one document front to back. Its methods consume one
// syntactic element at the read position (Pos) and return ErrSyntax when
// the bytes there are not that element, ErrTooDeep when containers nest
// deeper than MaxDepth. Keys and strings come back raw (between the quotes,
// escapes not decoded) with a flag saying whether they hold escapes; Unescape
// and AppendString decode them. Raw slices alias the document. The scanner
// accepts exactly RFC 8259 JSON (the encoding/json grammar), except that it
// does not check that string bytes are valid UTF-8. A Scanner is not safe
// for concurrent use; it is a small value meant to live on the stack.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/bits"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// Errors a Scanner returns. They are values so the error path does not
// allocate; compare with errors.Is.
var (
	// ErrSyntax is returned for bytes that are not the expected JSON.
	ErrSyntax = errors.New("jsonscan: invalid JSON")
	// ErrTooDeep is returned for containers nested deeper than MaxDepth.
	ErrTooDeep = errors.New("jsonscan: JSON nests too deeply")
)

// MaxDepth bounds nesting, as encoding/json does.
const MaxDepth = 10000

// Scanner is a validating JSON scanner over a document. The zero value
// scans an empty document; Reset points it at another.
type Scanner struct {
	b []byte
	i int
}

// Reset points the scanner at the start of b.
func (s *Scanner) Reset(b []byte) { s.b, s.i = b, 0 }

// Bytes returns the document.
func (s *Scanner) Bytes() []byte { return s.b }

// Pos returns the read position, an index into Bytes.
func (s *Scanner) Pos() int { return s.i }

// Seek moves the read position to i (0 ≤ i ≤ len(Bytes())).
func (s *Scanner) Seek(i int) { s.i = i }

// Since returns the document's bytes from start to the read position.
func (s *Scanner) Since(start int) []byte { return s.b[start:s.i] }

// WS skips whitespace.
func (s *Scanner) WS() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Peek returns the byte at the read position, 0 at the end.
func (s *Scanner) Peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// Consume consumes c when it is the byte at the read position.
func (s *Scanner) Consume(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// End skips whitespace and reports whether the document ends there.
func (s *Scanner) End() bool {
	s.WS()
	return s.i == len(s.b)
}

// Open consumes the opening bracket c ('{' or '[') and reports whether the
// container is empty (in which case the closing bracket is consumed too).
// It does not count depth: callers that descend check MaxDepth themselves.
func (s *Scanner) Open(c byte) (empty bool, err error) {
	if s.i >= len(s.b) || s.b[s.i] != c {
		return false, ErrSyntax
	}
	s.i++
	s.WS()
	if s.i < len(s.b) && s.b[s.i] == c+2 { // '{'+2 == '}', '['+2 == ']'
		s.i++
		return true, nil
	}
	return false, nil
}

// More consumes a ',' (true) or the closing bracket (false), after
// whitespace.
func (s *Scanner) More(closing byte) (bool, error) {
	s.WS()
	if s.i >= len(s.b) {
		return false, ErrSyntax
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return true, nil
	case closing:
		s.i++
		return false, nil
	}
	return false, ErrSyntax
}

// Key reads an object key and the colon after it: the key's raw contents
// and whether they hold escapes. The read position is then before the
// value's leading whitespace.
func (s *Scanner) Key() (raw []byte, esc bool, err error) {
	s.WS()
	if raw, esc, err = s.Str(); err != nil {
		return nil, false, err
	}
	s.WS()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, false, ErrSyntax
	}
	s.i++
	return raw, esc, nil
}

// special flags, in the high bit of each byte of the little-endian word
// x, the bytes that end a run of plain string bytes: < 0x20, '"' and '\\'
// (SWAR). The lowest flag is exact (higher ones may be false, after a
// borrow), so bits.TrailingZeros64(special(x))/8 is the number of plain
// bytes the word starts with, 8 when it has none.
func special(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := x ^ (lo * '"')
	bs := x ^ (lo * '\\')
	return ((x - lo*0x20) | (q - lo) | (bs - lo)) &^ x & hi
}

// skipPlain returns the first index ≥ i where b does not hold a plain
// string byte, reading 8 bytes at a time, or the start of the last
// incomplete word when they are all plain.
func skipPlain(b []byte, i int) int {
	for i+8 <= len(b) {
		if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	return i
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

// Str reads a string and returns its raw contents (between the quotes,
// aliasing the document) and whether they hold escapes.
func (s *Scanner) Str() (raw []byte, esc bool, err error) {
	b := s.b
	if s.i >= len(b) || b[s.i] != '"' {
		return nil, false, ErrSyntax
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
				return nil, false, ErrSyntax
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return nil, false, ErrSyntax
				}
				if _, ok := hex4(b[i+2 : i+6]); !ok {
					return nil, false, ErrSyntax
				}
				i += 6
			default:
				return nil, false, ErrSyntax
			}
		default: // control character
			return nil, false, ErrSyntax
		}
	}
	return nil, false, ErrSyntax
}

// StrAppend reads a string and appends its decoded contents to dst in the
// same pass (validation, unescaping and copying together). On error dst
// may hold part of the string. It copies plain bytes a word at a time, so
// it may overwrite up to 8 bytes of dst's spare capacity beyond what it
// appends: dst's capacity past its length must not hold bytes the caller
// still needs.
func (s *Scanner) StrAppend(dst []byte) ([]byte, error) {
	b := s.b
	if s.i >= len(b) || b[s.i] != '"' {
		return dst, ErrSyntax
	}
	i := s.i + 1
	for {
		// Plain bytes, a word at a time: each word is stored as it is read
		// and dst is cut back to the word's plain bytes.
		for i+8 <= len(b) {
			if cap(dst)-len(dst) < 8 {
				dst = slices.Grow(dst, 8)
			}
			x := binary.LittleEndian.Uint64(b[i:])
			n := len(dst)
			binary.LittleEndian.PutUint64(dst[n:n+8], x)
			if m := special(x); m != 0 {
				k := bits.TrailingZeros64(m) >> 3
				dst = dst[:n+k]
				i += k
				break
			}
			dst = dst[:n+8]
			i += 8
		}
		if i >= len(b) {
			return dst, ErrSyntax
		}
		switch c := b[i]; {
		case strSafe[c]: // the document's last bytes, shorter than a word
			dst = append(dst, c)
			i++
		case c == '"':
			s.i = i + 1
			return dst, nil
		case c == '\\':
			if i+1 < len(b) {
				if e := simpleEscape[b[i+1]]; e != 0 {
					dst = append(dst, e)
					i += 2
					continue
				}
			}
			n, ok := escapeLen(b[i:])
			if !ok {
				return dst, ErrSyntax
			}
			dst = Unescape(dst, b[i:i+n])
			i += n
		default: // control character
			return dst, ErrSyntax
		}
	}
}

// escapeLen validates the escape at the start of b and returns its length:
// 2, 6 for \uXXXX, or 12 for a \uXXXX\uXXXX surrogate pair (which Unescape
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

// Unescape appends the decoded contents of raw, the raw contents of a
// string Str accepted, to dst. Lone surrogates become U+FFFD, as in
// encoding/json; other bytes are copied as they are.
func Unescape(dst, raw []byte) []byte {
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

// AppendString appends a string's raw contents to dst, decoded when esc
// (the flag Str and Key return).
func AppendString(dst, raw []byte, esc bool) []byte {
	if !esc {
		return append(dst, raw...)
	}
	return Unescape(dst, raw)
}

// String returns a string's raw contents decoded when esc.
func String(raw []byte, esc bool) string {
	if !esc {
		return string(raw)
	}
	return string(Unescape(nil, raw))
}

// Value validates and skips one value, after whitespace, at nesting depth
// (the depth of the container holding it; 0 for the document itself).
func (s *Scanner) Value(depth int) error {
	s.WS()
	if s.i >= len(s.b) {
		return ErrSyntax
	}
	switch c := s.b[s.i]; c {
	case '"':
		_, _, err := s.Str()
		return err
	case '{', '[':
		if depth >= MaxDepth {
			return ErrTooDeep
		}
		empty, err := s.Open(c)
		if err != nil || empty {
			return err
		}
		for {
			if c == '{' {
				if _, _, err := s.Key(); err != nil {
					return err
				}
			}
			if err := s.Value(depth + 1); err != nil {
				return err
			}
			more, err := s.More(c + 2)
			if err != nil || !more {
				return err
			}
		}
	case 't':
		return s.Lit("true")
	case 'f':
		return s.Lit("false")
	case 'n':
		return s.Lit("null")
	default:
		return s.Number()
	}
}

// Lit consumes the literal w ("true", "false" or "null").
func (s *Scanner) Lit(w string) error {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return ErrSyntax
	}
	s.i += len(w)
	return nil
}

// IsDigit reports whether c is an ASCII digit.
func IsDigit(c byte) bool { return c >= '0' && c <= '9' }

func (s *Scanner) digits() bool {
	st := s.i
	for s.i < len(s.b) && IsDigit(s.b[s.i]) {
		s.i++
	}
	return s.i > st
}

// Number consumes a number.
func (s *Scanner) Number() error {
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
		return ErrSyntax
	}
	if s.i < len(b) && b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return ErrSyntax
		}
	}
	if s.i < len(b) && (b[s.i] == 'e' || b[s.i] == 'E') {
		s.i++
		if s.i < len(b) && (b[s.i] == '+' || b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return ErrSyntax
		}
	}
	return nil
}
