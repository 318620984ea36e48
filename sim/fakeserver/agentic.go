package fakeserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/trimtab/trimtab/sim/engine"
)

// The agentic APIs (OpenAI Responses, Anthropic Messages) are rendered
// into engine prompt bytes like chat: system prompt first, then the tool
// definitions, then the conversation, so requests of one agent share their
// leading blocks in the prefix cache, as a real server's chat template
// places them.

// renderParts renders a content value: a string as itself; null as
// nothing; an array of parts as the parts joined by "\n", a text part
// (type text, input_text or output_text) as its text, any other part as
// "<|" + type + "|>" + its JSON.
func renderParts(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or an array of content parts")
	}
	var b strings.Builder
	for i, p := range parts {
		var part struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(p, &part); err != nil {
			return "", fmt.Errorf("part %d: want an object", i)
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		switch {
		case part.Text != nil && (part.Type == "text" || part.Type == "input_text" || part.Type == "output_text"):
			b.WriteString(*part.Text)
		default:
			b.WriteString("<|" + part.Type + "|>")
			b.Write(compact(p))
		}
	}
	return b.String(), nil
}

// compact returns raw JSON without insignificant white space.
func compact(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// renderHead renders a system prompt and tool list: "<|system|>\n" +
// text + "\n", then "<|tools|>\n" + the tools' JSON + "\n".
func renderHead(system json.RawMessage, tools json.RawMessage) ([]byte, error) {
	var b []byte
	text, err := renderParts(system)
	if err != nil {
		return nil, fmt.Errorf("system: %w", err)
	}
	if text != "" {
		b = append(b, "<|system|>\n"+text+"\n"...)
	}
	if len(tools) > 0 && string(tools) != "null" {
		if tools[0] != '[' {
			return nil, errors.New("tools: want an array")
		}
		b = append(b, "<|tools|>\n"...)
		b = append(b, compact(tools)...)
		b = append(b, '\n')
	}
	return b, nil
}

// generate waits for er's tokens and hands each new piece of text to
// emit with the number of tokens generated so far, the last piece with
// final set (it may be empty). It returns that number and false when the
// client went away or emit failed (the request is then aborted).
func (s *Server) generate(ctx context.Context, er *request, emit func(piece string, n int, final bool) error) (int, bool) {
	n := 0
	for {
		select {
		case <-ctx.Done():
			s.cancel(er)
			return n, false
		case ev := <-er.events:
			final := ev.kind == engine.EventFinished
			if !final && ev.generated >= er.seq.OutputTokens {
				continue // the finish event carries the last token
			}
			var piece strings.Builder
			for ; n < ev.generated; n++ {
				piece.WriteString(word(n))
			}
			if !final && piece.Len() == 0 {
				continue
			}
			if err := emit(piece.String(), n, final); err != nil {
				s.cancel(er)
				return n, false
			}
			if final {
				s.finished()
				return n, true
			}
		}
	}
}

// sse writes one server-sent event and flushes it.
type sse struct {
	w  http.ResponseWriter
	fl http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush()
	}
	return &sse{w: w, fl: fl}
}

// event writes "event: typ\ndata: <v as JSON>\n\n".
func (e *sse) event(typ string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", typ, b); err != nil {
		return err
	}
	if e.fl != nil {
		e.fl.Flush()
	}
	return nil
}

// maxTokens checks a requested output length (nil: the default).
func (s *Server) maxTokens(field string, v *int) (int, error) {
	n := s.cfg.DefaultMaxTokens
	if v != nil {
		n = *v
	}
	if n < 1 || n > s.cfg.MaxTokensLimit {
		return 0, fmt.Errorf("%s must be in 1…%d, got %d", field, s.cfg.MaxTokensLimit, n)
	}
	return n, nil
}
