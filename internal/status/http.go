package status

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

//go:embed ui
var uiFiles embed.FS

// Paths served by Register.
const (
	PathHistory = "/debug/history"
	PathUI      = "/ui"
)

// Register adds the Recorder's handlers to mux:
//
//	GET /debug/history  JSON History. Query parameters: from=SEQ returns
//	                    samples with seq ≥ SEQ; last=DURATION ("5m")
//	                    only those within DURATION of the newest sample.
//	                    A bad parameter is a 400 with a JSON error.
//	GET /ui             redirects to /ui/
//	GET /ui/            the status page (index.html with app.js and
//	                    style.css inline; both are also served alone),
//	                    which reads ../debug/history, ../debug/endpoints,
//	                    ../debug/decisions, ../debug/weights,
//	                    ../debug/peers (shown when replica sync is on) and
//	                    ../debug/flow (shown when flow control is on) relative
//	                    to itself, so it also works behind a path prefix.
//
// To mount them on another router, route PathHistory, PathUI and
// PathUI+"/" to Handler().
func (r *Recorder) Register(mux *http.ServeMux) {
	mux.Handle("GET "+PathHistory, http.HandlerFunc(r.serveHistory))
	ui := UI()
	mux.Handle("GET "+PathUI, ui)
	mux.Handle("GET "+PathUI+"/", ui)
}

// Handler returns a handler serving the Recorder's paths (see Register)
// and 404 for any other.
func (r *Recorder) Handler() http.Handler {
	mux := http.NewServeMux()
	r.Register(mux)
	return mux
}

// UI returns the status page handler, to be mounted at PathUI and
// PathUI+"/" (Register does): PathUI redirects to PathUI+"/", which serves
// the page, and PathUI+"/app.js" and PathUI+"/style.css" serve its script
// and style sheet on their own. The page carries both inline (allowed by
// their hashes in its Content-Security-Policy), so one response draws the
// whole page: when the router goes away between the page and its assets
// (a restart), the page is still styled, says the router is unreachable
// and keeps polling until it answers. A request whose path is not under
// PathUI+"/" (a router that strips the prefix first) is served relative to
// the page's directory.
func UI() http.Handler { return NewUI(UIConfig{}) }

// UIConfig is what the status page is told about the router serving it.
// The zero value claims nothing.
type UIConfig struct {
	// AdminAddr is the admin server's listen address (server.admin.addr);
	// "" when unknown.
	AdminAddr string
	// AdminToken reports whether the admin server requires a token
	// (server.admin.token or token_file).
	AdminToken bool
}

// NewUI returns the status page handler (see UI) for a router described
// by cfg. When the admin server listens on an address other than loopback
// (every interface, a routable IP or a host name) without a token, the
// page shows a warning banner on every view: anyone who reaches the port
// can read the debug views and the page.
func NewUI(cfg UIConfig) http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil { // the embed directive guarantees "ui" exists
		panic(err)
	}
	pg, err := buildPage(sub, cfg.notices())
	if err != nil { // the embedded files are fixed at build time; a test builds them
		panic(err)
	}
	files := http.FileServerFS(sub)
	assetCSP := "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == PathUI {
			http.Redirect(w, req, PathUI+"/", http.StatusMovedPermanently)
			return
		}
		p := req.URL.Path
		if rest, ok := strings.CutPrefix(p, PathUI+"/"); ok {
			p = "/" + rest
		}
		// The page is small and changes with the binary; never serve a
		// stale copy after an upgrade.
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if p == "/" || p == "/index.html" || p == "" {
			w.Header().Set("Content-Security-Policy", pg.csp)
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Content-Length", strconv.Itoa(len(pg.html)))
			_, _ = w.Write(pg.html) // the client went away; nothing to do
			return
		}
		w.Header().Set("Content-Security-Policy", assetCSP)
		if p != req.URL.Path {
			r2 := new(http.Request)
			*r2 = *req
			u := *req.URL
			u.Path, u.RawPath = p, ""
			r2.URL = &u
			req = r2
		}
		files.ServeHTTP(w, req)
	})
}

