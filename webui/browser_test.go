package webui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/rest"
	"github.com/kvtier/kvtier/rest/resttest"
)

const chromiumPath = "/usr/bin/chromium"

// artifacts is where screenshots go (git-ignored).
var artifacts = filepath.Join("..", "tests", "artifacts")

// browser starts headless Chromium with exactly the flags this machine needs
// and a fresh user-data dir, or skips the test with the reason.
func browser(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skipf("browser tests start Chromium; skipped under -short")
	}
	path := chromiumPath
	if _, err := os.Stat(path); err != nil {
		p, lerr := exec.LookPath("chromium")
		if lerr != nil {
			t.Skipf("Chromium not installed (%s: %v); install Debian's chromium to run the browser tests", chromiumPath, err)
		}
		path = p
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
	// The first call starts the browser; it must not carry a timeout (the
	// timeout would stop the browser), so the deadline goes on a child.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1440, 1000)); err != nil {
		cancelC()
		cancelA()
		t.Fatalf("starting Chromium: %v", err)
	}
	ctx, cancelT := context.WithTimeout(bctx, 120*time.Second)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	return ctx
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one action that returns a value.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return get(t, ctx, "text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

func click(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }
func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}
func gone(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitNotPresent(chromedp.CSS(sel))
}
func setValue(sel, v string) chromedp.Action[chromedp.Void] {
	return chromedp.SetValue(chromedp.CSS(sel), v)
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	p := filepath.Join(artifacts, "webui-"+name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", p, len(png))
}

// waitJS polls a JavaScript condition until it is true.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))
}

func apiJSON(t *testing.T, c *resttest.Cluster, path string, v any) int {
	t.Helper()
	res, err := http.Get(c.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode
}

func apiPut(t *testing.T, c *resttest.Cluster, key string, size int, query string) {
	t.Helper()
	val := make([]byte, size)
	for i := range val {
		val[i] = byte(i)
	}
	req, _ := http.NewRequest("PUT", c.URL+"/api/v1/objects/"+rest.EncodeKeyPath([]byte(key))+query, strings.NewReader(string(val)))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("put %s: %d", key, res.StatusCode)
	}
}

// fmtBytes mirrors app.js fmtBytes, so the test states what the operator reads.
func fmtBytes(n uint64) string {
	u := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(u)-1 {
		v /= 1024
		i++
	}
	switch {
	case i == 0:
		return fmt.Sprintf("%.0f %s", v, u[i])
	case v < 10:
		return fmt.Sprintf("%.2f %s", v, u[i])
	case v < 100:
		return fmt.Sprintf("%.1f %s", v, u[i])
	}
	return fmt.Sprintf("%.0f %s", v, u[i])
}

