// Package proxy is trimtab's data path: the two ways requests reach the
// scheduler, and the admin server.
//
//   - HTTP is an OpenAI-compatible reverse proxy (/v1/completions,
//     /v1/chat/completions, /v1/responses, the Anthropic /v1/messages,
//     /v1/models, other /v1/* passed through). It
//     parses the body once (Parser, over package parse), asks the
//     scheduler for an endpoint,
//     forwards the body byte for byte and streams the answer back, flushing
//     every chunk so SSE events are never held. Any failure before the
//     endpoint's response headers (refused, reset, closed, timed out), a
//     502/503, or headers followed by a failure or by silence longer than
//     the stream idle timeout before the first body byte, while no byte
//     reached the client, is retried on the decision's next fallback;
//     never after. Error answers name the last endpoint tried in
//     X-Trimtab-Endpoint.
//   - ExtProc is an Envoy ext_proc gRPC server speaking the Gateway API
//     Inference Extension endpoint-picker protocol: it buffers the request
//     body, picks, and answers with the x-gateway-destination-endpoint
//     header and envoy.lb dynamic metadata (and, opt-in, the decision's
//     scores); it watches the response to finish the decision.
//
// Both paths read the usage the endpoint reports (prompt, cached and
// output tokens) from the response bytes they pass on, without holding or
// copying the stream to the client, and give it to the decision's Outcome
// for the calibration (usage.go).
//   - Admin serves /metrics, /healthz, /readyz and JSON debug views
//     (/debug/weights, /debug/endpoints, /debug/decisions), and
//     /debug/trace: the TrafficRecorder's window of scheduled requests as
//     a Mooncake-format trace.
//
// Both request paths finish every scheduler.Decision exactly once (success,
// error or cancellation), so in-flight counts cannot leak, and neither lets
// a request name its own destination: x-gateway-destination-endpoint and
// friends are stripped from inbound requests (HTTP) or overwritten (Envoy).
//
// Concurrency model: each server is a component with Run(ctx) that listens
// (or uses the listener bound by Listen), serves until ctx is cancelled,
// then drains: it stops accepting, lets in-flight requests (SSE streams
// included) finish for up to Config.DrainTimeout, then cuts them and
// returns once every handler goroutine has returned. net/http and grpc own
// the per-connection and per-stream goroutines; Run waits for them. A
// handler goroutine owns its request from parse to Done; the only shared
// state is the scheduler (lock-free), the metrics, the Recorder (a mutex
// held for a slice copy), the TrafficRecorder (atomic slot reservations in
// fixed arrays) and sync.Pools of per-request buffers.
package proxy
