package rest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/rest"
	"github.com/kvtier/kvtier/rest/resttest"
)

type resp struct {
	status int
	body   []byte
	hdr    http.Header
}

func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

func (r resp) errBody(t *testing.T) rest.ErrorBody {
	t.Helper()
	var e rest.ErrorBody
	r.json(t, &e)
	if e.Status != r.status || e.Code == "" || e.Message == "" {
		t.Fatalf("error body %s does not match status %d", r.body, r.status)
	}
	return e
}

func do(t *testing.T, c *resttest.Cluster, method, path string, body []byte, hdr ...string) resp {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.URL+path, rd)
	if err != nil {
		t.Fatalf("request %s %s: %v", method, path, err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp{status: res.StatusCode, body: b, hdr: res.Header}
}

func mustStatus(t *testing.T, r resp, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d: %s", r.status, want, r.body)
	}
}

func put(t *testing.T, c *resttest.Cluster, key string, val []byte, query string) {
	t.Helper()
	mustStatus(t, do(t, c, "PUT", "/api/v1/objects/"+rest.EncodeKeyPath([]byte(key))+query, val), http.StatusCreated)
}

func objectCount(t *testing.T, c *resttest.Cluster) uint64 {
	t.Helper()
	st, err := c.MS.Stats(context.Background(), &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	return st.GetObjects()
}

func TestHealthAndReady(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	mustStatus(t, do(t, c, "GET", "/api/v1/health", nil), 200)
	r := do(t, c, "GET", "/api/v1/ready", nil)
	mustStatus(t, r, 200)
	var rd rest.ReadyJSON
	r.json(t, &rd)
	if !rd.Ready || rd.Segments != 1 || !rd.Leader {
		t.Fatalf("ready = %+v", rd)
	}
	// Unmount the only segment: not ready, with the reason.
	mustStatus(t, do(t, c, "DELETE", "/api/v1/segments/"+url.PathEscape(c.Node+"/dram0"), nil), http.StatusNoContent)
	r = do(t, c, "GET", "/api/v1/ready", nil)
	mustStatus(t, r, http.StatusServiceUnavailable)
	r.json(t, &rd)
	if rd.Ready || !strings.Contains(rd.Reason, "no segment") {
		t.Fatalf("ready after unmount = %+v", rd)
	}
}

func TestReadyHook(t *testing.T) {
	c := resttest.Start(t, resttest.Options{Rest: rest.Config{Ready: func(context.Context) error {
		return fmt.Errorf("SSD index still loading on node-a")
	}}})
	r := do(t, c, "GET", "/api/v1/ready", nil)
	mustStatus(t, r, http.StatusServiceUnavailable)
	if !bytes.Contains(r.body, []byte("SSD index still loading")) {
		t.Fatalf("reason missing: %s", r.body)
	}
}

func TestObjectLifecycleWithSlashes(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	key := "model-a/layer/7?x=1 #frag%"
	val := bytes.Repeat([]byte("kv"), 5000)
	path := "/api/v1/objects/" + url.PathEscape(key)
	r := do(t, c, "PUT", path+"?replicas=1&soft_pin=true", val)
	mustStatus(t, r, http.StatusCreated)
	var o rest.ObjectJSON
	r.json(t, &o)
	if o.Key != key || o.Size != uint64(len(val)) || !o.SoftPin || len(o.Replicas) != 1 || !o.Complete {
		t.Fatalf("put answer %+v", o)
	}
	if o.Replicas[0].Type != "MEMORY" || o.Replicas[0].State != "COMPLETE" || o.Replicas[0].Segment == "" {
		t.Fatalf("replica %+v", o.Replicas[0])
	}
	// Metadata, by both encodings.
	for _, p := range []string{path, "/api/v1/objects/" + o.KeyPath, "/api/v1/objects/~b64:" + o.KeyB64} {
		r = do(t, c, "GET", p, nil)
		mustStatus(t, r, 200)
		var g rest.ObjectJSON
		r.json(t, &g)
		if g.Key != key || g.Size != uint64(len(val)) {
			t.Fatalf("GET %s = %+v", p, g)
		}
	}
	r = do(t, c, "GET", path+"/data", nil)
	mustStatus(t, r, 200)
	if !bytes.Equal(r.body, val) || r.hdr.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("data: %d bytes, type %q", len(r.body), r.hdr.Get("Content-Type"))
	}
	// Listed under its prefix (the prefix has a slash too).
	r = do(t, c, "GET", "/api/v1/objects?prefix="+url.QueryEscape("model-a/layer/"), nil)
	mustStatus(t, r, 200)
	var l rest.ObjectListJSON
	r.json(t, &l)
	if len(l.Objects) != 1 || l.Objects[0].Key != key {
		t.Fatalf("list = %+v", l)
	}
	// Write-once.
	e := do(t, c, "PUT", path, []byte("other")).errBody(t)
	if e.Code != "OBJECT_ALREADY_EXISTS" || e.Status != 409 {
		t.Fatalf("second put: %+v", e)
	}
	mustStatus(t, do(t, c, "DELETE", path+"?force=true", nil), http.StatusNoContent)
	e = do(t, c, "GET", path, nil).errBody(t)
	if e.Code != "OBJECT_NOT_FOUND" || e.Status != 404 {
		t.Fatalf("after delete: %+v", e)
	}
	if n := objectCount(t, c); n != 0 {
		t.Fatalf("objects after delete = %d", n)
	}
}

