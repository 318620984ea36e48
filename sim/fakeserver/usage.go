package fakeserver

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// streamOptions is the OpenAI stream_options object.
type streamOptions struct {
	// IncludeUsage asks for a last chunk, before [DONE], with empty
	// choices and the usage of the whole request.
	IncludeUsage bool `json:"include_usage"`
}

// usage is the OpenAI usage object, with vLLM's
// prompt_tokens_details.cached_tokens: the prompt tokens the engine found
// in its prefix cache when it admitted the request.
func (r *request) usage(completion int) map[string]any {
	return map[string]any{
		"prompt_tokens": r.seq.PromptTokens, "completion_tokens": completion,
		"total_tokens":          r.seq.PromptTokens + completion,
		"prompt_tokens_details": map[string]int{"cached_tokens": r.seq.CachedTokens},
	}
}

// writeUsageChunk writes the stream's usage chunk (stream_options.include_usage).
// Beside the usage it carries the server's own time to first token in
// milliseconds, {"fakeserver": {"ttft_ms": …}}, from the handler's start
// to the first token's write, when the stream wrote one and the handler
// timed its start (trimtab bench reports it per class: the server's
// share of the client's TTFT; OpenAI clients ignore unknown fields).
func writeUsageChunk(w io.Writer, r *request, id, obj, model string, created int64, completion int) error {
	m := map[string]any{"id": id, "object": obj, "created": created, "model": model,
		"choices": []any{}, "usage": r.usage(completion)}
	if !r.arrived.IsZero() && !r.firstAt.IsZero() {
		m["fakeserver"] = map[string]float64{"ttft_ms": float64(r.firstAt.Sub(r.arrived)) / float64(time.Millisecond)}
	}
	b, _ := json.Marshal(m)
	_, err := fmt.Fprintf(w, "data: %s\n\n", b)
	return err
}
