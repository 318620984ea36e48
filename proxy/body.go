package proxy

import (
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"
)

// bodyBudget is the memory all request bodies of one server may take
// together (Config.BodyMemoryBytes). Safe for concurrent use.
type bodyBudget struct {
	limit int64
	used  atomic.Int64
}

// reserve charges n bytes; false (and nothing charged) when that would go
// over the limit.
func (b *bodyBudget) reserve(n int64) bool {
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

// free gives back n bytes charged by reserve.
func (b *bodyBudget) free(n int64) {
	if n != 0 {
		b.used.Add(-n)
	}
}

// bodyStep is the smallest reservation a body read makes; reservations
// double with the bytes read, as the buffer does.
const bodyStep = 32 << 10

// readBody reads r into buf (reused from its start) and returns the body
// and the bytes it charged to budget, which the caller frees once it no
// longer holds the body. Memory follows the bytes that arrive: a declared
// length (contentLength, -1 when unknown) only sizes the first step of a
// small body. More than maxBytes is ErrBodyTooLarge; a read that would go
// over the budget is ErrBodyMemory. On error nothing stays charged.
func readBody(r io.Reader, contentLength, maxBytes int64, budget *bodyBudget, buf []byte) ([]byte, int64, error) {
	buf = buf[:0]
	if contentLength > maxBytes {
		return buf, 0, ErrBodyTooLarge
	}
	if contentLength == 0 || r == nil || r == http.NoBody {
		return buf, 0, nil
	}
	var reserved int64
	fail := func(err error) ([]byte, int64, error) {
		budget.free(reserved)
		return buf, 0, err
	}
	for {
		if int64(len(buf)) == reserved && reserved < maxBytes {
			step := max(bodyStep, reserved)
			if reserved == 0 && contentLength > 0 {
				step = min(step, contentLength)
			}
			step = min(step, maxBytes-reserved)
			if !budget.reserve(step) {
				return fail(ErrBodyMemory)
			}
			reserved += step
		}
		// Room for what is reserved, plus one byte past maxBytes to see a body
		// that is too large (or, with a declared length, to see its end).
		limit := reserved
		if int64(len(buf)) == reserved {
			limit++
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(max(int64(cap(buf)), 4<<10), limit-int64(len(buf)))))
		}
		end := min(int64(cap(buf)), limit)
		n, err := r.Read(buf[len(buf):end])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > maxBytes {
			return fail(ErrBodyTooLarge)
		}
		if err == io.EOF {
			return buf, reserved, nil
		}
		if err != nil {
			return fail(err)
		}
	}
}

// readRequestBody reads an HTTP request's body under the size limit, the
// server's body budget and the body read deadline. It returns the body,
// the bytes charged to the budget (free them when done with the body),
// and the error to answer with.
func (h *HTTP) readRequestBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, int64, *Error) {
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(h.deps.Clock.Now().Add(h.cfg.BodyReadTimeout)) == nil
	body, reserved, err := readBody(r.Body, r.ContentLength, h.cfg.MaxBodyBytes, &h.budget, buf)
	if deadline && err == nil {
		// The body is in: lift the deadline, which would otherwise end
		// the connection (and the request's context) mid-response.
		_ = rc.SetReadDeadline(time.Time{})
	}
	var e *Error
	switch {
	case err == nil:
		return body, reserved, nil
	case errors.As(err, &e):
	case errors.Is(err, os.ErrDeadlineExceeded):
		e = ErrBodyTimeout
	default:
		e = ErrInvalidJSON // the client broke off mid-body
	}
	return body, 0, e
}