func TestBinaryKey(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	key := []byte{0, 0xff, '/', 0x80, 'k'}
	kp := rest.EncodeKeyPath(key)
	if !strings.HasPrefix(kp, "~b64:") {
		t.Fatalf("binary key path %q", kp)
	}
	mustStatus(t, do(t, c, "PUT", "/api/v1/objects/"+kp, []byte("v")), 201)
	r := do(t, c, "GET", "/api/v1/objects/"+kp+"/data", nil)
	mustStatus(t, r, 200)
	if string(r.body) != "v" {
		t.Fatalf("data %q", r.body)
	}
	// Percent form of the same bytes names the same object.
	r = do(t, c, "GET", "/api/v1/objects/%00%FF%2F%80k", nil)
	mustStatus(t, r, 200)
	var o rest.ObjectJSON
	r.json(t, &o)
	if o.KeyPath != kp || o.Key != "" {
		t.Fatalf("object %+v", o)
	}
}

func TestListPaging(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	for i := 0; i < 25; i++ {
		put(t, c, fmt.Sprintf("page/%02d", i), []byte{byte(i)}, "")
	}
	put(t, c, "other", []byte("x"), "")
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		r := do(t, c, "GET", "/api/v1/objects?prefix=page/&limit=10&cursor="+cursor, nil)
		mustStatus(t, r, 200)
		var l rest.ObjectListJSON
		r.json(t, &l)
		if len(l.Objects) > 10 {
			t.Fatalf("page of %d", len(l.Objects))
		}
		for _, o := range l.Objects {
			got = append(got, o.Key)
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
	}
	if len(got) != 25 {
		t.Fatalf("listed %d keys: %v", len(got), got)
	}
	for i, k := range got {
		if k != fmt.Sprintf("page/%02d", i) {
			t.Fatalf("key %d = %q (not sorted or duplicated): %v", i, k, got)
		}
	}
}

func TestTiersPatch(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	r := do(t, c, "PATCH", "/api/v1/tiers/dram", []byte(`{"high_watermark":0.75,"eviction_ratio":0.1,"lease_policy":"plain"}`))
	mustStatus(t, r, 200)
	r = do(t, c, "PATCH", "/api/v1/tiers/ssd", []byte(`{"policy":"lru","offload_mode":"on-evict","capacity":"2GiB","high_watermark":0.8}`))
	mustStatus(t, r, 200)
	var tj rest.TiersJSON
	do(t, c, "GET", "/api/v1/tiers", nil).json(t, &tj)
	if tj.DRAM.HighWatermark != 0.75 || tj.DRAM.EvictionRatio != 0.1 || tj.DRAM.LeasePolicy != "plain" {
		t.Fatalf("dram %+v", tj.DRAM)
	}
	if tj.SSD.Policy != "lru" || tj.SSD.OffloadMode != "on-evict" || tj.SSD.Capacity != 2<<30 || tj.SSD.HighWatermark != 0.8 {
		t.Fatalf("ssd %+v", tj.SSD)
	}
	var mem *rest.TierJSON
	for i := range tj.Stats {
		if tj.Stats[i].Tier == "memory" {
			mem = &tj.Stats[i]
		}
	}
	if mem == nil || mem.Capacity != 64<<20 {
		t.Fatalf("memory tier stats %+v", tj.Stats)
	}
	// Only the given field changes.
	mustStatus(t, do(t, c, "PATCH", "/api/v1/tiers/dram", []byte(`{"high_watermark":0.5}`)), 200)
	do(t, c, "GET", "/api/v1/tiers", nil).json(t, &tj)
	if tj.DRAM.HighWatermark != 0.5 || tj.DRAM.EvictionRatio != 0.1 {
		t.Fatalf("partial patch: %+v", tj.DRAM)
	}
}

