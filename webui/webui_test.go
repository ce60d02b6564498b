package webui_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/webui"
)

func serve(t *testing.T, method, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	webui.Handler().ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestHandlerServesAssets(t *testing.T) {
	for path, want := range map[string]string{
		"/":                "<title>kvtier</title>",
		"/index.html":      "<title>kvtier</title>",
		"/app.js":          "const API = \"/api/v1\"",
		"/app.css":         ".bar .mark",
		"/objects/deep":    "<title>kvtier</title>", // deep links get the app
		"/../../etc/hosts": "<title>kvtier</title>",
	} {
		res, body := serve(t, "GET", path)
		if res.StatusCode != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, body lacks %q", path, res.StatusCode, want)
		}
	}
	res, _ := serve(t, "GET", "/app.js")
	if ct := res.Header.Get("Content-Type"); !strings.Contains(ct, "javascript") {
		t.Errorf("app.js content type %q", ct)
	}
	if res, _ := serve(t, "POST", "/"); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST / = %d", res.StatusCode)
	}
}

// No asset loads anything from another origin (no CDN, fonts or analytics):
// the CSP says so and the files contain no absolute URLs.
func TestNoExternalFetch(t *testing.T) {
	res, _ := serve(t, "GET", "/")
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Fatalf("CSP %q", csp)
	}
	abs := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|url\(\s*['"]?https?:`)
	n := 0
	err := filepath.WalkDir("assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		if m := abs.Find(b); m != nil {
			t.Errorf("%s refers to %q", p, m)
		}
		return nil
	})
	if err != nil || n < 3 {
		t.Fatalf("walked %d assets: %v", n, err)
	}
}