func TestBrowserOverviewObjectsSettings(t *testing.T) {
	ctx := browser(t)
	c := resttest.Start(t, resttest.Options{Segments: 2, SegmentSize: 32 << 20})
	apiPut(t, c, "llama-70b/layer-00/blk-0001", 3<<20, "")
	apiPut(t, c, "llama-70b/layer-00/blk-0002", 2<<20, "?soft_pin=true")
	apiPut(t, c, "llama-70b/layer-01/blk-0001", 1<<20, "?replicas=2")
	apiPut(t, c, "mistral-7b/prefix/cafe", 700<<10, "?hard_pin=true")
	apiPut(t, c, "tmp/a key with spaces & slashes/ok", 5000, "")

	var cj rest.ClusterJSON
	apiJSON(t, c, "/api/v1/cluster", &cj)
	var used uint64
	for _, tr := range cj.Tiers {
		if tr.Tier == "memory" {
			used = tr.Used
		}
	}
	if cj.Objects != 5 || used < 7<<20 {
		t.Fatalf("cluster before the UI: %d objects, %d bytes used", cj.Objects, used)
	}

	// Overview: object count and DRAM use as the operator reads them.
	run(t, ctx, "overview",
		chromedp.Navigate(c.URL+"/#overview"),
		waitJS(`document.querySelector("#ov-objects").textContent === "5"`),
	)
	objects, memUsed, memHint := text(t, ctx, "#ov-objects"), text(t, ctx, "#ov-mem-used"), text(t, ctx, "#ov-mem-hint")
	if objects != "5" || memUsed != fmtBytes(used) || !strings.Contains(memHint, "64.0 MiB") {
		t.Fatalf("overview shows objects %q, DRAM %q (%q); want 5 and %q of 64.0 MiB", objects, memUsed, memHint, fmtBytes(used))
	}
	hwMarker := get(t, ctx, "watermark marker", chromedp.AttributeValue(chromedp.CSS(`[data-tier="memory"] .mark`), "data-label")).Value
	if hwMarker != "HW 90 %" {
		t.Fatalf("watermark marker label %q", hwMarker)
	}
	// Let the live charts collect a few points before the screenshot.
	run(t, ctx, "charts", waitJS(`document.querySelector("#live-pill").textContent === "live"`), chromedp.Sleep(2500*time.Millisecond))
	screenshot(t, ctx, "overview")

	// Object browser: find by prefix, delete with confirmation.
	target := "llama-70b/layer-00/blk-0002"
	row := fmt.Sprintf(`#obj-table tr[data-key="%s"]`, rest.EncodeKeyPath([]byte(target)))
	run(t, ctx, "object search",
		chromedp.Navigate(c.URL+"/#objects"),
		visible("#obj-prefix"),
		setValue("#obj-prefix", "llama-70b/layer-00/"),
		click("#obj-search"),
		visible(row),
		waitJS(`document.querySelectorAll("#obj-table tbody tr").length === 2`),
	)
	rows := get(t, ctx, "rows", chromedp.Evaluate[int](`document.querySelectorAll("#obj-table tbody tr").length`))
	if rows != 2 {
		t.Fatalf("prefix search shows %d rows, want 2", rows)
	}
	rowText := text(t, ctx, row)
	if !strings.Contains(rowText, "2.00 MiB") || !strings.Contains(rowText, "soft pin") {
		t.Fatalf("row shows %q", rowText)
	}
	screenshot(t, ctx, "objects")
	run(t, ctx, "delete",
		click(row+" button.del"),
		visible("#confirm-ok"),
	)
	screenshot(t, ctx, "objects-confirm")
	run(t, ctx, "confirm delete",
		click("#confirm-ok"),
		gone(row),
	)
	var e rest.ErrorBody
	if st := apiJSON(t, c, "/api/v1/objects/"+rest.EncodeKeyPath([]byte(target)), &e); st != 404 || e.Code != "OBJECT_NOT_FOUND" {
		t.Fatalf("after deleting in the UI: status %d %+v", st, e)
	}
	apiJSON(t, c, "/api/v1/cluster", &cj)
	if cj.Objects != 4 {
		t.Fatalf("objects after UI delete = %d", cj.Objects)
	}

	// Tier settings: the watermark set in the UI is what the API reports.
	run(t, ctx, "tiers page",
		chromedp.Navigate(c.URL+"/#tiers"),
		waitJS(`document.querySelector("#dram-hw").value === "90"`),
		setValue("#dram-hw", "72.5"),
		click("#dram-save"),
		visible("#confirm-ok"),
	)
	confirmText := text(t, ctx, "#confirm-body")
	if !strings.Contains(confirmText, "90.0 %") || !strings.Contains(confirmText, "72.5 %") {
		t.Fatalf("confirmation says %q", confirmText)
	}
	run(t, ctx, "apply", click("#confirm-ok"),
		waitJS(`document.querySelector("#dram-current").textContent.includes("72.5 %")`))
	var tj rest.TiersJSON
	apiJSON(t, c, "/api/v1/tiers", &tj)
	if math.Abs(tj.DRAM.HighWatermark-0.725) > 1e-9 {
		t.Fatalf("API high watermark %v after the UI set 72.5 %%", tj.DRAM.HighWatermark)
	}
	screenshot(t, ctx, "tiers")

	// The other pages render real figures (screenshots for review).
	run(t, ctx, "segments", chromedp.Navigate(c.URL+"/#segments"),
		waitJS(`document.querySelectorAll("#seg-table tbody tr").length === 2`))
	screenshot(t, ctx, "segments")
	run(t, ctx, "clients", chromedp.Navigate(c.URL+"/#clients"),
		waitJS(`document.querySelector("#cl-table tbody").textContent.includes("node-a")`))
	screenshot(t, ctx, "clients")
	// The host checks (kvtier doctor) are listed, each with its status:
	// as many rows as the REST API reports checks.
	var doc struct {
		Checks []json.RawMessage `json:"checks"`
	}
	if code := apiJSON(t, c, "/api/v1/system/doctor", &doc); code != 200 || len(doc.Checks) < 10 {
		t.Fatalf("GET /api/v1/system/doctor: %d, %d checks", code, len(doc.Checks))
	}
	run(t, ctx, "host", chromedp.Navigate(c.URL+"/#host"),
		waitJS(`document.querySelectorAll("#host-nics tbody tr").length > 0`),
		waitJS(fmt.Sprintf(`document.querySelectorAll("#host-doctor tbody tr[data-status]").length === %d && document.querySelector("#doc-summary").textContent.includes("failed")`, len(doc.Checks))))
	screenshot(t, ctx, "host")
	apiPut(t, c, "late/arrival", 1000, "")
	run(t, ctx, "events", chromedp.Navigate(c.URL+"/#events"), waitJS(`document.querySelector("#live-pill").textContent === "live"`))
	req, _ := http.NewRequest("DELETE", c.URL+"/api/v1/objects/late%2Farrival", nil)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 204 {
		t.Fatalf("delete late/arrival: %v", err)
	}
	run(t, ctx, "event row", waitJS(`document.querySelector("#ev-table tbody").textContent.includes("late/arrival")`))
	screenshot(t, ctx, "events")

	// Under load (more puts than DRAM holds, with reads): the live charts
	// show throughput and evictions.
	run(t, ctx, "overview again", chromedp.Navigate(c.URL+"/#overview"), waitJS(`document.querySelector("#live-pill").textContent === "live"`))
	loadCtx, stopLoad := context.WithTimeout(ctx, 8*time.Second)
	defer stopLoad()
	const loadPuts = 160 // 1 MiB each into 64 MiB of DRAM
	val := make([]byte, 1<<20)
	for i := 0; loadCtx.Err() == nil && i < loadPuts; i++ {
		key := fmt.Sprintf("load/%04d", i)
		if err := c.DP.Put(loadCtx, key, val, rest.PutOptions{Replicas: 1}); err != nil && loadCtx.Err() == nil {
			t.Logf("load put %s: %v", key, err) // no space while eviction catches up is expected
		}
		_, _ = c.DP.Get(loadCtx, "default", fmt.Sprintf("load/%04d", i/2))
		if i%10 == 0 {
			time.Sleep(250 * time.Millisecond) // spread over several chart samples
		}
	}
	run(t, ctx, "charts under load", waitJS(`document.querySelector("#ov-rates").textContent !== "measuring…"`), chromedp.Sleep(1500*time.Millisecond))
	apiJSON(t, c, "/api/v1/cluster", &cj)
	if cj.Evictions.Count == 0 {
		t.Errorf("no evictions after writing %d MiB into 64 MiB", loadPuts)
	}
	screenshot(t, ctx, "overview-load")
}

