package main

import (
	"strings"
	"testing"
	"time"
)

// TestServeLoggerLimitsRepeats: serve's logger passes the first records
// of a flood (the limiter's burst, 5 per --log-limit interval) and
// reports the rest as a count when flushed at exit; --log-limit 0 turns
// limiting off.
func TestServeLoggerLimitsRepeats(t *testing.T) {
	for _, tt := range []struct {
		limit      time.Duration
		lines      int
		suppressed string
	}{
		{10 * time.Second, 6, "suppressed=95"}, // 100 warnings: 5 pass, 95 counted, 1 count line
		{0, 100, ""},
	} {
		var buf syncBuffer
		log, flush, err := newLogger("info", "text", &buf, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("trimtab serving")
		for range 100 {
			log.Warn("request refused", "component", "proxy", "client", "10.0.0.9:1234")
		}
		flush()
		out := buf.String()
		if n := strings.Count(out, "request refused"); n != tt.lines {
			t.Errorf("--log-limit %v: %d lines of the flood, want %d:\n%s", tt.limit, n, tt.lines, out)
		}
		if tt.suppressed != "" && !strings.Contains(out, tt.suppressed) {
			t.Errorf("--log-limit %v: no %s in\n%s", tt.limit, tt.suppressed, out)
		}
		if !strings.Contains(out, "trimtab serving") {
			t.Errorf("the one-off line is lost:\n%s", out)
		}
	}
}
