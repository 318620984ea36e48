// Package bench plays the simulator's scenarios in wall-clock time
// against real OpenAI-compatible servers, through a router under each
// routing policy, and measures what clients see: `trimtab bench` and
// `trimtab demo`.
//
// The requests come from the simulator's own generators (scenario.Renderer),
// so a scenario renders the same workload in both tools; bench sends each
// prompt as words (a three-letter syllable and a space per token), so a
// tokenizer that splits on white space sees the intended size, and warns
// (Deps.Logger, RunResult.PromptCheck, the report) when a server's
// usage.prompt_tokens is off by more than 2×. Every run salts
// its prompt bytes with a fresh value from Deps.Salt, so no run can hit a
// prefix cache an earlier run warmed on servers bench cannot restart;
// policies are interleaved over Config.Repeat repeats, each repeat
// starting one policy further on (a b c, b c a, c a b …), and reported
// as medians with their spread.
//
// Agent sessions (workload kind agentic, scenario.AgentTurn) go out in their
// API's own shape, streamed: Messages (POST /v1/messages: system, tools,
// the task and every earlier tool_use and tool_result, resent each turn)
// or Responses (POST /v1/responses: instructions, tools and input items;
// a continuation names the previous turn's response by
// previous_response_id and sends only the new function_call_output; the
// player remembers each session's last response id, bounded, and resends
// the conversation when it has none). A closed-loop agent pauses for its
// tool call between turns. Their cached tokens come from each API's usage
// (Responses' input_tokens_details.cached_tokens; Messages'
// cache_read_input_tokens over input_tokens + cache_read_input_tokens +
// cache_creation_input_tokens), and the summary adds the simulator's
// continuation_hit_ratio (continuations' cached ÷ prompt tokens) and the
// router's herd picks (trimtab_scheduler_endpoint_herd_picks_total at the
// end of the run).
//
// A scenario's request classes and streams (workload.class, streams:)
// play as in the simulator: each stream from its start, by its rate
// (Poisson arrivals) or its concurrency (closed-loop clients) until it
// has issued its requests, with its own workload drawn by the
// simulator's generator for the stream (sim.StreamRenderer) and its own
// client timeout; every request carries its class's headers (the band as
// x-trimtab-priority, the tenant as a bearer API key, the TTL as
// x-llm-d-inference-ttl). The summary's classes have the simulator's
// fields (sim.ClassSummary): a request the router's flow control refused
// (X-Trimtab-Drop-Reason) is dropped, one that reached the client's
// timeout timed out, any other error failed.
//
// Measured client side per request: time to first token (the first SSE
// chunk with text), inter-token gaps, end-to-end latency, output tokens,
// the serving pod (x-trimtab-endpoint), cached prompt tokens
// (usage.prompt_tokens_details.cached_tokens, or the agent API's), the
// reported prompt size
// (usage.prompt_tokens) and the error kind (HTTP
// status, cut stream, timeout, connection). Server side: the pods'
// /metrics (load and prefix-cache counters) every ScrapeEvery, and the
// router's mode and weights timeline from its admin server
// (/debug/history). A request that failed in any way (an HTTP error, a
// refused or reset connection, a stream cut before [DONE], the client's
// timeout) is a miss: it counts in the TTFT and E2E percentiles at the
// scenario's timeout through report.Latencies, as in the simulator, and the
// summaries report the misses beside the percentiles and goodput (the
// requests completed within the scenario's SLO per second of the
// window). Results come out as report.RunSummary (the schema of
// `trimtab sim`'s summary.json, plus cached_token_ratio and errors),
// markdown tables and plots, and compare.md: adaptive against its fair
// baselines repeat by repeat (ComparePaired).
//
// # Concurrency model
//
// Run executes runs one after another. During a run it owns, and waits
// for before it returns: one goroutine per closed-loop client (or one per
// open-loop arrival), one scraper goroutine and one progress goroutine.
// The renderer is shared by the clients under a mutex. StartFleet starts
// one goroutine per server, owned by the caller's errgroup. Time comes
// from Deps.Clock; nothing here reads the wall clock directly.
package bench
