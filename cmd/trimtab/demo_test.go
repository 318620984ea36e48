package main

import (
	"bytes"
	"context"
	"net"
	"regexp"
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
	o := bench.DemoConfig{Servers: 2, Duration: 4 * time.Second, Speed: 20, Compare: true, Seed: 1}
	if err := runDemo(context.Background(), &out, o, "127.0.0.1:0"); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"status page: http://127.0.0.1:", "Result (the same load under each policy", "concurrency 64: per phase", "| burst | static |"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	// Overall rows: errors column 0 for both policies.
	rows := regexp.MustCompile(`(?m)^\| (adaptive|static) \|.*\| (\d+)[^|]* \| \d+ \|$`).FindAllStringSubmatch(text, -1)
	if len(rows) != 2 {
		t.Fatalf("want an overall row per policy, got %d:\n%s", len(rows), text)
	}
	for _, r := range rows {
		if r[2] != "0" {
			t.Errorf("%s: %s errors", r[1], r[2])
		}
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
		if err := runDemo(context.Background(), &bytes.Buffer{}, o, "127.0.0.1:0"); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
