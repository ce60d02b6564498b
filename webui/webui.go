package webui

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// Serves reports whether path is the UI's: / or one of its embedded files.
// The UI routes pages by URL fragment (#host), so no other path is its.
func Serves(urlPath string) bool {
	p := strings.TrimPrefix(path.Clean("/"+urlPath), "/")
	if p == "" || p == "index.html" {
		return true
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return false
	}
	st, err := fs.Stat(sub, p)
	return err == nil && !st.IsDir()
}

// Handler serves the embedded UI. Paths that name no asset get index.html so
// bookmarks of UI pages keep working.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		// fs.Sub only fails on an invalid path literal, fixed at compile time;
		// still, answer rather than panic.
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "web UI assets missing: "+err.Error(), http.StatusInternalServerError)
		})
	}
	files := http.FileServer(http.FS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if p == "" {
			p = "index.html"
		}
		if _, err := fs.Stat(sub, p); err != nil {
			p = "index.html"
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; connect-src 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-cache")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + p
		if p == "index.html" {
			r2.URL.Path = "/"
		}
		files.ServeHTTP(w, r2)
	})
}
