package proxy

// The response half's usage scan: what the endpoint reported of the
// request's tokens, read from the response bytes as they pass to the
// client, for the calibration (scheduler.Outcome.Usage) and the traffic
// trace's output lengths.

import (
	"bytes"

	"github.com/trimtab/trimtab/internal/jsonscan"
	"github.com/trimtab/trimtab/scheduler"
)

const (
	// usageTail is how many bytes of a JSON body, or of one SSE event, the
	// scan keeps and searches for the usage object: the last ones, where
	// every API puts it (the usage chunk before [DONE], the end of a
	// completion object, Anthropic's message_start and message_delta
	// events, the end of Responses' response.completed). A usage object
	// that does not end within the last usageTail bytes is not seen.
	usageTail = 2048
	// usageHead is how many bytes of an SSE event the scan keeps to read
	// its event: and data: lines for the chunk count.
	usageHead = 96
	// maxUsageCount bounds a reported count: larger values are ignored.
	maxUsageCount = 1 << 40
)

// The usage fields the scan reads, as indices into usageFields.v.
const (
	fPromptTokens     = iota // usage.prompt_tokens (OpenAI chat, completions)
	fCompletionTokens        // usage.completion_tokens
	fInputTokens             // usage.input_tokens (Responses: all; Messages: uncached)
	fOutputTokens            // usage.output_tokens (Responses, Messages)
	fCachedTokens            // usage.prompt_tokens_details / input_tokens_details .cached_tokens
	fCacheRead               // usage.cache_read_input_tokens (Messages)
	fCacheCreation           // usage.cache_creation_input_tokens (Messages)
	nUsageFields
)

// usageFields is what the usage objects seen so far reported: a field a
// later object reports replaces the earlier value (Anthropic's
// message_delta after message_start), one it leaves out keeps it.
type usageFields struct {
	v   [nUsageFields]int64
	has uint8 // bit i: v[i] was reported
}

func (f *usageFields) set(i int, v int64) { f.v[i], f.has = v, f.has|1<<i }
func (f *usageFields) ok(i int) bool      { return f.has&(1<<i) != 0 }

// usageScan finds the usage object in a response stream and counts its
// token-bearing SSE events, reading the bytes the proxy has already sent
// on: it never holds, changes or delays them. Its memory is fixed (a tail
// window and a head window per event), it allocates nothing, and its work
// per byte is bounded (a newline search; a copy of at most usageTail bytes
// per read into the window when an event or body spans reads). Malformed,
// truncated, compressed or enormous bodies only leave it without a
// result. Not safe for concurrent use: one per request.
type usageScan struct {
	sse  bool
	tail [usageTail]byte // the last bytes of the pending event (SSE) or body
	n    int             // bytes in tail
	head [usageHead]byte // the first bytes of the pending event (SSE)
	hn   int             // bytes in head
	seen int64           // bytes of the pending event or body
	line int             // bytes of the current line so far, before this read
	cr   bool            // the current line so far is exactly "\r"

	f      usageFields
	chunks int64
}

// reset prepares the scan for a new response; sse says its body is an
// event stream (Content-Type text/event-stream).
func (u *usageScan) reset(sse bool) {
	u.sse, u.n, u.hn, u.seen, u.line, u.cr = sse, 0, 0, 0, 0, false
	u.f, u.chunks = usageFields{}, 0
}

// isEventStream reports whether a Content-Type value is an SSE stream.
func isEventStream(ct string) bool {
	const p = "text/event-stream"
	return len(ct) >= len(p) && asciiEqualFold(ct[:len(p)], p)
}

func asciiEqualFold(a, b string) bool {
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// write scans the next bytes of the body.
func (u *usageScan) write(p []byte) {
	if !u.sse {
		u.keep(p)
		return
	}
	start := 0 // the pending event's bytes in p begin here
	for i := 0; i < len(p); {
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			n := len(p) - i
			u.cr = u.line == 0 && n == 1 && p[i] == '\r'
			u.line += n
			break
		}
		j += i
		n := j - i // this read's bytes of the line, before '\n'
		blank := (u.line == 0 && (n == 0 || (n == 1 && p[i] == '\r'))) || (u.cr && n == 0)
		u.line, u.cr = 0, false
		if blank {
			u.eventEnd(p[start:j])
			start = j + 1
		}
		i = j + 1
	}
	if start < len(p) {
		u.keep(p[start:])
	}
}

