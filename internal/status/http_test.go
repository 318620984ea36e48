package status

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

func get(t *testing.T, c *http.Client, u string) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func historyServer(t *testing.T) (*Recorder, *httptest.Server) {
	t.Helper()
	r := mustNew(t, DefaultConfig())
	mux := http.NewServeMux()
	r.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return r, srv
}

func TestHistoryHandler(t *testing.T) {
	r, srv := historyServer(t)
	names := []string{"prefix", "queue"}
	r.SetScorers([]scheduler.ScorerEntry{
		{Name: "prefix", Type: "prefix", Scorer: catScorer(scheduler.CategoryAffinity), Weight: 3},
		{Name: "queue", Type: "queue", Scorer: catScorer(scheduler.CategoryDistribution), Weight: 2},
	})

	// Empty history: valid JSON with empty lists and a null latest.
	resp, body := get(t, srv.Client(), srv.URL+PathHistory)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("empty history: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"latest": "null", "samples": "[]", "changes": "[]", "window_ms": "600000", "resolution_ms": "500"} {
		if got := string(raw[key]); got != want {
			t.Errorf("empty history %s = %s, want %s", key, got, want)
		}
	}

	w1 := &scheduler.Weights{Version: 1, Values: []float64{3, 2}, Mode: "static"}
	w2 := &scheduler.Weights{Version: 2, Values: []float64{1, 4}, Mode: "rebalance", Reason: "enter", Signal: 0.7, At: t0.Add(ms(1200))}
	for i := 0; i < 4; i++ { // 0, 0.5, 1, 1.5 s: one sample per slot
		s := Sample{At: t0.Add(time.Duration(i) * ms(500)), Signal: float64(i) * 0.25,
			Components: map[string]float64{"request_cv": 0.5, "endpoints": 4}}
		s.SetWeights(w1, names)
		if i >= 3 {
			s.SetWeights(w2, names)
		}
		r.Record(s)
	}
	r.RecordChange(w1, w2, names)

	resp, body = get(t, srv.Client(), srv.URL+PathHistory+"?from=3")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	var h History
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	// from=3: samples with seq 3 and 4.
	if len(h.Samples) != 2 || h.Samples[0].Seq != 3 || h.Samples[1].Seq != 4 {
		t.Fatalf("samples %+v, want seq 3 and 4", h.Samples)
	}
	last := h.Samples[1]
	// Sample 4: signal 3 × 0.25 = 0.75 with w2.
	if last.Signal != 0.75 || last.Mode != "rebalance" || last.Version != 2 || last.Weights["queue"] != 4 || last.Components["endpoints"] != 4 {
		t.Errorf("last sample %+v", last)
	}
	if !last.At.Equal(t0.Add(ms(1500))) || last.AtMs != t0.Add(ms(1500)).UnixMilli() {
		t.Errorf("last sample at %v / %d", last.At, last.AtMs)
	}
	if h.Latest == nil || h.Latest.Seq != 4 {
		t.Errorf("latest %+v", h.Latest)
	}
	if len(h.Changes) != 1 || h.Changes[0].Reason != "enter" || h.Changes[0].Old["prefix"] != 3 || h.Changes[0].New["prefix"] != 1 {
		t.Errorf("changes %+v", h.Changes)
	}
	if len(h.Scorers) != 2 || h.Scorers[1].Category != "distribution" {
		t.Errorf("scorers %+v", h.Scorers)
	}
	// The wire names the page reads.
	for _, key := range []string{`"seq":`, `"at_ms":`, `"signal":`, `"components":`, `"mode":`, `"weights":`, `"version":`,
		`"from_version":`, `"to_version":`, `"to_mode":`, `"reason":`, `"category":`} {
		if !strings.Contains(string(body), key) {
			t.Errorf("history JSON lacks %s", key)
		}
	}

	// last=1s: samples at ≥ 1.5 − 1 = 0.5 s → seq 2, 3, 4.
	_, body = get(t, srv.Client(), srv.URL+PathHistory+"?last=1s")
	h = History{}
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	if len(h.Samples) != 3 || h.Samples[0].Seq != 2 {
		t.Errorf("last=1s: %d samples from seq %d, want 3 from 2", len(h.Samples), h.Samples[0].Seq)
	}
}

func TestHistoryBadQuery(t *testing.T) {
	_, srv := historyServer(t)
	for _, q := range []string{"from=-1", "from=x", "last=5", "last=-1s", "from=18446744073709551616"} {
		resp, body := get(t, srv.Client(), srv.URL+PathHistory+"?"+q)
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error.Message, "query parameter") {
			t.Errorf("?%s: %d %s, want 400 with a JSON error naming the parameter", q, resp.StatusCode, body)
		}
	}
	resp, err := srv.Client().Post(srv.URL+PathHistory, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}

