package proxy

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/scheduler"
)

// scanAll runs a usage scan over body, given in reads of at most step
// bytes (0: one read).
func scanAll(body []byte, sse bool, step int) scheduler.Usage {
	var u usageScan
	u.reset(sse)
	if step <= 0 {
		step = len(body) + 1
	}
	for p := body; len(p) > 0; {
		n := min(step, len(p))
		u.write(p[:n])
		p = p[n:]
	}
	u.finish()
	return u.usage()
}

func chatChunk(text string) string {
	return fmt.Sprintf(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", text)
}

func TestUsageScan(t *testing.T) {
	big := strings.Repeat("x", 3*usageTail) // longer than the tail window
	tests := []struct {
		name string
		sse  bool
		body string
		want scheduler.Usage
	}{{
		name: "chat stream with include_usage",
		sse:  true,
		body: chatChunk("a") + chatChunk("b") + chatChunk("c") +
			`data: {"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":3,"total_tokens":103,"prompt_tokens_details":{"cached_tokens":64}}}` + "\n\n" +
			"data: [DONE]\n\n",
		// 3 content chunks + the usage chunk = 4 data events; [DONE] is not one.
		want: scheduler.Usage{PromptTokens: 100, CachedTokens: 64, CachedReported: true, OutputTokens: 3, Chunks: 4},
	}, {
		name: "chat stream without usage, CRLF lines, a comment",
		sse:  true,
		body: strings.ReplaceAll(chatChunk("a")+": keep-alive\n\n"+chatChunk("b")+"data: [DONE]\n\n", "\n", "\r\n"),
		// 2 data events; the comment and [DONE] are not counted.
		want: scheduler.Usage{Chunks: 2},
	}, {
		name: "vLLM continuous usage: the last report wins",
		sse:  true,
		body: `data: {"choices":[{"text":"a"}],"usage":{"prompt_tokens":10,"completion_tokens":1}}` + "\n\n" +
			`data: {"choices":[{"text":"b"}],"usage":{"prompt_tokens":10,"completion_tokens":2}}` + "\n\n",
		want: scheduler.Usage{PromptTokens: 10, OutputTokens: 2, Chunks: 2},
	}, {
		name: "completion JSON body longer than the window, usage at the end",
		body: `{"id":"cmpl-1","choices":[{"text":"` + big + `","finish_reason":"length"}],"usage":{"prompt_tokens":2000,"completion_tokens":900,"prompt_tokens_details":null}}`,
		// cached_tokens not reported: prompt_tokens_details is null.
		want: scheduler.Usage{PromptTokens: 2000, OutputTokens: 900},
	}, {
		name: "Responses: usage null at creation, full at completion after a long text",
		sse:  true,
		body: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"b\"}\n\n" +
			"event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"text\":\"ab\"}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"text\":\"" + big + "\"}]," +
			"\"usage\":{\"input_tokens\":500,\"input_tokens_details\":{\"cached_tokens\":256},\"output_tokens\":2,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":502}}}\n\n",
		// Only the two .delta events carry tokens.
		want: scheduler.Usage{PromptTokens: 500, CachedTokens: 256, CachedReported: true, OutputTokens: 2, Chunks: 2},
	}, {
		name: "Messages stream: message_delta's output replaces message_start's",
		sse:  true,
		body: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":40,\"cache_creation_input_tokens\":8,\"cache_read_input_tokens\":200,\"output_tokens\":1}}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\"}\n\n" +
			"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"a\"}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"b\"}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\"}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		// prompt = 40 uncached + 200 read + 8 written = 248; cached 200;
		// output 2 (message_delta); 2 content_block_delta events.
		want: scheduler.Usage{PromptTokens: 248, CachedTokens: 200, CachedReported: true, OutputTokens: 2, Chunks: 2},
	}, {
		name: "Messages JSON body",
		body: `{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"cache_read_input_tokens":0,"output_tokens":5}}`,
		// 3 + 0 = 3 prompt tokens, 0 of them cached (reported).
		want: scheduler.Usage{PromptTokens: 3, CachedReported: true, OutputTokens: 5},
	}, {
		name: "a usage object quoted in the generated text is not the usage",
		body: `{"choices":[{"text":"say \"usage\":{\"prompt_tokens\":7} and \\\"usage\":{\"prompt_tokens\":8}"}],"usage":{"prompt_tokens":9,"completion_tokens":1}}`,
		want: scheduler.Usage{PromptTokens: 9, OutputTokens: 1},
	}, {
		name: "counts that are not non-negative integers are ignored",
		body: `{"usage":{"prompt_tokens":-5,"completion_tokens":1.5,"input_tokens":"7","output_tokens":1e3,"prompt_tokens_details":{"cached_tokens":99999999999999999999}}}`,
		// prompt_tokens_details parsed, cached_tokens out of range: none.
		want: scheduler.Usage{},
	}, {
		name: "cached tokens above the prompt are capped at it",
		body: `{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":50}}}`,
		want: scheduler.Usage{PromptTokens: 10, CachedTokens: 10, CachedReported: true},
	}, {
		name: "a cut-off usage object gives nothing",
		body: `{"choices":[],"usage":{"prompt_tokens":10,"completion_tok`,
		want: scheduler.Usage{},
	}, {
		name: "a usage object that ends before the window is not seen",
		body: `{"usage":{"prompt_tokens":10},"choices":[{"text":"` + big + `"}]}`,
		want: scheduler.Usage{},
	}, {
		name: "a stream cut mid-event counts its last event",
		sse:  true,
		body: chatChunk("a") + `data: {"choices":[{"delta":{"content":"b"}}]}`,
		want: scheduler.Usage{Chunks: 2},
	}, {
		name: "not JSON at all",
		body: "\x00\xff<html>usage: 5</html>",
		want: scheduler.Usage{},
	}}
	for _, tc := range tests {
		for _, step := range []int{0, 1, 7, 100, usageTail - 1, usageTail + 1} {
			t.Run(fmt.Sprintf("%s/reads of %d", tc.name, step), func(t *testing.T) {
				if got := scanAll([]byte(tc.body), tc.sse, step); got != tc.want {
					t.Errorf("usage %+v, want %+v", got, tc.want)
				}
			})
		}
	}
}

