package parse

import (
	"errors"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/internal/jsonscan"
	"github.com/trimtab/trimtab/scheduler"
)

// TestErrors: each kind of bad body gets its own error value, the
// scanner's for bodies that are not JSON and this package's for JSON that
// is not a request, in every dialect.
func TestErrors(t *testing.T) {
	tests := []struct {
		api        API
		name, body string
		want       error
	}{
		{OpenAI, "empty", ``, jsonscan.ErrSyntax},
		{Responses, "truncated", `{"model":"m"`, jsonscan.ErrSyntax},
		{Messages, "trailing garbage", `{"model":"m"} x`, jsonscan.ErrSyntax},
		{OpenAI, "too deep", `{"model":"m","x":` + strings.Repeat("[", jsonscan.MaxDepth+1) + strings.Repeat("]", jsonscan.MaxDepth+1) + `}`, jsonscan.ErrTooDeep},
		{Responses, "not an object", `[1]`, ErrNotObject},
		{Messages, "no model", `{"messages":[]}`, ErrMissingModel},
		{OpenAI, "empty model", `{"model":""}`, ErrMissingModel},
		{OpenAI, "token over 32 bits", `{"model":"m","prompt":[4294967296]}`, ErrBadField},
		{Responses, "input a number", `{"model":"m","input":3}`, ErrBadField},
		{Messages, "system an object", `{"model":"m","system":{}}`, ErrBadField},
	}
	ps := New(nil, nil)
	var p Parsed
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ps.Parse(tt.api, []byte(tt.body), "", &p); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// continuations is a fake Continuations: one learned response id.
type continuations struct {
	id  string
	key uint64
	got []string // ids asked for
}

func (c *continuations) ContinuationKey(id []byte) uint64 {
	c.got = append(c.got, string(id))
	if string(id) == c.id {
		return c.key
	}
	return 0
}

// TestContinuations: a Responses continuation takes the key its
// Continuations give for the (unescaped) previous_response_id; without
// Continuations, or in another dialect, the key comes from the
// conversation's root.
func TestContinuations(t *testing.T) {
	const body = `{"model":"m","previous_response_id":"resp\u005f7","input":"hi"}`
	// The root is the whole rendered input: "<|user|>\nhi\n".
	rootKey := scheduler.LineageKey([]byte("<|user|>\nhi\n"))
	cont := &continuations{id: "resp_7", key: 42}
	var p Parsed
	if err := New(nil, cont).Parse(Responses, []byte(body), "", &p); err != nil {
		t.Fatal(err)
	}
	if p.Request.SessionKey != 42 || len(cont.got) != 1 || cont.got[0] != "resp_7" {
		t.Fatalf("key %d after asking for %q, want 42 after asking for resp_7", p.Request.SessionKey, cont.got)
	}
	if err := New(nil, nil).Parse(Responses, []byte(body), "", &p); err != nil {
		t.Fatal(err)
	}
	if p.Request.SessionKey != rootKey {
		t.Fatalf("without Continuations: key %x, want the root's %x", p.Request.SessionKey, rootKey)
	}
	if err := New(nil, cont).Parse(Responses, []byte(body), "sess", &p); err != nil {
		t.Fatal(err)
	}
	if p.Request.SessionID != "sess" || p.Request.SessionKey != 0 || len(cont.got) != 1 {
		t.Fatalf("with a session id: id %q key %d, asked %q; want sess, 0, no new question", p.Request.SessionID, p.Request.SessionKey, cont.got)
	}
}
