package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// headless starts headless Chromium (the flags webui/browser_test.go uses),
// or skips the test with the reason.
func headless(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("browser tests start Chromium; skipped under -short")
	}
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skipf("Chromium not installed (%v); install Debian's chromium to run the browser tests", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelC := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1440, 1000)); err != nil {
		cancelC()
		cancelA()
		t.Fatalf("starting Chromium: %v", err)
	}
	ctx, cancelT := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	return ctx
}

// The overview shows a killed appliance as down, with why, within seconds,
// and the health card says degraded.
func TestBrowserOverviewShowsApplianceDown(t *testing.T) {
	ctx := headless(t)
	c := startDefaultCluster(t)
	a := c.appliance("box-a", "--dram", "64MiB")
	c.appliance("box-b", "--dram", "64MiB")
	poll := func(expr string, within time.Duration) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(within))
	}
	row := func(name, up string) string {
		return `(() => { const r = document.querySelector('#ov-appliances [data-appliance="` + name + `"]'); return !!r && r.dataset.up === "` + up + `"; })()`
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+c.http+"/#overview"),
		poll(row("box-a", "1")+" && "+row("box-b", "1"), 20*time.Second),
	); err != nil {
		t.Fatalf("overview with both appliances up: %v", err)
	}
	a.kill()
	killed := time.Now()
	// The overview polls every 2 s; the master suspects within 2.5 s.
	if err := chromedp.Do(ctx, poll(row("box-a", "0")+" && "+row("box-b", "1")+
		` && document.querySelector("#ov-health").textContent === "Degraded"`, 8*time.Second)); err != nil {
		t.Fatalf("overview never showed box-a down: %v", err)
	}
	t.Logf("overview showed box-a down %v after SIGKILL", time.Since(killed).Round(10*time.Millisecond))
	txt, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#ov-appliances [data-appliance="box-a"]`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt, "down") || !strings.Contains(txt, "no heartbeat") {
		t.Fatalf("box-a row %q does not say down and why", txt)
	}
	summary, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#ov-app-summary")))
	if err != nil || summary != "1 up · 1 down" {
		t.Fatalf("summary %q (%v)", summary, err)
	}
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(90)); err == nil {
		dir := filepath.Join("artifacts")
		if os.MkdirAll(dir, 0o755) == nil {
			_ = os.WriteFile(filepath.Join(dir, "overview-appliance-down.png"), png, 0o644)
		}
	}
}
