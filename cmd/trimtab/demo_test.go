package main

import (
	"bytes"
	"context"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/bench"
)

// TestDemoRunsAndCleansUp runs a short demo end to end: both policies
// serve the whole load without failures, bench's tables are printed, and
// every server is gone when it returns.
func TestDemoRunsAndCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo in real time, both policies: skipped under -short")
	}
	var out bytes.Buffer
	// 10 req/s, not the default 35: two servers under the race detector on
	// a busy CI machine must serve every request for "no failures" to
	// check the demo's plumbing rather than the host's speed.
	o := bench.DemoConfig{Servers: 2, Duration: 4 * time.Second, Speed: 20, Rate: 10, Compare: true, Seed: 1}
	if err := runDemo(context.Background(), &out, o, "127.0.0.1:0", nil); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"status page: http://127.0.0.1:", "Result (the same load under each policy", "req/s 10: per phase", "| burst | static |",
		"pods ", "\nSummary:\n  What happened: ", "\n  Key numbers (the 2s burst at 10 req/s): adaptive TTFT p99 ", "; static 3:2:2 TTFT p99 ", "\n  Comparison: "} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	// Overall rows: nothing missed under either policy, read from the
	// column the header names "missed (at timeout)" ("0 of N").
	overall := text[strings.Index(text, "### req/s 10: overall"):]
	lines := strings.Split(overall, "\n")
	h := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| policy |") })
	if h < 0 || h+2 >= len(lines) {
		t.Fatalf("overall table:\n%s", overall)
	}
	header := strings.Split(lines[h], " | ")
	col := slices.Index(header, "missed (at timeout)")
	if col < 0 {
		t.Fatalf("overall table has no \"missed (at timeout)\" column: %q", lines[h])
	}
	seen := 0
	for _, l := range lines[h+2:] {
		cells := strings.Split(l, " | ")
		if !strings.HasPrefix(l, "| ") || len(cells) != len(header) {
			break
		}
		seen++
		if policy, missed := strings.TrimPrefix(cells[0], "| "), cells[col]; !strings.HasPrefix(missed, "0 of ") {
			t.Errorf("%s: missed %q, want none", policy, missed)
		}
	}
	if seen != 2 {
		t.Errorf("want an overall row per policy, got %d:\n%s", seen, overall)
	}
	// The status page's server is closed.
	for _, addr := range regexp.MustCompile(`status page: http://(127\.0\.0\.1:\d+)/ui`).FindAllStringSubmatch(text, -1) {
		if c, err := net.DialTimeout("tcp", addr[1], time.Second); err == nil {
			c.Close()
			t.Errorf("status page %s still accepts connections after the demo returned", addr[1])
		}
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, o := range []bench.DemoConfig{
		{Servers: 1, Duration: time.Minute, Speed: 1},
		{Servers: 4, Duration: time.Second, Speed: 1},
		{Servers: 4, Duration: time.Minute, Speed: 0},
	} {
		if err := runDemo(context.Background(), &bytes.Buffer{}, o, "127.0.0.1:0", nil); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestParseLoadavg(t *testing.T) {
	for _, tc := range []struct {
		text string
		load float64
		ok   bool
	}{
		{"14.42 11.92 9.56 15/214 26047\n", 14.42, true},
		{"0.00 0.01 0.05 1/80 1", 0, true},
		{"", 0, false},
		{"high 1 1 1/1 1", 0, false},
		{"-1 0 0 1/1 1", 0, false},
		{"NaN 0 0 1/1 1", 0, false},
	} {
		load, cores, ok := parseLoadavg(tc.text, 2)
		if ok != tc.ok || load != tc.load || (ok && cores != 2) {
			t.Errorf("parseLoadavg(%q) = %v, %d, %v; want %v, 2, %v", tc.text, load, cores, ok, tc.load, tc.ok)
		}
	}
}

// TestDemoWarnsOnABusyHost: a load reading above the cores prints the
// warning before the run and again before the summary.
func TestDemoWarnsOnABusyHost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo in real time: skipped under -short")
	}
	var out bytes.Buffer
	o := bench.DemoConfig{Servers: 2, Duration: 4 * time.Second, Speed: 20, Seed: 1}
	busy := func() (float64, int, bool) { return 9.5, 2, true }
	if err := runDemo(context.Background(), &out, o, "127.0.0.1:0", busy); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	if n := strings.Count(text, "load average is 9.5 on 2 cores"); n != 2 {
		t.Errorf("warning printed %d times, want 2 (start, end):\n%s", n, text)
	}
	if i, j := strings.LastIndex(text, "load average is 9.5"), strings.Index(text, "Summary:"); i < 0 || j < i {
		t.Errorf("the second warning is not before the summary:\n%s", text)
	}
}
