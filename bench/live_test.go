package bench

import (
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBar(t *testing.T) {
	for _, tc := range []struct {
		v, top float64
		width  int
		want   string
	}{
		{10, 10, 4, "████"},     // full: 4 cells
		{5, 10, 4, "██"},        // half of 4 cells = 2
		{3, 10, 4, "█▎"},        // 0.3 × 4 × 8 = 9.6 → 10 eighths: 1 cell + 2/8
		{0.01, 10, 4, "▏"},      // 0.032 eighths rounds to 0, but above zero shows one eighth
		{20, 10, 4, "████"},     // over the top is clipped to width
		{0, 10, 4, ""},          // idle
		{math.NaN(), 10, 4, ""}, // unknown
		{5, 0, 4, ""},           // no scale
		{5, 10, 0, ""},          // no room
	} {
		if got := Bar(tc.v, tc.top, tc.width); got != tc.want {
			t.Errorf("Bar(%v, %v, %d) = %q, want %q", tc.v, tc.top, tc.width, got, tc.want)
		}
	}
}

func TestLoadBars(t *testing.T) {
	got := LoadBars([]string{"pod-0", "pod-1", "pod-10", "pod-3"}, []float64{12, 3, 0}, 8)
	// Scale: the largest load, 12, fills 8 cells. pod-1: 3/12 × 8 = 2
	// cells. pod-3 has no load reading: left out. Names pad to 6.
	want := "  pod-0  ████████  12\n" +
		"  pod-1  ██         3\n" +
		"  pod-10            0\n"
	if got != want {
		t.Errorf("LoadBars:\n%s\nwant:\n%s", got, want)
	}
	// An idle pool scales to 1: a load of 0.5 is half the width.
	if got := LoadBars([]string{"a"}, []float64{0.5}, 4); got != "  a ██     0\n" {
		t.Errorf("idle pool: %q", got)
	}
}

func TestLoadStrip(t *testing.T) {
	// top 16: 16 → █ (8/8); 8 → ▄ (4/8); 1 → ▁ (ceil(0.5) = 1st level);
	// 0 → ▁ (idle is the lowest level too); 3 → ▂ (ceil(1.5) = 2nd).
	if got, want := LoadStrip([]float64{16, 8, 1, 0, 3}), "█▄▁▁▂"; got != want {
		t.Errorf("LoadStrip = %q, want %q", got, want)
	}
	if got := LoadStrip(nil); got != "" {
		t.Errorf("no pods: %q", got)
	}
}

func TestScreenShowsBars(t *testing.T) {
	l := Live{Run: 1, Runs: 2, Policy: "adaptive", Phase: "burst", Concurrency: 35, Unit: "req/s", Mode: "rebalance", Signal: 0.62,
		Scorers: []string{"prefix"}, Weights: map[string]float64{"prefix": 9.5}, Pods: []string{"pod-0", "pod-1"}, Load: []float64{10, 5}}
	s := l.Screen()
	for _, want := range []string{"phase: burst (35 req/s)", "mode REBALANCE   signal 0.62", "prefix", "9.50", "pod-0 " + strings.Repeat("█", 40) + "  10", "pod-1 " + strings.Repeat("█", 20)} {
		if !strings.Contains(s, want) {
			t.Errorf("screen lacks %q:\n%s", want, s)
		}
	}
	if !utf8.ValidString(s) {
		t.Error("screen is not valid UTF-8")
	}
}

func TestTidyDurations(t *testing.T) {
	for in, want := range map[string]string{
		"signal 0.202 ≥ theta_on 0.200 for 1.049997947s: rebalance": "signal 0.202 ≥ theta_on 0.200 for 1.05s: rebalance",
		"held 15.0001234ms":              "held 15ms",
		"signal 0.050 ≤ theta_off 0.050": "signal 0.050 ≤ theta_off 0.050", // not durations
		"frozen until 10s":               "frozen until 10s",
	} {
		if got := tidyDurations(in); got != want {
			t.Errorf("tidyDurations(%q) = %q, want %q", in, got, want)
		}
	}
}