func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream": true, "Text/Event-Stream; charset=utf-8": true,
		"application/json": false, "": false, "text/event": false,
	} {
		if got := isEventStream(ct); got != want {
			t.Errorf("isEventStream(%q) = %v, want %v", ct, got, want)
		}
	}
}

// TestUsageScanAllocatesNothing: the scan runs on the request path, per
// read of the response; it allocates nothing.
func TestUsageScanAllocatesNothing(t *testing.T) {
	var sse bytes.Buffer
	for range 50 {
		sse.WriteString(chatChunk("token"))
	}
	sse.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":50,"prompt_tokens_details":{"cached_tokens":64}}}` + "\n\ndata: [DONE]\n\n")
	body := []byte(`{"choices":[{"text":"` + strings.Repeat("y", 5000) + `"}],"usage":{"prompt_tokens":100,"completion_tokens":50}}`)
	var u usageScan
	for _, tc := range []struct {
		name string
		sse  bool
		b    []byte
	}{{"sse", true, sse.Bytes()}, {"json", false, body}} {
		allocs := testing.AllocsPerRun(100, func() {
			u.reset(tc.sse)
			for p := tc.b; len(p) > 0; {
				n := min(333, len(p)) // events split across reads
				u.write(p[:n])
				p = p[n:]
			}
			u.finish()
			_ = u.usage()
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per response, want 0", tc.name, allocs)
		}
	}
}

// FuzzUsageScan: any bytes, in any split into reads, never panic, give
// the same usage as one read (the windows carry state across reads
// exactly), and give bounded, consistent counts.
func FuzzUsageScan(f *testing.F) {
	f.Add([]byte(chatChunk("a")+`data: {"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}`+"\n\ndata: [DONE]\n\n"), true, uint16(17))
	f.Add([]byte("event: message_start\r\ndata: {\"message\":{\"usage\":{\"input_tokens\":4,\"cache_read_input_tokens\":1}}}\r\n\r\n"), true, uint16(60))
	f.Add([]byte(`{"choices":[],"usage":{"input_tokens":5,"input_tokens_details":{"cached_tokens":1},"output_tokens":2}}`), false, uint16(3))
	f.Add([]byte(`{"usage":{"prompt_tokens":[[[[{"usage":{}}]]]],"x":"\"usage\":{}"}}`), false, uint16(9))
	f.Fuzz(func(t *testing.T, body []byte, sse bool, split uint16) {
		whole := scanAll(body, sse, 0)
		var u usageScan
		u.reset(sse)
		k := int(split) % (len(body) + 1)
		u.write(body[:k])
		u.write(body[k:])
		u.finish()
		if got := u.usage(); got != whole {
			t.Fatalf("split at %d: %+v; one read: %+v", k, got, whole)
		}
		if got := scanAll(body, sse, 1); got != whole {
			t.Fatalf("byte by byte: %+v; one read: %+v", got, whole)
		}
		if whole.PromptTokens < 0 || whole.PromptTokens > 3*maxUsageCount || whole.OutputTokens < 0 || whole.OutputTokens > maxUsageCount ||
			whole.CachedTokens < 0 || whole.CachedTokens > whole.PromptTokens || (whole.CachedReported && whole.PromptTokens == 0) {
			t.Fatalf("counts out of bounds: %+v", whole)
		}
		if whole.Chunks > int64(bytes.Count(body, []byte("\n"))+1) || (!sse && whole.Chunks != 0) {
			t.Fatalf("%d chunks in %d lines (sse %v)", whole.Chunks, bytes.Count(body, []byte("\n"))+1, sse)
		}
	})
}

// BenchmarkUsageScan measures the scan's cost per response, read in 32 KiB
// reads as the HTTP proxy does: an SSE stream of n chat chunks and a usage
// chunk, and a JSON body of n bytes of text before its usage.
func BenchmarkUsageScan(b *testing.B) {
	for _, n := range []int{16, 256, 4096} {
		var sse bytes.Buffer
		for range n {
			sse.WriteString(chatChunk("token"))
		}
		sse.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":50}}` + "\n\ndata: [DONE]\n\n")
		json := []byte(`{"choices":[{"text":"` + strings.Repeat("y", 64*n) + `"}],"usage":{"prompt_tokens":100,"completion_tokens":50}}`)
		for _, tc := range []struct {
			name string
			sse  bool
			body []byte
		}{{fmt.Sprintf("sse/events=%d", n), true, sse.Bytes()}, {fmt.Sprintf("json/bytes=%d", len(json)), false, json}} {
			b.Run(tc.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(tc.body)))
				var u usageScan
				for b.Loop() {
					u.reset(tc.sse)
					for p := tc.body; len(p) > 0; {
						k := min(32<<10, len(p))
						u.write(p[:k])
						p = p[k:]
					}
					u.finish()
					if u.usage().PromptTokens != 100 {
						b.Fatal("usage not found")
					}
				}
			})
		}
	}
}