// eventEnd ends the pending event whose last bytes in the current read are
// last (up to the blank line's '\n'; earlier bytes are in the windows).
func (u *usageScan) eventEnd(last []byte) {
	if u.seen == 0 { // the whole event is in this read: scan it in place
		if len(last) > 0 {
			u.event(last[:min(len(last), usageHead)], last[max(len(last)-usageTail, 0):])
		}
		return
	}
	u.keep(last)
	u.event(u.head[:u.hn], u.tail[:u.n])
	u.n, u.hn, u.seen = 0, 0, 0
}

// keep appends p to the pending event or body: its first bytes to head
// (SSE), its last to tail.
func (u *usageScan) keep(p []byte) {
	if len(p) == 0 {
		return
	}
	u.seen += int64(len(p))
	if u.sse && u.hn < len(u.head) {
		u.hn += copy(u.head[u.hn:], p)
	}
	if len(p) >= len(u.tail) {
		u.n = copy(u.tail[:], p[len(p)-len(u.tail):])
		return
	}
	if drop := u.n + len(p) - len(u.tail); drop > 0 {
		u.n = copy(u.tail[:], u.tail[drop:u.n])
	}
	u.n += copy(u.tail[u.n:], p)
}

// finish ends the body: a last event without its blank line, or the JSON
// body's tail.
func (u *usageScan) finish() {
	if u.seen == 0 {
		return
	}
	if u.sse {
		u.event(u.head[:u.hn], u.tail[:u.n])
	} else {
		u.f.find(u.tail[:u.n])
	}
	u.n, u.hn, u.seen = 0, 0, 0
}

// event counts one SSE event (head: its first bytes) when it carries a
// token, and reads any usage object in tail (its last bytes).
func (u *usageScan) event(head, tail []byte) {
	if tokenEvent(head) {
		u.chunks++
	}
	u.f.find(tail)
}

// tokenEvent reports whether an SSE event, by its first bytes, carries
// generated tokens: a data event other than [DONE] of an unnamed stream
// (OpenAI chat and completions), or a named event that is a content delta
// (Messages' content_block_delta, Responses' response.*.delta). An event
// whose data line starts past head is not counted.
func tokenEvent(head []byte) bool {
	var name []byte
	data := false
	for len(head) > 0 {
		line := head
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			line, head = head[:i], head[i+1:]
		} else {
			head = nil
		}
		line = bytes.TrimRight(line, "\r")
		switch {
		case bytes.HasPrefix(line, []byte("event:")):
			name = bytes.TrimSpace(line[len("event:"):])
		case bytes.HasPrefix(line, []byte("data:")):
			if v := bytes.TrimSpace(line[len("data:"):]); string(v) == "[DONE]" {
				return false
			}
			data = true
		}
	}
	if !data {
		return false
	}
	return len(name) == 0 || string(name) == "content_block_delta" || bytes.HasSuffix(name, []byte(".delta"))
}

var usageKey = []byte(`"usage"`)

// find reads every usage object that starts in b and ends within it, in
// order. An occurrence of "usage" escaped inside a string, not followed by
// ':' and an object, or whose object is malformed or cut off is skipped.
func (f *usageFields) find(b []byte) {
	for off := 0; off < len(b); {
		i := bytes.Index(b[off:], usageKey)
		if i < 0 {
			return
		}
		i += off
		off = i + len(usageKey)
		if escapedQuote(b, i) {
			continue
		}
		var s jsonscan.Scanner
		s.Reset(b)
		s.Seek(off)
		s.WS()
		if !s.Consume(':') {
			continue
		}
		s.WS()
		if s.Peek() != '{' {
			continue
		}
		var g usageFields
		if g.object(&s, false) != nil {
			continue
		}
		for k := range nUsageFields {
			if g.ok(k) {
				f.set(k, g.v[k])
			}
		}
		off = s.Pos()
	}
}

// escapedQuote reports whether the quote at b[i] is escaped (an odd run of
// backslashes before it).
func escapedQuote(b []byte, i int) bool {
	n := 0
	for i > 0 && b[i-1] == '\\' {
		n++
		i--
	}
	return n%2 == 1
}

