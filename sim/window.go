package sim

import (
	"bytes"
	"strconv"
	"time"

	"github.com/zeebo/xxh3"
)

// The slow loop's traffic window in a simulated run: what trimtab serve's
// traffic recorder (proxy.TrafficRecorder) writes for /debug/trace, kept
// here because the simulator does not run the proxy — per request its
// arrival, its prompt's length in tokens (bytes ÷ 4), its output length
// and the chained ids of its prompt's 512-token blocks, as Mooncake JSONL
// with ids numbered from 0 in order of first appearance.

// Window blocks: the recorder's 512 tokens of 4 bytes.
const (
	windowBlockTokens   = 512
	windowBytesPerToken = 4
)

// trafficWindow is one window; max bounds its requests (later ones are
// not recorded).
type trafficWindow struct {
	max   int
	start time.Duration
	recs  []windowRec
	ids   map[uint64]int
	pool  []int // ids of every record, in order
}

type windowRec struct {
	at            time.Duration
	input, output int
	off, n        int // the record's ids: pool[off : off+n]
}

func newTrafficWindow(max int) *trafficWindow {
	return &trafficWindow{max: max, ids: make(map[uint64]int)}
}

// record adds a request arriving at at with prompt; it returns the
// record's index, or −1 when the window is full.
func (w *trafficWindow) record(at time.Duration, prompt []byte) int {
	if len(w.recs) >= w.max {
		return -1
	}
	if len(w.recs) == 0 {
		w.start = at
	}
	tokens := max(len(prompt)/windowBytesPerToken, 1)
	n := (tokens + windowBlockTokens - 1) / windowBlockTokens
	off := len(w.pool)
	var h uint64
	for j := range n {
		lo := min(j*windowBlockTokens*windowBytesPerToken, len(prompt))
		hi := min(lo+windowBlockTokens*windowBytesPerToken, len(prompt))
		h = xxh3.HashSeed(prompt[lo:hi], h)
		id, ok := w.ids[h]
		if !ok {
			id = len(w.ids)
			w.ids[h] = id
		}
		w.pool = append(w.pool, id)
	}
	w.recs = append(w.recs, windowRec{at: at - w.start, input: tokens, off: off, n: n})
	return len(w.recs) - 1
}

// setOutput records request i's output length.
func (w *trafficWindow) setOutput(i, tokens int) {
	if i >= 0 && i < len(w.recs) {
		w.recs[i].output = tokens
	}
}

// jsonl writes the window as the recorder's Mooncake JSONL.
func (w *trafficWindow) jsonl() []byte {
	var b bytes.Buffer
	for _, r := range w.recs {
		b.WriteString(`{"timestamp": `)
		b.WriteString(strconv.FormatInt(int64(r.at/time.Millisecond), 10))
		b.WriteString(`, "input_length": `)
		b.WriteString(strconv.Itoa(r.input))
		b.WriteString(`, "output_length": `)
		b.WriteString(strconv.Itoa(r.output))
		b.WriteString(`, "hash_ids": [`)
		for k, id := range w.pool[r.off : r.off+r.n] {
			if k > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Itoa(id))
		}
		b.WriteString("]}\n")
	}
	return b.Bytes()
}

// TakeWindow implements control.RetuneSource: it hands the window over
// and opens the next.
func (s *simRetune) TakeWindow() ([]byte, int, error) {
	w := s.win
	s.win = newTrafficWindow(s.max)
	return w.jsonl(), len(s.sched.Pool().Endpoints), nil
}

// Engine implements control.RetuneSource: the router's calibrator's engine
// file, as in serve.
func (s *simRetune) Engine() ([]byte, int) { return s.cal.EngineFile(), s.cal.Learned() }