func TestSegmentsAndClients(t *testing.T) {
	c := resttest.Start(t, resttest.Options{Segments: 2, SegmentSize: 8 << 20})
	put(t, c, "a", make([]byte, 1<<20), "")
	var sl struct{ Segments []rest.SegmentJSON }
	do(t, c, "GET", "/api/v1/segments", nil).json(t, &sl)
	if len(sl.Segments) != 2 {
		t.Fatalf("segments %+v", sl)
	}
	var used uint64
	for _, s := range sl.Segments {
		if s.Capacity != 8<<20 || s.Owner != c.Node || s.State != "mounted" || s.Type != "MEMORY" {
			t.Fatalf("segment %+v", s)
		}
		if s.LargestFree == 0 || s.LargestFree > s.Capacity-s.Used {
			t.Fatalf("largest free %d with %d used", s.LargestFree, s.Used)
		}
		used += s.Used
	}
	if used < 1<<20 {
		t.Fatalf("segments use %d after a 1 MiB put", used)
	}
	name := sl.Segments[0].NamePath
	r := do(t, c, "POST", "/api/v1/segments/"+name+"/drain", []byte(`{"grace_ms":60000}`))
	mustStatus(t, r, http.StatusAccepted)
	do(t, c, "GET", "/api/v1/segments", nil).json(t, &sl)
	states := map[string]string{}
	for _, s := range sl.Segments {
		states[s.NamePath] = s.State
	}
	if states[name] != "draining" {
		t.Fatalf("after drain: %v", states)
	}
	mustStatus(t, do(t, c, "DELETE", "/api/v1/segments/"+sl.Segments[1].NamePath, nil), http.StatusNoContent)
	do(t, c, "GET", "/api/v1/segments", nil).json(t, &sl)
	for _, s := range sl.Segments {
		if s.NamePath == name {
			continue
		}
		t.Fatalf("unmounted segment still listed: %+v", s)
	}

	var cl struct{ Clients []rest.ClientJSON }
	do(t, c, "GET", "/api/v1/clients", nil).json(t, &cl)
	if len(cl.Clients) != 1 || cl.Clients[0].ID != c.Node || cl.Clients[0].State != "live" || cl.Clients[0].LastHeartbeat == nil {
		t.Fatalf("clients %+v", cl)
	}
}

func TestConfigSystemOpenAPI(t *testing.T) {
	c := resttest.Start(t, resttest.Options{Rest: rest.Config{EffectiveConfig: func() any {
		return map[string]any{"http_addr": "127.0.0.1:8080", "dram": "1GiB"}
	}}})
	var cfg map[string]any
	do(t, c, "GET", "/api/v1/config", nil).json(t, &cfg)
	if cfg["dram"] != "1GiB" {
		t.Fatalf("config %v", cfg)
	}
	var sys rest.SystemJSON
	do(t, c, "GET", "/api/v1/system", nil).json(t, &sys)
	if sys.Memory.Total == 0 || sys.CPU.Logical == 0 || sys.HugePages.PageSize == 0 {
		t.Fatalf("system %+v", sys)
	}
	lo := false
	for _, n := range sys.NICs {
		lo = lo || n.Name == "lo"
	}
	if !lo || len(sys.Disks) == 0 {
		t.Fatalf("nics %+v disks %+v", sys.NICs, sys.Disks)
	}
}

// Every registered route is in the OpenAPI document and every documented
// operation is registered.
func TestOpenAPICoversRoutes(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	do(t, c, "GET", "/api/v1/openapi.json", nil).json(t, &doc)
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	registered := map[string]bool{}
	routes := c.Server.Routes()
	if len(routes) < 15 {
		t.Fatalf("only %d routes", len(routes))
	}
	for _, r := range routes {
		p := r.Path
		for _, seg := range strings.Split(p, "/") {
			if strings.HasPrefix(seg, ":") {
				p = strings.Replace(p, seg, "{"+seg[1:]+"}", 1)
			}
		}
		registered[strings.ToLower(r.Method)+" "+p] = true
		ops, ok := doc.Paths[p]
		if !ok {
			t.Errorf("route %s %s (%s) missing from the OpenAPI paths", r.Method, r.Path, p)
			continue
		}
		if _, ok := ops[strings.ToLower(r.Method)]; !ok {
			t.Errorf("route %s %s has no %s operation in the OpenAPI document", r.Method, p, r.Method)
		}
	}
	for p, ops := range doc.Paths {
		for m := range ops {
			if !registered[m+" "+p] {
				t.Errorf("documented %s %s is not a registered route", m, p)
			}
		}
	}
}