// notices returns the warning banners the page shows, as HTML.
func (c UIConfig) notices() string {
	if c.AdminAddr == "" || c.AdminToken || loopback(c.AdminAddr) {
		return ""
	}
	return `<div id="admin-open" class="banner banner-warn" role="alert"><b>The admin server listens on ` +
		html.EscapeString(c.AdminAddr) + ` without a token.</b><span class="detail">Anyone who reaches this port can read ` +
		`/debug/* and this page. Set server.admin.token_file (or server.admin.token), or bind server.admin.addr ` +
		`to 127.0.0.1.</span></div>`
}

// loopback reports whether a listen address binds loopback only: a
// 127.0.0.0/8 or ::1 IP, or "localhost". An empty host (every interface),
// an unspecified or routable IP and any other name are not.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// page is index.html with style.css and app.js inlined, and the
// Content-Security-Policy that allows exactly those two inline blocks.
type page struct {
	html []byte
	csp  string
}

// Tags of index.html that buildPage replaces with the files' contents.
const (
	styleTag  = `<link rel="stylesheet" href="style.css">`
	scriptTag = `<script src="app.js" defer></script>`
)

// noticesTag is where index.html takes the server's notices (UIConfig).
const noticesTag = `<!--notices-->`

func buildPage(fsys fs.FS, notices string) (page, error) {
	read := func(name string) (string, error) {
		b, err := fs.ReadFile(fsys, name)
		return string(b), err
	}
	index, err := read("index.html")
	if err != nil {
		return page{}, err
	}
	css, err := read("style.css")
	if err != nil {
		return page{}, err
	}
	js, err := read("app.js")
	if err != nil {
		return page{}, err
	}
	for _, c := range []struct{ name, text, tag, end string }{
		{"index.html", index, styleTag, ""}, {"index.html", index, scriptTag, ""}, {"index.html", index, noticesTag, ""},
		{"style.css", css, "", "</style"}, {"app.js", js, "", "</script"},
	} {
		if c.tag != "" && strings.Count(c.text, c.tag) != 1 {
			return page{}, fmt.Errorf("status page: %s must contain %s once", c.name, c.tag)
		}
		if c.end != "" && strings.Contains(strings.ToLower(c.text), c.end) {
			return page{}, fmt.Errorf("status page: %s contains %q and cannot be inlined", c.name, c.end)
		}
	}
	// The script runs as soon as it is parsed; app.js waits for
	// DOMContentLoaded itself.
	index = strings.Replace(index, styleTag, "<style>"+css+"</style>", 1)
	index = strings.Replace(index, scriptTag, "<script>"+js+"</script>", 1)
	index = strings.Replace(index, noticesTag, notices, 1)
	csp := "default-src 'self'; script-src 'self' " + hashSource(js) + "; style-src 'self' " + hashSource(css) +
		"; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"
	return page{html: []byte(index), csp: csp}, nil
}

// hashSource is the CSP source expression that allows an inline block
// whose text is s.
func hashSource(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

func (r *Recorder) serveHistory(w http.ResponseWriter, req *http.Request) {
	q, err := parseQuery(req)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": err.Error()}})
		return
	}
	writeJSON(w, http.StatusOK, r.History(q))
}

func parseQuery(req *http.Request) (Query, error) {
	var q Query
	v := req.URL.Query()
	if s := v.Get("from"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, &queryError{"from", s, "a sequence number ≥ 0"}
		}
		q.From = n
	}
	if s := v.Get("last"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return q, &queryError{"last", s, `a duration ≥ 0 such as "5m"`}
		}
		q.Last = d
	}
	return q, nil
}

type queryError struct{ param, value, want string }

func (e *queryError) Error() string {
	return "query parameter " + e.param + "=" + strconv.Quote(e.value) + ": want " + e.want
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}
