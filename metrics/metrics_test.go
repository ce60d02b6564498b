package metrics_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/metrics"
	"github.com/kvtier/kvtier/rest"
	"github.com/kvtier/kvtier/rest/resttest"
)

// cluster starts a real master behind REST (with m serving /metrics) and a
// real gRPC server on loopback with m's interceptors, and returns a client of
// that gRPC server.
func cluster(t *testing.T) (*resttest.Cluster, *metrics.Metrics, kvtierpb.MasterClient) {
	t.Helper()
	c := resttest.Start(t, resttest.Options{})
	m, err := metrics.New(metrics.Config{Source: c.MS})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(m.UnaryServerInterceptor()), grpc.StreamInterceptor(m.StreamServerInterceptor()))
	kvtierpb.RegisterMasterServer(gs, c.MS)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return c, m, kvtierpb.NewMasterClient(conn)
}

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	return get(t, h, "/metrics")
}

func get(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	srv := &http.Server{Handler: h}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()
	res, err := http.Get("http://" + lis.Addr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRPCInterceptorAndClusterFigures(t *testing.T) {
	c, m, cl := cluster(t)
	ctx := context.Background()
	if _, err := cl.Stats(ctx, &kvtierpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	_, err := cl.GetObject(ctx, &kvtierpb.KeyRequest{Key: []byte("missing")})
	if !kverr.Is(kverr.FromGRPC(err), kverr.ObjectNotFound) {
		t.Fatalf("GetObject of a missing key: %v", err)
	}
	if err := c.DP.Put(ctx, "k", make([]byte, 1000), rest.PutOptions{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	m.AddTransferBytes("put", 1000)
	m.AddTransferBytes("put", -5) // ignored
	out := scrape(t, m.Handler())
	for _, want := range []string{
		`kvtier_rpc_requests_total{op="Stats",result="OK"} 1`,
		`kvtier_rpc_requests_total{op="GetObject",result="OBJECT_NOT_FOUND"} 1`,
		`kvtier_rpc_duration_seconds_count{op="Stats"} 1`,
		`kvtier_transfer_bytes_total{op="put"} 1000`,
		`kvtier_master_up 1`,
		`kvtier_objects 1`,
		`kvtier_tier_objects{tier="memory"} 1`,
		`kvtier_puts_total{result="completed"} 1`,
		`kvtier_segment_capacity_bytes{segment="node-a/dram0"} 6.7108864e+07`,
		`kvtier_clients{state="live"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", out)
	}
}

// Every metric name the Grafana dashboard uses is exported at /metrics.
func TestDashboardMetricsExist(t *testing.T) {
	c, m, cl := cluster(t)
	ctx := context.Background()
	if _, err := cl.Stats(ctx, &kvtierpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	m.AddTransferBytes("get", 1)
	// REST traffic through a server that uses m.
	srv, err := rest.New(rest.Config{Metrics: m}, c.MS, c.DP)
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	_ = get(t, h, "/api/v1/health") // one API request so the HTTP metrics exist
	out := scrape(t, h)

	b, err := os.ReadFile("../deploy/grafana/kvtier.json")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, n := range regexp.MustCompile(`kvtier_[a-z0-9_]+`).FindAllString(string(b), -1) {
		names[n] = true
	}
	if len(names) < 30 {
		t.Fatalf("dashboard uses only %d metric names", len(names))
	}
	exported := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		exported[regexp.MustCompile(`^[a-zA-Z0-9_:]+`).FindString(line)] = true
	}
	var missing []string
	for n := range names {
		if !exported[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("dashboard metrics not in /metrics: %v", missing)
	}
}

// Names carry the kvtier_ prefix and a unit or _total; labels come only
// from tier, segment, appliance, op, result, state (and build_info's own).
func TestNamingAndLabels(t *testing.T) {
	_, m, cl := cluster(t)
	if _, err := cl.Stats(context.Background(), &kvtierpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	m.ObserveHTTP("GET /x", 200, 0)
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	unitless := map[string]bool{"kvtier_objects": true, "kvtier_master_up": true, "kvtier_master_leader": true,
		"kvtier_tier_objects": true, "kvtier_segment_draining": true, "kvtier_clients": true, "kvtier_ssd_buckets": true,
		"kvtier_ssd_quarantined_buckets": true, "kvtier_ssd_offload_queue": true, "kvtier_appliance_up": true}
	allowed := map[string]bool{"tier": true, "segment": true, "op": true, "result": true, "state": true, "appliance": true}
	unitless["kvtier_build_info"] = true
	buildLabels := map[string]bool{"version": true, "commit": true, "go_version": true, "tags": true}
	if len(fams) < 30 {
		t.Fatalf("only %d metric families", len(fams))
	}
	for _, f := range fams {
		n := f.GetName()
		if !strings.HasPrefix(n, "kvtier_") {
			t.Errorf("%s lacks the kvtier_ prefix", n)
		}
		if !unitless[n] && !strings.HasSuffix(n, "_bytes") && !strings.HasSuffix(n, "_seconds") && !strings.HasSuffix(n, "_total") {
			t.Errorf("%s has no unit suffix", n)
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if !allowed[l.GetName()] && !(n == "kvtier_build_info" && buildLabels[l.GetName()]) {
					t.Errorf("%s has label %q", n, l.GetName())
				}
			}
		}
	}
}

// Two Metrics share nothing (no package-level registry).
func TestIndependentRegistries(t *testing.T) {
	a, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a.AddTransferBytes("put", 7)
	if out := scrape(t, b.Handler()); strings.Contains(out, `op="put"} 7`) {
		t.Fatal("a's counter shows in b")
	}
	if out := scrape(t, a.Handler()); !strings.Contains(out, `kvtier_transfer_bytes_total{op="put"} 7`) {
		t.Fatalf("a lacks its own counter:\n%s", out)
	}
	if _, err := metrics.New(metrics.Config{ScrapeTimeout: -1}); err == nil {
		t.Fatal("negative timeout accepted")
	}
}

// fakeFailingSource is a fake for the one fault a real master cannot be made
// to show on demand: its Stats call failing.
type fakeFailingSource struct{}

func (fakeFailingSource) Stats(context.Context, *kvtierpb.Empty) (*kvtierpb.StatsResponse, error) {
	return nil, errors.New("master unreachable")
}
func (fakeFailingSource) ListSegments(context.Context, *kvtierpb.Empty) (*kvtierpb.ListSegmentsResponse, error) {
	return nil, errors.New("master unreachable")
}
func (fakeFailingSource) ListClients(context.Context, *kvtierpb.Empty) (*kvtierpb.ListClientsResponse, error) {
	return nil, errors.New("master unreachable")
}

func TestMasterDownReportsUpZero(t *testing.T) {
	m, err := metrics.New(metrics.Config{Source: fakeFailingSource{}})
	if err != nil {
		t.Fatal(err)
	}
	out := scrape(t, m.Handler())
	if !strings.Contains(out, "kvtier_master_up 0") || strings.Contains(out, "kvtier_tier_used_bytes") {
		t.Fatalf("scrape with the master down:\n%s", out)
	}
}
