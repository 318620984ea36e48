package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/proxy"
	"github.com/trimtab/trimtab/sim/scenario"
)

// TestTuneOnRecordedTraffic: trimtab serve records its traffic
// (server.admin.record), /debug/trace downloads it, and `trimtab sim`
// and `trimtab sim tune` run on the download.
func TestTuneOnRecordedTraffic(t *testing.T) {
	addrs := startFakeFleet(t, 2)
	ts := startServiceWith(t, addrs, false, "server:\n  admin:\n    record:\n      enabled: true\n")
	// Three families of prompts, each a 4096-token (16384-byte) shared
	// prefix and a question of its own, three questions each.
	prefix := func(f int) string {
		return strings.Repeat(fmt.Sprintf("family %d shares this. ", f), 16384/22+1)[:16384]
	}
	for q := range 3 {
		for f := range 3 {
			body, _ := json.Marshal(map[string]any{"model": "llama-3.1-8b-instruct", "max_tokens": 4,
				"prompt": prefix(f) + fmt.Sprintf(" question %d of family %d?", q, f)})
			if resp, text := post(t, ts.proxyURL+"/v1/completions", string(body)); resp.StatusCode != 200 {
				t.Fatalf("completion: %d %s", resp.StatusCode, text)
			}
		}
	}
	resp, err := http.Get(ts.adminURL + "/debug/trace")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/debug/trace: %d %v %s", resp.StatusCode, err, data)
	}
	if got := resp.Header.Get(proxy.HeaderTraceEndpoints); got != "2" {
		t.Errorf("%s: %q, want 2", proxy.HeaderTraceEndpoints, got)
	}
	if bytes.Contains(data, []byte("family")) {
		t.Error("the trace holds prompt text")
	}
	entries, err := scenario.ParseTrace(bufio.NewScanner(bytes.NewReader(data)), 0)
	if err != nil || len(entries) != 9 {
		t.Fatalf("trace: %d entries, %v, want 9:\n%s", len(entries), err, data)
	}
	// Requests i and i+3 are the same family: their first 8 ids (4096
	// tokens) are equal, the 9th (the question) differs; families differ
	// from the first id.
	for i := range 3 {
		a, b, c := entries[i].HashIDs, entries[i+3].HashIDs, entries[(i+1)%3].HashIDs
		if len(a) != 9 || len(b) != 9 || !slices.Equal(a[:8], b[:8]) || a[8] == b[8] || a[0] == c[0] {
			t.Errorf("family %d: ids %v and %v (another family %v); want the first 8 shared, the 9th not", i, a, b, c)
		}
	}
	file := filepath.Join(t.TempDir(), "recorded.jsonl")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	log, err := runRoot(t, "sim", "tune", "--trace", file, "--servers", "2", "--budget", "3", "--out", out)
	if err != nil {
		t.Fatalf("sim tune --trace: %v\n%s", err, log)
	}
	if !regexp.MustCompile(`(?m)^ *\d+/\d+ vectors, .*: best \S+ \[[0-9. ]+\] \(score `).MatchString(log) {
		t.Errorf("sim tune printed no best vector:\n%s", log)
	}
	md, err := os.ReadFile(filepath.Join(out, "tune.md"))
	if err != nil || !strings.Contains(string(md), "trace-recorded") || !strings.Contains(string(md), "Best for the suite") {
		t.Errorf("tune.md: %v\n%s", err, md)
	}
	if _, err := os.Stat(filepath.Join(out, "tuned.yaml")); err != nil {
		t.Error(err)
	}

	out = t.TempDir()
	if log, err := runRoot(t, "sim", "--trace", file, "--servers", "2", "--policies", "adaptive", "--no-plots", "--out", out); err != nil {
		t.Fatalf("sim --trace: %v\n%s", err, log)
	}
	if _, err := os.Stat(filepath.Join(out, "trace-recorded.md")); err != nil {
		t.Error(err)
	}
	if _, err := runRoot(t, "sim", "tune", "--trace", file, "--out", t.TempDir()); err == nil || !strings.Contains(err.Error(), "--servers") {
		t.Errorf("--trace without --servers: %v; want an error naming --servers", err)
	}
}
