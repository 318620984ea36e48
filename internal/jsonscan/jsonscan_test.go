package jsonscan

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// scanDoc validates doc as one JSON document.
func scanDoc(doc []byte) error {
	var s Scanner
	s.Reset(doc)
	if err := s.Value(0); err != nil {
		return err
	}
	if !s.End() {
		return ErrSyntax
	}
	return nil
}

func TestValue(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		name, doc string
		want      error
	}{
		{"object", `{"a":[1,-2.5e+3,true,false,null,"x"],"b":{}}`, nil},
		{"whitespace around", " \t\r\n{ \"a\" : [ ] } \n", nil},
		{"escapes", `"\" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00"`, nil},
		{"lone surrogate is valid JSON", `"\ud83d"`, nil},
		{"zero", `0`, nil},
		{"negative fraction", `-0.5`, nil},
		{"exponent without sign", `1E9`, nil},
		{"empty", ``, ErrSyntax},
		{"only whitespace", ` `, ErrSyntax},
		{"trailing garbage", `{} x`, ErrSyntax},
		{"trailing comma", `[1,]`, ErrSyntax},
		{"missing colon", `{"a" 1}`, ErrSyntax},
		{"unquoted key", `{a:1}`, ErrSyntax},
		{"leading zero", `01`, ErrSyntax},
		{"bare minus", `-`, ErrSyntax},
		{"dot without digits", `1.`, ErrSyntax},
		{"exponent without digits", `1e+`, ErrSyntax},
		{"bad escape", `"\q"`, ErrSyntax},
		{"short unicode escape", `"\u12"`, ErrSyntax},
		{"non-hex unicode escape", `"\u12g4"`, ErrSyntax},
		{"control character", "\"a\x01\"", ErrSyntax},
		{"unterminated string", `"abc`, ErrSyntax},
		{"truncated literal", `tru`, ErrSyntax},
		{"unclosed array", `[1`, ErrSyntax},
		// Value(0) holds the document at depth 0, so MaxDepth nested
		// containers are the deepest accepted, as in encoding/json.
		{"MaxDepth arrays", deep(MaxDepth), nil},
		{"MaxDepth+1 arrays", deep(MaxDepth + 1), ErrTooDeep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := scanDoc([]byte(tt.doc))
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if valid := json.Valid([]byte(tt.doc)); valid != (err == nil) {
				t.Fatalf("err = %v but encoding/json says valid=%v", err, valid)
			}
		})
	}
}

func TestStrAppend(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"plain", `"hello"`, "hello"},
		{"longer than a word", `"the quick brown fox"`, "the quick brown fox"},
		{"two-byte escapes", `"a\"b\\c\/d\be\ff\ng\rh\ti"`, "a\"b\\c/d\be\ff\ng\rh\ti"},
		{"unicode escape", `"caf\u00e9"`, "café"},
		{"surrogate pair", `"\ud83d\ude00!"`, "😀!"},
		{"lone high surrogate", `"\ud83dx"`, "\uFFFDx"},
		{"lone low surrogate", `"\ude00"`, "\uFFFD"},
		{"high surrogate then non-surrogate escape", `"\ud83d\u0041"`, "\uFFFDA"},
		{"raw UTF-8", `"naïve — ok"`, "naïve — ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Scanner
			s.Reset([]byte(tt.doc))
			got, err := s.StrAppend([]byte("prefix:"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "prefix:"+tt.want {
				t.Fatalf("StrAppend = %q, want %q", got, "prefix:"+tt.want)
			}
			if !s.End() {
				t.Fatalf("read position %d, want the end %d", s.Pos(), len(tt.doc))
			}
			s.Reset([]byte(tt.doc))
			raw, esc, err := s.Str()
			if err != nil {
				t.Fatal(err)
			}
			if got := String(raw, esc); got != tt.want {
				t.Fatalf("String(Str()) = %q, want %q", got, tt.want)
			}
			var ref string
			if err := json.Unmarshal([]byte(tt.doc), &ref); err != nil || ref != tt.want {
				t.Fatalf("encoding/json decodes %q (%v), the table says %q", ref, err, tt.want)
			}
		})
	}
}