func TestUIHandler(t *testing.T) {
	_, srv := historyServer(t)
	c := srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, _ := get(t, c, srv.URL+"/ui")
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("/ui: %d → %q, want 301 → /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	tests := []struct {
		path, ctype, contains string
	}{
		{"/ui/", "text/html", `<style>`},
		{"/ui/", "text/html", `"../debug/history"`},
		{"/ui/index.html", "text/html", `<!doctype html>`},
		{"/ui/app.js", "javascript", `"../debug/history"`},
		{"/ui/style.css", "text/css", "prefers-color-scheme: dark"},
	}
	for _, tt := range tests {
		resp, body := get(t, c, srv.URL+tt.path)
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), tt.ctype) {
			t.Errorf("%s: %d %q, want 200 %s", tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), tt.ctype)
		}
		if !strings.Contains(string(body), tt.contains) {
			t.Errorf("%s does not contain %q", tt.path, tt.contains)
		}
		if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s: no CSP header", tt.path)
		}
	}
	// The page's CSP allows its two inline blocks by hash and nothing else
	// inline.
	resp, body := get(t, c, srv.URL+"/ui/")
	csp := resp.Header.Get("Content-Security-Policy")
	for _, tag := range []string{"script", "style"} {
		re := regexp.MustCompile(`(?s)<` + tag + `>(.*?)</` + tag + `>`)
		blocks := re.FindAllStringSubmatch(string(body), -1)
		if len(blocks) != 1 {
			t.Errorf("/ui/ has %d inline <%s> blocks, want 1", len(blocks), tag)
			continue
		}
		sum := sha256.Sum256([]byte(blocks[0][1]))
		want := tag + "-src 'self' 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "';"
		if !strings.Contains(csp, want) {
			t.Errorf("/ui/ CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(string(body), `src="app.js"`) || strings.Contains(string(body), `href="style.css"`) {
		t.Error("/ui/ still loads app.js or style.css: a router restart between the page and them leaves it unstyled")
	}
	resp, _ = get(t, c, srv.URL+"/ui/missing.js")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/ui/missing.js: %d, want 404", resp.StatusCode)
	}
}

// TestUIMounts: UI works mounted at /ui and /ui/ of another router, and
// behind a router that strips the prefix itself.
func TestUIMounts(t *testing.T) {
	direct := http.NewServeMux()
	direct.Handle("/ui", UI())
	direct.Handle("/ui/", UI())
	stripped := http.NewServeMux()
	stripped.Handle("/trimtab/ui/", http.StripPrefix("/trimtab/ui/", UI()))
	for _, tt := range []struct {
		name string
		h    http.Handler
		page string
	}{{"direct", direct, "/ui"}, {"stripped", stripped, "/trimtab/ui/"}} {
		srv := httptest.NewServer(tt.h)
		for path, want := range map[string]string{tt.page: "<!doctype html>", strings.TrimSuffix(tt.page, "/") + "/app.js": `"use strict"`} {
			resp, body := get(t, srv.Client(), srv.URL+path)
			if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
				t.Errorf("%s: GET %s: %d, body lacks %q", tt.name, path, resp.StatusCode, want)
			}
		}
		srv.Close()
	}
}

// TestUISelfContained: the page loads nothing from elsewhere — no CDN, no
// external font, no absolute URL other than the SVG namespace.
func TestUISelfContained(t *testing.T) {
	urlRE := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}[^\s"')]*|@import|url\(\s*['"]?(https?:|//)`)
	n := 0
	err := fs.WalkDir(uiFiles, "ui", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		data, err := uiFiles.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range urlRE.FindAllString(string(data), -1) {
			if m == "http://www.w3.org/2000/svg" {
				continue
			}
			t.Errorf("%s references %q", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("embedded %d files, want index.html, app.js, style.css", n)
	}
}

func FuzzHistoryQuery(f *testing.F) {
	for _, s := range []string{"", "from=3", "last=5m", "from=1&last=1h", "from=%ff", "last=9999999999h", "from=1&from=2"} {
		f.Add(s)
	}
	r, err := New(DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		r.Record(Sample{At: t0.Add(time.Duration(i) * time.Second), Signal: 0.5})
	}
	h := r.Handler()
	f.Fuzz(func(t *testing.T, q string) {
		req := httptest.NewRequest(http.MethodGet, "/debug/history", nil)
		req.URL.RawQuery = q
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK && w.Code != http.StatusBadRequest {
			t.Fatalf("?%s: status %d", q, w.Code)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("?%s: invalid JSON %q", q, w.Body.String())
		}
	})
}

// TestUIWarnsAboutOpenAdmin: on an admin address other than loopback
// without a token, the page carries a warning banner naming the address
// and the settings that fix it; on loopback, or with a token, none.
func TestUIWarnsAboutOpenAdmin(t *testing.T) {
	tests := []struct {
		addr  string
		token bool
		warn  bool
	}{
		{":9090", false, true}, // every interface
		{"0.0.0.0:9090", false, true},
		{"[::]:9090", false, true},
		{"10.1.2.3:9090", false, true},
		{"admin.internal:9090", false, true}, // a name may resolve anywhere
		{":9090", true, false},
		{"10.1.2.3:9090", true, false},
		{"127.0.0.1:9090", false, false},
		{"127.0.0.2:9090", false, false}, // 127/8 is loopback
		{"[::1]:9090", false, false},
		{"localhost:9090", false, false},
		{"", false, false}, // not told: no claim either way
	}
	for _, tt := range tests {
		srv := httptest.NewServer(NewUI(UIConfig{AdminAddr: tt.addr, AdminToken: tt.token}))
		_, body := get(t, srv.Client(), srv.URL+"/ui/")
		srv.Close()
		page := string(body)
		got := strings.Contains(page, `id="admin-open"`)
		if got != tt.warn {
			t.Errorf("addr %q token %v: banner %v, want %v", tt.addr, tt.token, got, tt.warn)
			continue
		}
		if !tt.warn {
			continue
		}
		for _, want := range []string{tt.addr, "without a token", "server.admin.token_file", "server.admin.addr"} {
			if !strings.Contains(page, html.EscapeString(want)) {
				t.Errorf("addr %q: banner lacks %q", tt.addr, want)
			}
		}
	}
}
