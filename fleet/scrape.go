package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
)

// acceptHeader asks for the Prometheus text format only: Python's
// prometheus_client (vLLM, SGLang) answers OpenMetrics whenever the Accept
// header mentions it, whatever its q-value, and text parses faster. An
// OpenMetrics answer is still understood.
const acceptHeader = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// scrapeLoop scrapes ep every interval (after a start offset) until ctx is
// done; unhealthy endpoints back off exponentially.
func (f *Fleet) scrapeLoop(ctx context.Context, ep *endpoint, offset time.Duration) {
	p := newParser(ep.mp)
	var buf bytes.Buffer
	timer := f.clock.NewTimer(offset)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		select {
		case f.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		start := f.clock.Now()
		m, err := f.scrape(ctx, ep, p, &buf)
		<-f.sem
		if ctx.Err() != nil {
			return // removed or shutting down: not the server's fault
		}
		end := f.clock.Now()
		f.m.scrapeDuration.Observe(end.Sub(start).Seconds())
		next := f.record(ep, m, err, end)
		if next -= end.Sub(start); next < 0 {
			next = 0
		}
		timer.Reset(next)
	}
}

// scrape fetches and maps one exposition. Errors are *ScrapeError.
func (f *Fleet) scrape(ctx context.Context, ep *endpoint, p *parser, buf *bytes.Buffer) (Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	resp, err := f.client.Do(ep.req.WithContext(ctx))
	if err != nil {
		return Metrics{}, transportError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Metrics{}, &ScrapeError{ReasonHTTPStatus, fmt.Errorf("GET %s: %s", ep.req.URL, resp.Status)}
	}
	max := f.cfg.MaxBodyBytes
	if resp.ContentLength > max {
		return Metrics{}, &ScrapeError{ReasonTooLarge, fmt.Errorf("GET %s: Content-Length %d > max_body_bytes %d", ep.req.URL, resp.ContentLength, max)}
	}
	buf.Reset()
	// Read at most max+1 bytes: one more than allowed proves the body is
	// too large without reading the rest (closing the body drops the
	// connection instead of draining it).
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, max+1)); err != nil {
		return Metrics{}, transportError(ctx, err)
	}
	if int64(buf.Len()) > max {
		return Metrics{}, &ScrapeError{ReasonTooLarge, fmt.Errorf("GET %s: body exceeds max_body_bytes %d", ep.req.URL, max)}
	}
	om := expfmt.ResponseFormat(resp.Header).FormatType() == expfmt.TypeOpenMetrics
	ep.mu.Lock()
	models := ep.t.Models
	ep.mu.Unlock()
	return p.parse(buf.Bytes(), om, models)
}

func transportError(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return &ScrapeError{ReasonTimeout, err}
	}
	return &ScrapeError{ReasonConnect, err}
}

// record stores a scrape result and returns the delay until the next
// scrape. A success refreshes the metrics and clears failures; after
// unreachable failures it is also the endpoint's RecoveredAt, the evidence
// that readmits an ejected endpoint (scheduler.OutlierConfig). An
// unreachable server (timeout, connect, HTTP status) keeps the previous
// metrics, which go stale after max_age; unhealthy_after such failures in
// a row back it off and, unless they were timeouts, make it unhealthy
// (Fleet.state). A server that answers
// with unusable metrics (too large, unparsable, missing or invalid values)
// is alive: its metrics go stale but it never becomes unhealthy for it.
func (f *Fleet) record(ep *endpoint, m Metrics, err error, now time.Time) time.Duration {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if err == nil {
		if ep.fails >= f.cfg.UnhealthyAfter || ep.reason != "" {
			f.log.Info("endpoint scrapes recovered", "endpoint", ep.addr, "after_failures", ep.fails)
		}
		if ep.fails > 0 {
			ep.recovered = now
		}
		ep.m, ep.scrapedAt, ep.fails, ep.reason = m, now, 0, ""
		f.dirty.Store(true)
		return f.cfg.Interval
	}
	reason := ReasonParse
	var se *ScrapeError
	if errors.As(err, &se) {
		reason = se.Reason
	}
	f.m.failures[reason].Inc()
	if reason != ep.reason {
		f.log.Warn("endpoint scrape failing", "endpoint", ep.addr, "reason", reason, "err", err)
	}
	ep.reason = reason
	if !unreachable(reason) {
		ep.fails = 0
		return f.cfg.Interval
	}
	ep.fails++
	if ep.fails < f.cfg.UnhealthyAfter {
		return f.cfg.Interval
	}
	if ep.fails == f.cfg.UnhealthyAfter {
		f.log.Warn("endpoint unhealthy", "endpoint", ep.addr, "failures", ep.fails, "reason", reason, "err", err)
		f.dirty.Store(true)
	}
	return backoff(f.cfg.Interval, ep.fails-f.cfg.UnhealthyAfter, f.cfg.MaxBackoff)
}

// backoff returns 2·interval·2^n, capped at max.
func backoff(interval time.Duration, n int, max time.Duration) time.Duration {
	d := 2 * interval
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