// With --http-token set, the UI asks for the token once and then acts.
func TestBrowserToken(t *testing.T) {
	ctx := browser(t)
	c := resttest.Start(t, resttest.Options{Token: "ui-token-123"})
	apiPutAuth := func(key string) {
		req, _ := http.NewRequest("PUT", c.URL+"/api/v1/objects/"+key, strings.NewReader("v"))
		req.Header.Set("Authorization", "Bearer ui-token-123")
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 201 {
			t.Fatalf("put: %v %v", err, res)
		}
		res.Body.Close()
	}
	apiPutAuth("guarded")
	row := `#obj-table tr[data-key="guarded"]`
	run(t, ctx, "objects",
		chromedp.Navigate(c.URL+"/#objects"),
		visible(row),
		click(row+" button.del"),
		visible("#confirm-ok"),
		click("#confirm-ok"),
		visible("#token-input"),
		chromedp.SendKeys(chromedp.CSS("#token-input"), "ui-token-123"),
		click("#token-ok"),
		gone(row),
	)
	var e rest.ErrorBody
	if st := apiJSON(t, c, "/api/v1/objects/guarded", &e); st != 404 {
		t.Fatalf("object still there after the token was given: %d", st)
	}
	// The token is remembered: the next change asks no more.
	apiPutAuth("guarded2")
	run(t, ctx, "second delete",
		click("#obj-search"),
		visible(`#obj-table tr[data-key="guarded2"]`),
		click(`#obj-table tr[data-key="guarded2"] button.del`),
		visible("#confirm-ok"),
		click("#confirm-ok"),
		gone(`#obj-table tr[data-key="guarded2"]`),
	)
	open := get(t, ctx, "token dialog", chromedp.Evaluate[bool](`document.querySelector("#token-dlg").open`))
	if open {
		t.Fatal("token asked twice")
	}
}

