package fakeserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// responsesRequest is the part of an OpenAI Responses request
// (POST /v1/responses) the server reads.
type responsesRequest struct {
	Model           string          `json:"model"`
	Instructions    json.RawMessage `json:"instructions"`
	Input           json.RawMessage `json:"input"`
	Tools           json.RawMessage `json:"tools"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
	// PreviousResponseID continues a stored response: its conversation
	// (input and output) comes before Input.
	PreviousResponseID string `json:"previous_response_id"`
	// Store false keeps the response out of the store (default true).
	Store *bool `json:"store"`
}

// renderInput renders Responses input: a string as one user message; an
// array of items, a message (an item with a role) as "<|role|>\n" +
// content + "\n", any other item (function_call, function_call_output, …)
// as "<|" + type + "|>" + its JSON + "\n".
func renderInput(raw json.RawMessage) ([]byte, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return nil, errors.New("input: must not be empty")
		}
		return []byte("<|user|>\n" + s + "\n"), nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, errors.New("input: want a string or a non-empty array of items")
	}
	var b []byte
	for i, it := range items {
		var item struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(it, &item); err != nil {
			return nil, fmt.Errorf("input[%d]: want an object", i)
		}
		if item.Role == "" {
			if item.Type == "" {
				return nil, fmt.Errorf("input[%d]: an item needs a role or a type", i)
			}
			b = append(b, "<|"+item.Type+"|>"...)
			b = append(b, compact(it)...)
			b = append(b, '\n')
			continue
		}
		text, err := renderParts(item.Content)
		if err != nil {
			return nil, fmt.Errorf("input[%d].content: %w", i, err)
		}
		b = append(b, "<|"+item.Role+"|>\n"+text+"\n"...)
	}
	return b, nil
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	var req responsesRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	lora, ok := s.adapterFor(req.Model)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	if len(req.Input) == 0 || string(req.Input) == "null" {
		writeError(w, http.StatusBadRequest, "input: required")
		return
	}
	prompt, err := renderHead(req.Instructions, req.Tools)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	conv, err := renderInput(req.Input)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.PreviousResponseID != "" {
		prev, ok := s.store.get(req.PreviousResponseID)
		if !ok {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("previous_response_id: Previous response with id '%s' not found.", req.PreviousResponseID))
			return
		}
		conv = append(append(make([]byte, 0, len(prev)+len(conv)), prev...), conv...)
	}
	maxTokens, err := s.maxTokens("max_output_tokens", req.MaxOutputTokens)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	er, err := s.submit(append(prompt, conv...), maxTokens, lora)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.cfg.Name != "" {
		w.Header().Set("X-Fakeserver-Name", s.cfg.Name)
	}
	// Ids carry the server's name, so a fleet's ids are distinct.
	id := strconv.FormatUint(er.seq.ID, 10)
	if s.cfg.Name != "" {
		id = s.cfg.Name + "-" + id
	}
	store := req.Store == nil || *req.Store
	resp := map[string]any{
		"id": "resp_" + id, "object": "response", "created_at": s.clk.Now().Unix(), "status": "in_progress",
		"model": s.cfg.Model, "output": []any{}, "usage": nil,
	}
	msgID := "msg_" + id
	item := func(status, text string) map[string]any {
		content := []any{}
		if status == "completed" {
			content = []any{outputText(text)}
		}
		return map[string]any{"id": msgID, "type": "message", "status": status, "role": "assistant", "content": content}
	}
	complete := func(text string, n int) {
		if store {
			// The conversation continues with this response's output, as
			// an assistant message item renders.
			s.store.put("resp_"+id, append(conv[:len(conv):len(conv)], "<|assistant|>\n"+text+"\n"...))
		}
		resp["status"] = "completed"
		resp["output"] = []any{item("completed", text)}
		resp["usage"] = map[string]any{
			"input_tokens": er.seq.PromptTokens, "input_tokens_details": map[string]int{"cached_tokens": er.seq.CachedTokens},
			"output_tokens": n, "output_tokens_details": map[string]int{"reasoning_tokens": 0},
			"total_tokens": er.seq.PromptTokens + n,
		}
	}
	if !req.Stream {
		var text strings.Builder
		n, ok := s.generate(r.Context(), er, func(piece string, _ int, _ bool) error { text.WriteString(piece); return nil })
		if !ok {
			return
		}
		complete(text.String(), n)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
		return
	}
	out := newSSE(w)
	seq := 0
	send := func(typ string, v map[string]any) error {
		v["type"], v["sequence_number"] = typ, seq
		seq++
		return out.event(typ, v)
	}
	if send("response.created", map[string]any{"response": resp}) != nil ||
		send("response.in_progress", map[string]any{"response": resp}) != nil {
		s.cancel(er)
		return
	}
	var text strings.Builder
	started := false
	_, _ = s.generate(r.Context(), er, func(piece string, n int, final bool) error {
		if !started {
			started = true
			if err := send("response.output_item.added", map[string]any{"output_index": 0, "item": item("in_progress", "")}); err != nil {
				return err
			}
			if err := send("response.content_part.added", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0,
				"part": outputText("")}); err != nil {
				return err
			}
		}
		if piece != "" {
			text.WriteString(piece)
			if err := send("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0,
				"delta": piece, "logprobs": []any{}}); err != nil {
				return err
			}
		}
		if !final {
			return nil
		}
		full := text.String()
		complete(full, n)
		for _, ev := range []struct {
			typ string
			v   map[string]any
		}{
			{"response.output_text.done", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "text": full, "logprobs": []any{}}},
			{"response.content_part.done", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "part": outputText(full)}},
			{"response.output_item.done", map[string]any{"output_index": 0, "item": item("completed", full)}},
			{"response.completed", map[string]any{"response": resp}},
		} {
			if err := send(ev.typ, ev.v); err != nil {
				return err
			}
		}
		return nil
	})
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
}
