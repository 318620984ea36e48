package main

import (
	"bytes"
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDemoRunsAndCleansUp runs a short demo end to end: both pools serve
// the whole load without failures, the comparison is printed, and every
// server is gone when it returns.
func TestDemoRunsAndCleansUp(t *testing.T) {
	var out bytes.Buffer
	o := demoOptions{servers: 2, duration: 4 * time.Second, timeScale: 20, adminAddr: "127.0.0.1:0", compare: true, plain: true, seed: 1}
	if err := runDemo(context.Background(), &out, o); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"status page: http://127.0.0.1:", "Result (same load on both pools", "During the burst, adaptive against static"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	// "all" rows: requests > 0 and 0 failed for both pools.
	rows := regexp.MustCompile(`(?m)^\s+all\s+(adaptive|static)\s+(\d+)\s+(\d+)\s`).FindAllStringSubmatch(text, -1)
	if len(rows) != 2 {
		t.Fatalf("want an 'all' row per pool, got %d:\n%s", len(rows), text)
	}
	for _, r := range rows {
		if r[2] == "0" || r[3] != "0" {
			t.Errorf("%s pool: %s requests, %s failed", r[1], r[2], r[3])
		}
	}
	// The status page's server is closed.
	addr := regexp.MustCompile(`status page: http://(127\.0\.0\.1:\d+)/ui`).FindStringSubmatch(text)
	if addr == nil {
		t.Fatal("no status page address printed")
	}
	if c, err := net.DialTimeout("tcp", addr[1], time.Second); err == nil {
		c.Close()
		t.Errorf("status page %s still accepts connections after the demo returned", addr[1])
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, o := range []demoOptions{
		{servers: 1, duration: time.Minute, timeScale: 1},
		{servers: 4, duration: time.Second, timeScale: 1},
		{servers: 4, duration: time.Minute, timeScale: 0},
	} {
		if err := runDemo(context.Background(), &bytes.Buffer{}, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
