package fakeserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// messagesRequest is the part of an Anthropic Messages request
// (POST /v1/messages) the server reads.
type messagesRequest struct {
	Model     string          `json:"model"`
	MaxTokens *int            `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []Message       `json:"messages"`
	Tools     json.RawMessage `json:"tools"`
	Stream    bool            `json:"stream"`
}

// writeAnthropicError answers in the Messages API's error format:
// {"type":"error","error":{"type":…,"message":…}}.
func writeAnthropicError(w http.ResponseWriter, code int, msg string) {
	typ := "invalid_request_error"
	switch {
	case code == http.StatusNotFound:
		typ = "not_found_error"
	case code >= 500:
		typ = "api_error"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}

// renderConversation renders Messages turns as "<|role|>\n" + content +
// "\n", content blocks as renderParts does.
func renderConversation(msgs []Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, fmt.Errorf("messages: at least one message is required")
	}
	var b []byte
	for i, m := range msgs {
		if m.Role != "user" && m.Role != "assistant" {
			return nil, fmt.Errorf("messages[%d].role: want user or assistant, got %q", i, m.Role)
		}
		text, err := renderParts(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		b = append(b, "<|"+m.Role+"|>\n"+text+"\n"...)
	}
	return b, nil
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	var req messagesRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20)).Decode(&req); err != nil {
		writeAnthropicError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if req.Model == "" {
		writeAnthropicError(w, http.StatusBadRequest, "model: Field required")
		return
	}
	lora, ok := s.adapterFor(req.Model)
	if !ok {
		writeAnthropicError(w, http.StatusNotFound, fmt.Sprintf("model: %s", req.Model))
		return
	}
	if req.MaxTokens == nil {
		writeAnthropicError(w, http.StatusBadRequest, "max_tokens: Field required")
		return
	}
	maxTokens, err := s.maxTokens("max_tokens", req.MaxTokens)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	prompt, err := renderHead(req.System, req.Tools)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	conv, err := renderConversation(req.Messages)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	er, err := s.submit(append(prompt, conv...), maxTokens, lora)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.cfg.Name != "" {
		w.Header().Set("X-Fakeserver-Name", s.cfg.Name)
	}
	id := "msg_" + strconv.FormatUint(er.seq.ID, 10)
	// Input tokens read from the cache are reported apart from the others,
	// as the Messages API does. CachedTokens is set at admission, before
	// the first token event.
	usage := func(n int) map[string]int {
		return map[string]int{"input_tokens": er.seq.PromptTokens - er.seq.CachedTokens, "cache_creation_input_tokens": 0,
			"cache_read_input_tokens": er.seq.CachedTokens, "output_tokens": n}
	}
	// The server always generates max_tokens tokens.
	const stop = "max_tokens"
	if !req.Stream {
		var text strings.Builder
		n, ok := s.generate(r.Context(), er, func(piece string, _ int, _ bool) error { text.WriteString(piece); return nil })
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": s.cfg.Model,
			"content":     []any{map[string]string{"type": "text", "text": text.String()}},
			"stop_reason": stop, "stop_sequence": nil, "usage": usage(n),
		})
		return
	}
	out := newSSE(w)
	started := false
	_, _ = s.generate(r.Context(), er, func(piece string, n int, final bool) error {
		if !started {
			started = true
			if err := out.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
				"id": id, "type": "message", "role": "assistant", "model": s.cfg.Model, "content": []any{},
				"stop_reason": nil, "stop_sequence": nil, "usage": usage(1),
			}}); err != nil {
				return err
			}
			if err := out.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
				"content_block": map[string]string{"type": "text", "text": ""}}); err != nil {
				return err
			}
			if err := out.event("ping", map[string]string{"type": "ping"}); err != nil {
				return err
			}
		}
		if piece != "" {
			if err := out.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]string{"type": "text_delta", "text": piece}}); err != nil {
				return err
			}
		}
		if !final {
			return nil
		}
		if err := out.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}); err != nil {
			return err
		}
		if err := out.event("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": usage(n)}); err != nil {
			return err
		}
		return out.event("message_stop", map[string]string{"type": "message_stop"})
	})
}