// object reads a usage object at s.i (nested: a *_tokens_details object),
// keeping the counts it knows.
func (f *usageFields) object(s *jsonscan.Scanner, nested bool) error {
	empty, err := s.Open('{')
	if err != nil || empty {
		return err
	}
	for {
		raw, esc, err := s.Key()
		if err != nil {
			return err
		}
		s.WS()
		field := -1
		if !esc {
			field = usageField(raw, nested)
		}
		switch {
		case field == fCachedTokens && !nested && s.Peek() == '{':
			err = f.object(s, true)
		case field >= 0 && field != fCachedTokens || nested && field == fCachedTokens:
			var v int64
			var ok bool
			if v, ok, err = count(s); ok {
				f.set(field, v)
			}
		default:
			err = s.Value(2)
		}
		if err != nil {
			return err
		}
		more, err := s.More('}')
		if err != nil || !more {
			return err
		}
	}
}

// usageField maps a usage key to its field (-1: not read). In the top
// object, fCachedTokens stands for the *_tokens_details objects; in those,
// for cached_tokens.
func usageField(k []byte, nested bool) int {
	if nested {
		if string(k) == "cached_tokens" {
			return fCachedTokens
		}
		return -1
	}
	switch string(k) {
	case "prompt_tokens":
		return fPromptTokens
	case "completion_tokens":
		return fCompletionTokens
	case "input_tokens":
		return fInputTokens
	case "output_tokens":
		return fOutputTokens
	case "prompt_tokens_details", "input_tokens_details":
		return fCachedTokens
	case "cache_read_input_tokens":
		return fCacheRead
	case "cache_creation_input_tokens":
		return fCacheCreation
	}
	return -1
}

// count reads the JSON value at the read position as a token count: ok
// when it is a non-negative integer up to maxUsageCount (any other valid
// value is skipped, not an error).
func count(s *jsonscan.Scanner) (v int64, ok bool, err error) {
	st := s.Pos()
	if !jsonscan.IsDigit(s.Peek()) {
		return 0, false, s.Value(2)
	}
	if err := s.Number(); err != nil {
		return 0, false, err
	}
	for _, c := range s.Since(st) {
		if !jsonscan.IsDigit(c) || v > maxUsageCount {
			return 0, false, nil
		}
		v = v*10 + int64(c-'0')
	}
	return v, v <= maxUsageCount, nil
}

// usage returns what the response reported, and its token-bearing event
// count. The prompt is prompt_tokens (OpenAI), else, when the Messages
// cache fields are present, input_tokens + cache_read_input_tokens +
// cache_creation_input_tokens (Messages counts cached input apart), else
// input_tokens (Responses). The cached tokens are
// *_tokens_details.cached_tokens or cache_read_input_tokens, reported only
// with a prompt and never above it.
func (u *usageScan) usage() scheduler.Usage {
	f := &u.f
	var out scheduler.Usage
	switch {
	case f.ok(fPromptTokens):
		out.PromptTokens = f.v[fPromptTokens]
	case f.ok(fCacheRead) || f.ok(fCacheCreation):
		out.PromptTokens = f.v[fInputTokens] + f.v[fCacheRead] + f.v[fCacheCreation]
	case f.ok(fInputTokens):
		out.PromptTokens = f.v[fInputTokens]
	}
	if out.PromptTokens > 0 {
		switch {
		case f.ok(fCachedTokens):
			out.CachedTokens, out.CachedReported = min(f.v[fCachedTokens], out.PromptTokens), true
		case f.ok(fCacheRead):
			out.CachedTokens, out.CachedReported = min(f.v[fCacheRead], out.PromptTokens), true
		}
	}
	if f.ok(fCompletionTokens) {
		out.OutputTokens = f.v[fCompletionTokens]
	} else {
		out.OutputTokens = f.v[fOutputTokens]
	}
	out.Chunks = u.chunks
	return out
}

// outputTokens is a response's output length for the traffic trace: the
// tokens the endpoint reported, else its token-bearing events, else 0
// (unknown).
func outputTokens(u scheduler.Usage) int64 {
	if u.OutputTokens > 0 {
		return u.OutputTokens
	}
	return u.Chunks
}