func TestMetricsEndpoint(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	put(t, c, "m", []byte("12345"), "")
	do(t, c, "GET", "/api/v1/objects/secret-key-1/x/y", nil) // unmatched: must not become a label
	r := do(t, c, "GET", "/metrics", nil)
	mustStatus(t, r, 200)
	for _, want := range []string{
		`kvtier_http_requests_total{op="PUT /api/v1/objects/:key",result="201"} 1`,
		`kvtier_tier_capacity_bytes{tier="memory"} 6.7108864e+07`,
		`kvtier_objects 1`,
		`kvtier_transfer_bytes_total{op="rest_put"} 5`,
	} {
		if !bytes.Contains(r.body, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !bytes.Contains(r.body, []byte(`kvtier_http_requests_total{op="GET unmatched",result="404"} 1`)) {
		t.Error("unmatched request not counted under op=\"GET unmatched\"")
	}
	if bytes.Contains(r.body, []byte(`"m"`)) || bytes.Contains(r.body, []byte("secret-key-1")) {
		t.Error("a key leaked into a metric label")
	}
}

func TestUIServed(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	// The UI routes pages by fragment (#host): only / and its files are the
	// UI; other paths are 404 (TestUnknownPathsAre404).
	for _, p := range []string{"/", "/index.html", "/app.js", "/app.css"} {
		r := do(t, c, "GET", p, nil)
		mustStatus(t, r, 200)
		if p == "/" && !bytes.Contains(r.body, []byte("<title>kvtier</title>")) {
			t.Fatalf("index: %.200s", r.body)
		}
	}
	if r := do(t, c, "GET", "/", nil); !strings.Contains(r.hdr.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("CSP %q", r.hdr.Get("Content-Security-Policy"))
	}
}

// An appliance whose SSD index is still loading keeps the cluster not ready;
// its SSD figures show in clients and in the disk tier once reported.
func TestReadyWaitsForSSDIndex(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	beat := func(loaded bool) {
		_, err := c.MS.Heartbeat(context.Background(), &kvtierpb.HeartbeatRequest{ClientId: "appliance-ssd", Endpoint: "127.0.0.1:2",
			Disk: &kvtierpb.DiskTierStats{Capacity: 1 << 30, Used: 3 << 20, Buckets: 3, Objects: 12, IndexLoaded: loaded}})
		if err != nil {
			t.Fatal(err)
		}
	}
	beat(false)
	r := do(t, c, "GET", "/api/v1/ready", nil)
	mustStatus(t, r, http.StatusServiceUnavailable)
	if !bytes.Contains(r.body, []byte("SSD index of appliance-ssd is still loading")) {
		t.Fatalf("ready: %s", r.body)
	}
	beat(true)
	mustStatus(t, do(t, c, "GET", "/api/v1/ready", nil), 200)
	var cl struct{ Clients []rest.ClientJSON }
	do(t, c, "GET", "/api/v1/clients", nil).json(t, &cl)
	found := false
	for _, ci := range cl.Clients {
		if ci.ID == "appliance-ssd" {
			found = ci.Disk != nil && ci.Disk.Capacity == 1<<30 && ci.Disk.Buckets == 3 && ci.Disk.IndexLoaded
		}
	}
	if !found {
		t.Fatalf("clients %+v", cl.Clients)
	}
	var cj rest.ClusterJSON
	do(t, c, "GET", "/api/v1/cluster", nil).json(t, &cj)
	for _, tr := range cj.Tiers {
		if tr.Tier == "disk" && (tr.Capacity != 1<<30 || tr.Used != 3<<20 || tr.Objects != 12) {
			t.Fatalf("disk tier %+v", tr)
		}
	}
}

// Serve stops when its context ends, even with an event stream open.
func TestServeShutsDownWithOpenStream(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Server.Serve(ctx, lis) }()
	res, err := http.Get("http://" + lis.Addr().String() + "/api/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || line != "retry: 3000\n" {
		t.Fatalf("first line %q: %v", line, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}
