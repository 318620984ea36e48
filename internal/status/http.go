package status

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
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
//	GET /ui/            the status page (index.html, app.js, style.css),
//	                    which reads ../debug/history, ../debug/endpoints,
//	                    ../debug/decisions, ../debug/weights and
//	                    ../debug/peers (shown when replica sync is on) relative to
//	                    itself, so it also works behind a path prefix.
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
// index.html, and PathUI+"/app.js" and PathUI+"/style.css" serve the
// assets. A request whose path is not under PathUI+"/" (a router that
// strips the prefix first) is served relative to the page's directory.
func UI() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil { // the embed directive guarantees "ui" exists
		panic(err)
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == PathUI {
			http.Redirect(w, req, PathUI+"/", http.StatusMovedPermanently)
			return
		}
		if rest, ok := strings.CutPrefix(req.URL.Path, PathUI+"/"); ok {
			r2 := new(http.Request)
			*r2 = *req
			u := *req.URL
			u.Path, u.RawPath = "/"+rest, ""
			r2.URL = &u
			req = r2
		}
		// The page is small and changes with the binary; never serve a
		// stale copy after an upgrade.
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy",
			"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
		files.ServeHTTP(w, req)
	})
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
