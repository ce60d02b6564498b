package rest_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/rest"
	"github.com/kvtier/kvtier/rest/resttest"
)

// TestOpenAPISecurityMatchesServer: the document declares the bearer
// scheme, and every operation but health and ready carries security, an
// x-kvtier-role and the 401/403 answers. Against a running server with
// credentials, each documented operation answers 401 without a token, 403
// to the role just below its x-kvtier-role, and neither to its role: the
// document says what the server does.
func TestOpenAPISecurityMatchesServer(t *testing.T) {
	doc := rest.OpenAPI()
	schemes := doc["components"].(map[string]any)["securitySchemes"].(map[string]any)
	if b, ok := schemes["bearer"].(map[string]any); !ok || b["type"] != "http" || b["scheme"] != "bearer" {
		t.Fatalf("bearer security scheme: %v", schemes)
	}
	creds, err := auth.Parse(strings.NewReader("admin admin-token-0123456789\nappliance box-token-0123456789\nclient cli-token-0123456789\n"))
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{"admin": "admin-token-0123456789", "appliance": "box-token-0123456789", "client": "cli-token-0123456789"}
	below := map[string]string{"admin": "appliance", "appliance": "client"}
	c := resttest.Start(t, resttest.Options{Rest: rest.Config{Credentials: creds}})

	call := func(method, path, tok string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var body *bytes.Reader
		if method == "PUT" || method == "PATCH" || method == "POST" {
			b := []byte("v")
			if method != "PUT" {
				b = []byte("{}")
			}
			body = bytes.NewReader(b)
		} else {
			body = bytes.NewReader(nil)
		}
		req, err := http.NewRequestWithContext(ctx, method, c.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		res, err := http.DefaultClient.Do(req) // returns at the headers (the event stream does not end)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	n := 0
	for path, item := range doc["paths"].(map[string]any) {
		url := strings.NewReplacer("{key}", "k", "{name}", "nope").Replace(path)
		for method, o := range item.(map[string]any) {
			op := o.(map[string]any)
			method = strings.ToUpper(method)
			resps := op["responses"].(map[string]any)
			role, _ := op["x-kvtier-role"].(string)
			if path == "/api/v1/health" || path == "/api/v1/ready" {
				if op["security"] != nil || role != "" {
					t.Errorf("%s %s is open but documents security %v role %q", method, path, op["security"], role)
				}
				if got := call(method, url, ""); got == http.StatusUnauthorized || got == http.StatusForbidden {
					t.Errorf("%s %s without a token: %d, want open", method, path, got)
				}
				continue
			}
			n++
			if op["security"] == nil || tokens[role] == "" || resps["401"] == nil || resps["403"] == nil {
				t.Errorf("%s %s: security %v, x-kvtier-role %q, 401 %v, 403 %v", method, path, op["security"], role, resps["401"] != nil, resps["403"] != nil)
				continue
			}
			if got := call(method, url, ""); got != http.StatusUnauthorized {
				t.Errorf("%s %s without a token: %d, want 401", method, path, got)
			}
			if got := call(method, url, "wrong-token-0123456789"); got != http.StatusUnauthorized {
				t.Errorf("%s %s with an unknown token: %d, want 401", method, path, got)
			}
			if b := below[role]; b != "" {
				if got := call(method, url, tokens[b]); got != http.StatusForbidden {
					t.Errorf("%s %s (x-kvtier-role %s) as %s: %d, want 403", method, path, role, b, got)
				}
			}
			if got := call(method, url, tokens[role]); got == http.StatusUnauthorized || got == http.StatusForbidden {
				t.Errorf("%s %s as its x-kvtier-role %s: %d", method, path, role, got)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d secured operations checked", n)
	}
}
