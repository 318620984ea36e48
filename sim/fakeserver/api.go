package fakeserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/trimtab/trimtab/sim/engine"
)

// word returns the i-th output token's text.
func word(i int) string {
	words := [...]string{"lorem ", "ipsum ", "dolor ", "sit ", "amet ", "consectetur ", "adipiscing ", "elit "}
	return words[i%len(words)]
}

type completionRequest struct {
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"`
	Messages  []Message       `json:"messages"`
	MaxTokens *int            `json:"max_tokens"`
	// MaxCompletionTokens is the newer name of max_tokens.
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options"`
}

// Message is one chat message of a /v1/chat/completions request.
type Message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	var e apiError
	e.Error.Message, e.Error.Type, e.Error.Code = msg, "BadRequestError", code
	if code >= 500 {
		e.Error.Type = "InternalServerError"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(e)
}

// parse reads and checks a request body; chat selects messages or prompt.
func (s *Server) parse(w http.ResponseWriter, r *http.Request, chat bool) (*completionRequest, []byte, int, bool) {
	var req completionRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20))
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return nil, nil, 0, false
	}
	if _, ok := s.adapterFor(req.Model); !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return nil, nil, 0, false
	}
	var prompt []byte
	var err error
	if chat {
		prompt, err = RenderMessages(req.Messages)
	} else {
		prompt, err = promptBytes(req.Prompt)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return nil, nil, 0, false
	}
	maxTokens := s.cfg.DefaultMaxTokens
	if req.MaxCompletionTokens != nil {
		maxTokens = *req.MaxCompletionTokens
	}
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if maxTokens < 1 || maxTokens > s.cfg.MaxTokensLimit {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("max_tokens must be in 1…%d, got %d", s.cfg.MaxTokensLimit, maxTokens))
		return nil, nil, 0, false
	}
	return &req, prompt, maxTokens, true
}

// promptBytes accepts a string or an array of strings (joined).
func promptBytes(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return nil, errors.New("prompt: required")
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, errors.New("prompt: must not be empty")
		}
		return []byte(one), nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil || len(many) == 0 {
		return nil, errors.New("prompt: want a string or an array of strings")
	}
	return []byte(strings.Join(many, "")), nil
}

// RenderMessages renders chat messages canonically ("<|role|>\ncontent\n"
// per message), so a shared system prompt and shared earlier turns become
// shared leading bytes. Content may be a string or an array of
// {type: text, text} parts.
func RenderMessages(msgs []Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, errors.New("messages: at least one message is required")
	}
	var b []byte
	for i, m := range msgs {
		if m.Role == "" {
			return nil, fmt.Errorf("messages[%d].role: required", i)
		}
		b = append(b, "<|"+m.Role+"|>\n"...)
		var text string
		if len(m.Content) > 0 && string(m.Content) != "null" {
			if err := json.Unmarshal(m.Content, &text); err != nil {
				var parts []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				}
				if err := json.Unmarshal(m.Content, &parts); err != nil {
					return nil, fmt.Errorf("messages[%d].content: want a string or text parts", i)
				}
				for _, p := range parts {
					text += p.Text
				}
			}
		}
		b = append(b, text...)
		b = append(b, '\n')
	}
	return b, nil
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.serve(w, r, false)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.serve(w, r, true)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, chat bool) {
	arrived := s.clk.Now()
	req, prompt, maxTokens, ok := s.parse(w, r, chat)
	if !ok {
		return
	}
	lora, _ := s.adapterFor(req.Model)
	er, err := s.submit(prompt, maxTokens, lora)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	er.arrived = arrived
	if s.cfg.Name != "" {
		w.Header().Set("X-Fakeserver-Name", s.cfg.Name)
	}
	id := "cmpl-" + strconv.FormatUint(er.seq.ID, 10)
	if chat {
		id = "chatcmpl-" + strconv.FormatUint(er.seq.ID, 10)
	}
	created := s.clk.Now().Unix()
	if req.Stream {
		s.stream(w, r, er, id, created, chat, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	var text strings.Builder
	n := 0
	for {
		select {
		case <-r.Context().Done():
			s.cancel(er)
			return
		case ev := <-er.events:
			for ; n < ev.generated; n++ {
				text.WriteString(word(n))
			}
			if ev.kind != engine.EventFinished {
				continue
			}
			s.finished()
			usage := er.usage(n)
			var choice map[string]any
			obj := "text_completion"
			if chat {
				obj = "chat.completion"
				choice = map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text.String()}, "finish_reason": "length"}
			} else {
				choice = map[string]any{"index": 0, "text": text.String(), "finish_reason": "length"}
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"id": id, "object": obj, "created": created, "model": s.cfg.Model,
				"choices": []any{choice}, "usage": usage,
			})
			return
		}
	}
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, er *request, id string, created int64, chat, usage bool) {
	fl, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	obj := "text_completion"
	if chat {
		obj = "chat.completion.chunk"
	}
	n := 0
	for {
		select {
		case <-r.Context().Done():
			s.cancel(er)
			return
		case ev := <-er.events:
			kind := ev.kind
			if kind != engine.EventFinished && ev.generated >= er.seq.OutputTokens {
				continue // the finish event carries the last token
			}
			var piece strings.Builder
			first := n == 0
			for ; n < ev.generated; n++ {
				piece.WriteString(word(n))
			}
			var finish any
			if kind == engine.EventFinished {
				finish = "length"
			} else if piece.Len() == 0 {
				continue
			}
			var choice map[string]any
			if chat {
				delta := map[string]any{"content": piece.String()}
				if first {
					delta["role"] = "assistant"
				}
				choice = map[string]any{"index": 0, "delta": delta, "finish_reason": finish}
			} else {
				choice = map[string]any{"index": 0, "text": piece.String(), "finish_reason": finish}
			}
			b, _ := json.Marshal(map[string]any{"id": id, "object": obj, "created": created, "model": s.cfg.Model, "choices": []any{choice}})
			if first && piece.Len() > 0 {
				er.firstAt = s.clk.Now()
			}
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				s.cancel(er)
				return
			}
			if kind == engine.EventFinished {
				if usage {
					_ = writeUsageChunk(w, er, id, obj, s.cfg.Model, created, n)
				}
				_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
				if fl != nil {
					fl.Flush()
				}
				s.finished()
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
	}
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	data := []any{map[string]any{
		"id": s.cfg.Model, "object": "model", "created": s.start.Unix(), "owned_by": "trimtab-fakeserver",
		"max_model_len": s.cfg.Engine.NumBlocks * s.cfg.Engine.BlockSize,
	}}
	for _, a := range s.cfg.Adapters { // as vLLM lists --lora-modules
		data = append(data, map[string]any{"id": a, "object": "model", "created": s.start.Unix(),
			"owned_by": "trimtab-fakeserver", "root": a, "parent": s.cfg.Model})
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}