// The NVMe page shows a real appliance's NVMe/TCP target: subsystem,
// namespace with I/O figures in units, its NOF segment, live rates and the
// connected host, all matching GET /api/v1/nvme.
func TestBrowserNVMe(t *testing.T) {
	ctx := browser(t)
	c := resttest.Start(t, resttest.Options{GRPC: true})
	a := c.NVMeAppliance(t, "nvme-box", 64<<20)
	ioctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const hostNQN = "nqn.2026-11.io.kvtier.test:gpu-node-7"
	ctrl, err := initiator.Dial(ioctx, a.NVMeAddr(), initiator.Config{SubNQN: a.NVMeNQN(), HostNQN: hostNQN, IOQueues: 4})
	if err != nil {
		t.Fatalf("initiator: %v", err)
	}
	defer ctrl.Close()
	blk := make([]byte, 128<<10)
	for i := range blk {
		blk[i] = byte(i * 7)
	}
	for i := range 8 { // 1 MiB written in 128 KiB commands
		if err := ctrl.WriteAt(ioctx, 1, blk, int64(i)*int64(len(blk))); err != nil {
			t.Fatal(err)
		}
	}
	rd := make([]byte, 4096)
	for i := range 256 { // 1 MiB read in 4 KiB commands
		if err := ctrl.ReadAt(ioctx, 1, rd, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	// A GPU node's NOF replica uses the namespace's segment.
	cl, err := client.New(ioctx, client.Config{MasterAddr: c.GRPCAddr, HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Put(ioctx, "llama-70b/layer-00/blk-0001", make([]byte, 3<<20), client.WithOptions(client.PutOptions{NOFReplicas: 1})); err != nil {
		t.Fatalf("NOF put: %v", err)
	}

	var nj rest.NVMeJSON
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		nj = rest.NVMeJSON{}
		apiJSON(t, c, "/api/v1/nvme", &nj)
		if len(nj.Appliances) == 1 && len(nj.Appliances[0].Hosts) >= 2 && nj.Totals.ReadOps >= 256 && nj.Totals.WriteBytes >= 4<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the heartbeat never carried the I/O: %+v", nj)
		}
	}
	// Keep a steady read load so the page measures a rate between heartbeats.
	loadDone := make(chan struct{})
	loadCtx, stopLoad := context.WithCancel(ioctx)
	go func() {
		defer close(loadDone)
		for i := 0; loadCtx.Err() == nil; i++ {
			if err := ctrl.ReadAt(loadCtx, 1, rd, int64(i%4096)*4096); err != nil {
				return
			}
			if i%64 == 63 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	defer func() { stopLoad(); <-loadDone }()

	row := `.nv-target[data-node="nvme-box"] .nv-ns tr[data-nsid="1"]`
	run(t, ctx, "nvme page",
		chromedp.Navigate(c.URL+"/#nvme"),
		visible(row),
		waitJS(`document.querySelector(`+"`"+row+" .nv-rrate`"+`).textContent.includes("IOPS")`),
	)
	if got := text(t, ctx, ".nv-target .nv-nqn"); got != a.NVMeNQN() {
		t.Fatalf("subsystem shown %q, want %q", got, a.NVMeNQN())
	}
	rowText := text(t, ctx, row)
	for _, want := range []string{"64.0 MiB", "16,384 blocks", "4.00 KiB", "nvme-box/nvme1", "1 NOF replicas", "3.00 MiB"} {
		if !strings.Contains(rowText, want) {
			t.Fatalf("namespace row %q lacks %q", rowText, want)
		}
	}
	if w := text(t, ctx, row+" .nv-write"); !strings.Contains(w, "MiB") || !strings.Contains(w, "commands") {
		t.Fatalf("written cell %q", w)
	}
	if r := text(t, ctx, row+" .nv-rrate"); !strings.Contains(r, "/s") {
		t.Fatalf("read rate cell %q has no unit", r)
	}
	hosts := text(t, ctx, `.nv-target[data-node="nvme-box"] .nv-hosts tbody`)
	if !strings.Contains(hosts, hostNQN) || !strings.Contains(hosts, cl.HostNQN()) {
		t.Fatalf("hosts table %q lacks %s and %s", hosts, hostNQN, cl.HostNQN())
	}
	if n := text(t, ctx, "#nv-namespaces"); n != "1" {
		t.Fatalf("namespace card %q", n)
	}
	if h := text(t, ctx, "#nv-hosts"); h != fmt.Sprint(len(nj.Appliances[0].Hosts)) {
		t.Fatalf("hosts card %q, API lists %d", h, len(nj.Appliances[0].Hosts))
	}
	screenshot(t, ctx, "nvme")

	// The clients page names the appliance's NVMe/TCP listener.
	run(t, ctx, "clients", chromedp.Navigate(c.URL+"/#clients"),
		waitJS(`document.querySelector("#cl-table tbody").textContent.includes("NVMe/TCP on `+a.NVMeAddr()+`")`))
}
