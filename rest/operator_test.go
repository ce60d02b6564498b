package rest_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/doctor"
	"github.com/kvtier/kvtier/internal/buildinfo"
	"github.com/kvtier/kvtier/rest"
	"github.com/kvtier/kvtier/rest/resttest"
)

// Paths the UI does not own answer 404 with the JSON error body, never the
// UI's HTML with 200 (a probe of /healthz must not think the box is up).
func TestUnknownPathsAre404(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	for _, p := range []string{"/healthz", "/version", "/debug/pprof", "/debug/pprof/", "/get_all_segments", "/some/deep/link", "/api/v1/nope", "/app.js/x"} {
		r := do(t, c, "GET", p, nil)
		mustStatus(t, r, http.StatusNotFound)
		if ct := r.hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s: content type %q", p, ct)
		}
		if e := r.errBody(t); !strings.Contains(e.Message, "no such endpoint") {
			t.Errorf("%s: %+v", p, e)
		}
	}
}

// HEAD is answered wherever GET is, with GET's status and headers and no body.
func TestHeadWhereGetExists(t *testing.T) {
	c := resttest.Start(t, resttest.Options{})
	put(t, c, "h", []byte("hello"), "")
	for _, p := range []string{"/api/v1/health", "/api/v1/cluster", "/api/v1/tiers", "/api/v1/objects/h", "/api/v1/objects/h/data",
		"/api/v1/openapi.json", "/api/v1/version", "/metrics", "/", "/app.js", "/api/v1/events"} {
		// GET of the event stream never ends: compare with what it sends.
		g := resp{status: 200, hdr: http.Header{"Content-Type": {"text/event-stream"}}}
		if p != "/api/v1/events" {
			g = do(t, c, "GET", p, nil)
		}
		h := do(t, c, "HEAD", p, nil)
		if h.status != g.status || h.status != 200 {
			t.Errorf("HEAD %s: %d, GET %d", p, h.status, g.status)
		}
		if len(h.body) != 0 {
			t.Errorf("HEAD %s returned a body of %d bytes", p, len(h.body))
		}
		if gt, ht := g.hdr.Get("Content-Type"), h.hdr.Get("Content-Type"); gt != ht {
			t.Errorf("HEAD %s content type %q, GET %q", p, ht, gt)
		}
	}
	mustStatus(t, do(t, c, "HEAD", "/healthz", nil), http.StatusNotFound)
	mustStatus(t, do(t, c, "HEAD", "/api/v1/objects/nope", nil), http.StatusNotFound)
}

// The OpenAPI document declares each answer's real content type.
func TestOpenAPIContentTypes(t *testing.T) {
	doc := rest.OpenAPI()
	paths := doc["paths"].(map[string]any)
	content := func(path string) map[string]any {
		op := paths[path].(map[string]any)["get"].(map[string]any)
		return op["responses"].(map[string]any)["200"].(map[string]any)["content"].(map[string]any)
	}
	if _, ok := content("/api/v1/events")["text/event-stream"]; !ok || len(content("/api/v1/events")) != 1 {
		t.Errorf("events declared as %v, want text/event-stream only", content("/api/v1/events"))
	}
	if _, ok := content("/api/v1/objects/{key}/data")["application/octet-stream"]; !ok {
		t.Errorf("object data declared as %v", content("/api/v1/objects/{key}/data"))
	}
	// And the server agrees with the document.
	c := resttest.Start(t, resttest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.URL+"/api/v1/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("events served as %q", ct)
	}
}

func TestVersionAndDoctorEndpoints(t *testing.T) {
	c := resttest.Start(t, resttest.Options{Rest: rest.Config{Doctor: func(ctx context.Context) doctor.Report {
		return doctor.Report{OK: false, Failed: 1, Checks: []doctor.Check{{Name: "hugepages", Status: doctor.StatusFail, Fix: "sysctl -w vm.nr_hugepages=512"}}}
	}}})
	var v buildinfo.Info
	do(t, c, "GET", "/api/v1/version", nil).json(t, &v)
	if v.GoVersion == "" || v.Version == "" || v.Commit == "" {
		t.Errorf("version %+v", v)
	}
	var d doctor.Report
	r := do(t, c, "GET", "/api/v1/system/doctor", nil)
	mustStatus(t, r, 200)
	r.json(t, &d)
	if d.OK || d.Failed != 1 || d.Checks[0].Fix == "" {
		t.Errorf("doctor %+v", d)
	}
	// Without a configured doctor the host itself is checked.
	c2 := resttest.Start(t, resttest.Options{})
	var d2 doctor.Report
	do(t, c2, "GET", "/api/v1/system/doctor", nil).json(t, &d2)
	if len(d2.Checks) != 12 {
		t.Errorf("host doctor: %d checks", len(d2.Checks))
	}
}

func segState(t *testing.T, c *resttest.Cluster, name string) string {
	t.Helper()
	segs, err := c.MS.ListSegments(context.Background(), &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs.GetSegments() {
		if s.GetSegment().GetName() == name {
			return s.GetState().String()
		}
	}
	return "absent"
}

func TestApplianceDrainUndrain(t *testing.T) {
	c := resttest.Start(t, resttest.Options{Segments: 2, Token: "adm"})
	auth := []string{"Authorization", "Bearer adm"}
	// Without the admin token: refused.
	mustStatus(t, do(t, c, "POST", "/api/v1/appliances/"+c.Node+"/drain", nil), http.StatusUnauthorized)
	mustStatus(t, do(t, c, "POST", "/api/v1/appliances/no-such-box/drain", nil, auth...), http.StatusNotFound)

	r := do(t, c, "POST", "/api/v1/appliances/"+c.Node+"/drain", []byte(`{"grace_ms": 600000}`), auth...)
	mustStatus(t, r, http.StatusAccepted)
	var out rest.ApplianceDrainJSON
	r.json(t, &out)
	if out.State != "draining" || len(out.Segments) != 2 {
		t.Fatalf("drain: %+v", out)
	}
	for _, s := range out.Segments {
		if st := segState(t, c, s); st != "DRAINING" {
			t.Errorf("%s is %s after drain", s, st)
		}
	}
	// A put finds no segment while every one drains.
	if r := do(t, c, "PUT", "/api/v1/objects/k", []byte("v"), auth...); r.status != http.StatusInsufficientStorage {
		t.Errorf("put during drain: %d %s", r.status, r.body)
	}
	r = do(t, c, "POST", "/api/v1/appliances/"+c.Node+"/undrain", nil, auth...)
	mustStatus(t, r, http.StatusOK)
	r.json(t, &out)
	if out.State != "undrained" || len(out.Segments) != 2 {
		t.Fatalf("undrain: %+v", out)
	}
	for _, s := range out.Segments {
		if st := segState(t, c, s); st != "MOUNTED" {
			t.Errorf("%s is %s after undrain", s, st)
		}
	}
	if r := do(t, c, "PUT", "/api/v1/objects/k", []byte("v"), auth...); r.status != http.StatusCreated {
		t.Errorf("put after undrain: %d %s", r.status, r.body)
	}
	if !bytes.Contains(do(t, c, "GET", "/api/v1/openapi.json", nil).body, []byte("/api/v1/appliances/{name}/undrain")) {
		t.Error("undrain missing from the OpenAPI document")
	}
}
