package webui_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/rest"
	"github.com/kvtier/kvtier/rest/resttest"
)

// uiCreds is the test's credential set (a map in place of a file).
type uiCreds map[string]auth.Principal

func (c uiCreds) Lookup(tok string) (auth.Principal, bool) { p, ok := c[tok]; return p, ok }

// TestBrowserCredentials: against a master with credentials, where even
// reads need a token, the UI asks for one, then its pages and its live
// event stream (read with the token) work.
func TestBrowserCredentials(t *testing.T) {
	ctx := browser(t)
	c := resttest.Start(t, resttest.Options{Rest: rest.Config{Credentials: uiCreds{"ui-admin-token-0123456789": {Role: auth.RoleAdmin, ID: "a"}}}})
	run(t, ctx, "token asked for reads",
		chromedp.Navigate(c.URL+"/#events"),
		visible("#token-input"),
		chromedp.SendKeys(chromedp.CSS("#token-input"), "ui-admin-token-0123456789"),
		click("#token-ok"),
		waitJS(`document.querySelector("#live-pill").textContent === "live"`),
	)
}
