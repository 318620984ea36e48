// Package parse extracts what the scheduler needs from an LLM API request
// body: model, stream flag, session id, LoRA adapter and the prompt bytes.
// It reads three dialects (API), one type per file over a shared
// validating scanner (internal/jsonscan): OpenAI completions and chat
// completions (openai.go), the OpenAI Responses API (responses.go) and the
// Anthropic Messages API (messages.go); chat.go renders what they share
// (messages, content parts, system prompts, tool lists).
//
// A Parser reads a body in a single pass, looks only at the top-level keys
// it needs and skips everything else without building values, so an
// 8k-token body is parsed without allocating at steady state (model names
// are interned; the prompt is rendered into the Parsed's reusable buffer).
// Keys match exactly (case-sensitive); when a key repeats, the last one
// wins.
//
// Prompt bytes (OpenAI):
//   - completions, "prompt" a string: its unescaped text;
//   - an array of strings (a batch): the strings joined by "\n";
//   - token ids (an array of integers, or an array of such arrays): each id
//     as 4 little-endian bytes, so 64 tokens make 256 bytes, the prefix
//     scorer's block size;
//   - chat, "messages": every message rendered in order as
//     "<|" + role + "|>\n" + content + "\n", where content is the string,
//     or for an array of parts the parts joined by "\n": a text part (type
//     "text", "input_text" or "output_text", or none) as its text, any
//     other part as "<|" + type + "|>" followed by the part's raw JSON. A
//     shared system prompt and shared earlier turns therefore become shared
//     leading bytes. When both keys appear, messages win.
//
// Prompt bytes (Responses, Messages): three sections, in this order
// whatever the order of the keys in the body, so that an agent's shared
// system prompt and tool list are shared leading bytes:
//   - the system prompt, "instructions" (Responses) or "system"
//     (Messages): a string as "<|system|>\n" + text + "\n"; Messages'
//     array of text blocks as "<|system|>\n" + the blocks as content
//     parts + "\n"; Responses' array of items as input items;
//   - "tools": "<|tools|>\n" + the array's raw JSON + "\n";
//   - the conversation: Responses "input", a string as "<|user|>\n" +
//     text + "\n", an array of items each as a chat message when it has
//     a role, else as "<|" + type + "|>" + its raw JSON + "\n"
//     (function_call, function_call_output, reasoning, …); Messages
//     "messages" as chat messages (tool_use, tool_result and other blocks
//     as non-text parts).
//
// A section whose key is null or absent renders nothing.
//
// Keyless session affinity: a request without a session id gets a session
// key (scheduler.Request.SessionKey) from its conversation's lineage. A
// Responses continuation (previous_response_id) takes the key the
// Parser's Continuations give for the response it names; any other
// conversation takes scheduler.LineageKey of its root: the rendered prompt
// up to the end of the first conversation item that is not a system or
// developer message, scaffold included. Every later turn resends the root,
// so a conversation's turns share the key; conversations on one scaffold
// differ in their first turn. A request whose conversation holds no such
// item gets no key, so the shared scaffold alone never becomes one.
//
// Errors are jsonscan.ErrSyntax and jsonscan.ErrTooDeep for bodies that
// are not JSON or nest too deeply, and this package's ErrNotObject,
// ErrMissingModel and ErrBadField; callers map them to their API's
// answers.
package parse
