// Package fakeserver runs the simulator's vLLM engine model in (scaled)
// wall-clock time behind a real HTTP server that speaks vLLM's API:
// /v1/completions, /v1/chat/completions, the OpenAI Responses API
// /v1/responses and the Anthropic Messages API /v1/messages (each SSE
// streamed in its own events, and not),
// /v1/models, /health and /metrics in vLLM's metric names (Prometheus text,
// including vllm:cache_config_info). The demo and the end-to-end tests
// start several on 127.0.0.1:0 in one process. A Responses request may
// continue an earlier response by previous_response_id: a ResponseStore,
// which a fleet shares, holds each response's conversation (bounded), and
// the continuation is prefilled with all of it, so its prefix-cache hits
// depend on which server it reaches, as on a real fleet. Response ids carry
// the server's name, so a fleet's ids are distinct.
//
// # Concurrency model
//
// One Server owns one engine.Engine, guarded by a mutex. Run owns the
// single goroutine that steps the engine: it starts a step, waits the
// step's duration divided by the time scale on the injected clock, then
// finishes the step and hands each event to the request it belongs to
// through a buffered channel sized so the send never blocks. HTTP handler
// goroutines (owned by net/http) only add sequences, abort them when the
// client goes away, and read their own channel. Serve runs Run and an
// http.Server together and returns when ctx is cancelled, after both have
// stopped.
package fakeserver
