package arch

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxReadmeLines bounds README.md, counted as `wc -l` counts: the README is
// a front page — what trimtab is and for whom, the diagram, quick start, the
// test command, links — and the guides under docs/ hold the rest.
const maxReadmeLines = 160

// measured matches how a measured result reads in prose: any percentage
// ("2 %", "+10–20 %"), a range with a unit ("1.4–1.5×", "37–43 ms",
// "28–58 ms"), and a duration below a second ("122 µs", "47 ms"). Defaults
// and facts of the build (ports, weights, "Go 1.26", "about 95 modules") do
// not match, and neither does anything in a code span or a fenced block,
// where a profile may set `interval: 50ms`.
var measured = regexp.MustCompile(
	`\d\s*%` +
		`|\d[\d.,]*\s*[–-]\s*\d[\d.,]*\s*(?:×|x\b|s\b|µs|us\b|ms\b|ns\b)` +
		`|\d[\d.,]*\s*(?:µs|us\b|ms\b|ns\b)`)

// measurements returns each measured-looking fragment of a Markdown text
// outside code, as "line N: fragment".
func measurements(text string) []string {
	var found []string
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fenceLine.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		plain := codeSpan.ReplaceAllString(line, "``")
		for _, m := range measured.FindAllString(plain, -1) {
			found = append(found, fmt.Sprintf("line %d: %q", i+1, m))
		}
	}
	return found
}

// TestReadmeIsAFrontPage: README.md stays within maxReadmeLines and carries
// no measured results; those live in docs/benchmarks.md and
// docs/performance.md, with their dates and commands.
func TestReadmeIsAFrontPage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if n := strings.Count(text, "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move detail into a guide under docs/ and link it", n, maxReadmeLines)
	}
	for _, m := range measurements(text) {
		t.Errorf("README.md %s looks like a measured result: put it in docs/performance.md or docs/benchmarks.md and link it", m)
	}
}

func TestMeasurements(t *testing.T) {
	for _, tt := range []struct {
		text string
		want int // measured-looking fragments outside code
	}{
		// Sentences the README once carried.
		{"+10–20 % throughput in sustained hot-prefix bursts", 1},
		{"TTFT p99 +5.5 / +6.3 %, one seed's tail in each set", 1},
		{"(the loop-off profile drowns: TTFT p99 up to 47 s; adaptive 37–43 ms)", 1},
		{"p50 +122 µs, p99 +206 µs (load average 1.3)", 2},
		{"for 3–6 % of a core at 1,000 req/s", 1},
		{"the pick without its index is 1.4–1.5× the floor", 1},
		{"nothing lost beyond 2 % but one cell", 1},
		// What a front page may say.
		{"the admin server (`127.0.0.1:9090`) serves `/metrics`", 0},
		{"the field's static weights (prefix 3 : queue 2 : kvcache 2)", 0},
		{"On a machine with Go 1.26:", 0},
		{"downloads about 95 modules (about 420 MB in the module cache)", 0},
		{"seeds 1–3 and 4–6", 0},
		{"a profile may set `scrape.interval: 50ms`", 0},
		{"```sh\ngo run ./cmd/trimtab bench --time-scale 0.25 # 12 ms\n```", 0},
	} {
		if got := measurements(tt.text); len(got) != tt.want {
			t.Errorf("measurements(%q) = %v, want %d", tt.text, got, tt.want)
		}
	}
}
