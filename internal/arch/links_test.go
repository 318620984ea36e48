package arch

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository's top directory, seen from this package.
const repoRoot = "../.."

var (
	// inlineLink matches [text](target) and ![alt](target "title"); the
	// target is group 1.
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// refLink matches a reference definition: [name]: target.
	refLink   = regexp.MustCompile(`^\s*\[[^\]]+\]:\s+(\S+)`)
	heading   = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlID    = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	codeSpan  = regexp.MustCompile("`[^`]*`")
	fenceLine = regexp.MustCompile("^\\s*(```|~~~)")
)

// mdLink is one relative link found in a Markdown file.
type mdLink struct {
	line   int
	target string
}

// scanMarkdown returns the file's relative links (outside code blocks and
// code spans) and its anchors (GitHub's heading slugs and <a id>s).
func scanMarkdown(text string) (links []mdLink, anchors map[string]bool) {
	anchors = map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fenceLine.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				anchors[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				anchors[s] = true
			}
			seen[s]++
		}
		plain := codeSpan.ReplaceAllString(line, "``")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(plain, -1) {
			targets = append(targets, m[1])
		}
		if m := refLink.FindStringSubmatch(plain); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			t = strings.Trim(t, "<>")
			if strings.Contains(t, "://") || strings.HasPrefix(t, "mailto:") {
				continue
			}
			links = append(links, mdLink{line: i + 1, target: t})
		}
	}
	return links, anchors
}

// slug is GitHub's anchor for a heading: lower case, letters, digits,
// underscores, hyphens and spaces kept, each space a hyphen. Markdown
// links in the heading count by their text.
func slug(h string) string {
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestMarkdownLinksResolve: every relative link in every Markdown file of
// the repository (test fixtures under testdata/ aside) names a file or
// directory that exists, and every #anchor names a heading (or <a id>) of
// the file it points into.
func TestMarkdownLinksResolve(t *testing.T) {
	type file struct {
		links   []mdLink
		anchors map[string]bool
	}
	files := map[string]*file{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		links, anchors := scanMarkdown(string(data))
		files[filepath.Clean(path)] = &file{links, anchors}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found %d Markdown files; the test is not looking at the repository", len(files))
	}
	checked := 0
	for path, f := range files {
		rel, _ := filepath.Rel(repoRoot, path)
		for _, l := range f.links {
			checked++
			target, anchor, _ := strings.Cut(l.target, "#")
			dest := path
			if target != "" {
				dest = filepath.Clean(filepath.Join(filepath.Dir(path), filepath.FromSlash(target)))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", rel, l.line, l.target, target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			df, ok := files[dest]
			if !ok {
				continue // a Markdown file under testdata/
			}
			if !df.anchors[anchor] {
				t.Errorf("%s:%d: link %q: no heading with anchor #%s", rel, l.line, l.target, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found; the scanner is broken")
	}
}

func TestSlug(t *testing.T) {
	for _, tt := range []struct{ heading, want string }{
		{"The guard's slack (measured with `learn: pick`)", "the-guards-slack-measured-with-learn-pick"},
		{"3. Replicas: the weights need no sync", "3-replicas-the-weights-need-no-sync"},
		{"Why this signal: the CV — of load", "why-this-signal-the-cv--of-load"}, // "—" dropped, both spaces kept
		{"Ports: which are internal", "ports-which-are-internal"},
		{"See [design](design.md) now", "see-design-now"},
		{"snake_case and kebab-case", "snake_case-and-kebab-case"},
	} {
		if got := slug(tt.heading); got != tt.want {
			t.Errorf("slug(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}

func TestScanMarkdown(t *testing.T) {
	text := "# Title\n\n[a](x.md#title) `[not](code.md)` [web](https://example.com)\n" +
		"```\n[in fence](fence.md)\n```\n[ref]: ref.md\n## Title\n<a id=\"here\"></a>\n"
	links, anchors := scanMarkdown(text)
	want := []mdLink{{3, "x.md#title"}, {7, "ref.md"}}
	if fmt.Sprint(links) != fmt.Sprint(want) {
		t.Errorf("links %v, want %v", links, want)
	}
	for _, a := range []string{"title", "title-1", "here"} {
		if !anchors[a] {
			t.Errorf("anchor %q missing from %v", a, anchors)
		}
	}
}