// TestStrAppendOffsets: an escape, a quote or a control character at
// every offset within and across the 8-byte words the plain path reads,
// and strings that end in the document's last incomplete word, decode as
// encoding/json decodes them (or fail as it does).
func TestStrAppendOffsets(t *testing.T) {
	for _, special := range []string{`\n`, `\"`, `\u00e9`, "\x01"} {
		for pre := 0; pre <= 17; pre++ {
			for post := 0; post <= 9; post++ {
				doc := []byte(`"` + strings.Repeat("a", pre) + special + strings.Repeat("b", post) + `"`)
				var want string
				wantErr := json.Unmarshal(doc, &want)
				var s Scanner
				s.Reset(doc)
				got, err := s.StrAppend([]byte("x"))
				if (err != nil) != (wantErr != nil) || err == nil && string(got) != "x"+want {
					t.Fatalf("%q: StrAppend = %q, %v; encoding/json %q, %v", doc, got, err, want, wantErr)
				}
				if err == nil && s.Pos() != len(doc) {
					t.Fatalf("%q: read position %d, want %d", doc, s.Pos(), len(doc))
				}
			}
		}
	}
}

// TestScanAllocs: validating a document and decoding a string into a
// buffer with room allocate nothing.
func TestScanAllocs(t *testing.T) {
	doc := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat(`word \"q\" \u00e9 `, 2000) + `"}],"n":[1,2.5,-3e4,true,null]}`)
	str := []byte(`"` + strings.Repeat(`word \"q\" \u00e9\ud83d\ude00 `, 2000) + `"`)
	buf := make([]byte, 0, len(str))
	if n := testing.AllocsPerRun(20, func() {
		if err := scanDoc(doc); err != nil {
			t.Fatal(err)
		}
		var s Scanner
		s.Reset(str)
		if _, err := s.StrAppend(buf[:0]); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per scan, want 0", n)
	}
}

// BenchmarkStrAppend measures decoding a string of the given size:
// plain text, a prompt's lines (an escaped newline every 64 bytes) and
// escape-dense text (three escapes every 12 bytes).
func BenchmarkStrAppend(b *testing.B) {
	for _, tc := range []struct{ name, word string }{
		{"plain", "quick brown fox "},
		{"lines", strings.Repeat("abc ", 15) + `abc\n`},
		{"dense", `fox\n \"q\" `},
	} {
		for _, size := range []int{512, 32 << 10} {
			str := []byte(`"` + strings.Repeat(tc.word, size/len(tc.word)) + `"`)
			b.Run(tc.name+"/bytes="+strconv.Itoa(size), func(b *testing.B) {
				buf := make([]byte, 0, len(str))
				b.ReportAllocs()
				b.SetBytes(int64(len(str)))
				for b.Loop() {
					var s Scanner
					s.Reset(str)
					if _, err := s.StrAppend(buf[:0]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// FuzzScan checks the scanner against encoding/json: it never panics,
// accepts exactly the documents encoding/json accepts (depth apart),
// returns only its own errors, and decodes a string document as
// encoding/json does, in one pass (StrAppend) and in two (Str, String).
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,-2.5e+3,true,false,null,"x"],"b":{}}`, `"\ud83d\ude00\u00e9\n\"x\""`, `"\ud83d"`, `"\ude00\ud83d"`,
		`[]`, `{}`, `0`, `-0.0e-0`, `01`, `1.`, `"\x"`, "\"\x01\"", `{"a" 1}`, `[1,]`, `tru`, `"abc`, ` "a" `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		err := scanDoc(doc)
		if err != nil && !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrTooDeep) {
			t.Fatalf("error %v is none of the package's", err)
		}
		if !errors.Is(err, ErrTooDeep) && json.Valid(doc) != (err == nil) {
			t.Fatalf("scan error %v, encoding/json valid=%v on %q", err, json.Valid(doc), doc)
		}
		var s Scanner
		s.Reset(doc)
		s.WS()
		if err != nil || s.Peek() != '"' {
			return
		}
		st := s.Pos()
		one, err := s.StrAppend(nil)
		if err != nil {
			t.Fatalf("StrAppend: %v on a valid string document %q", err, doc)
		}
		s.Seek(st)
		raw, esc, err := s.Str()
		if err != nil {
			t.Fatalf("Str: %v on a valid string document %q", err, doc)
		}
		if two := String(raw, esc); two != string(one) {
			t.Fatalf("StrAppend %q, Str+String %q", one, two)
		}
		if !utf8.Valid(doc) {
			return // encoding/json replaces invalid UTF-8; the scanner copies it
		}
		var ref string
		if err := json.Unmarshal(doc, &ref); err != nil || ref != string(one) {
			t.Fatalf("StrAppend %q, encoding/json %q (%v)", one, ref, err)
		}
	})
}
