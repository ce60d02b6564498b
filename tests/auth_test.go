package tests

import (
	"context"
	"fmt"
	"hash/crc32"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/internal/fastrpc"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// Tokens of the abuse suite's credential file.
const (
	tokAdmin = "admin-token-abuse-0123456789"
	tokBox1  = "box1-token-abuse-0123456789"
	tokBox2  = "box2-token-abuse-0123456789"
	tokCliA  = "clientA-token-abuse-0123456789"
	tokCliB  = "clientB-token-abuse-0123456789"
	tokWrong = "wrong-token-abuse-0123456789"
)

// writeCreds writes the credential file and one token file per token.
func writeCreds(t *testing.T) (dir string) {
	t.Helper()
	dir = t.TempDir()
	writeCredsB(t, dir)
	return dir
}

// writeCredsB writes the credential and token files into dir.
func writeCredsB(t testing.TB, dir string) {
	t.Helper()
	creds := "# abuse suite\nadmin " + tokAdmin + "\nappliance " + tokBox1 + "\nappliance " + tokBox2 +
		"\nclient " + tokCliA + " A\nclient " + tokCliB + " B\n"
	if err := os.WriteFile(filepath.Join(dir, "creds"), []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"admin": tokAdmin, "box1": tokBox1, "box2": tokBox2, "a": tokCliA, "b": tokCliB, "wrong": tokWrong} {
		if err := os.WriteFile(filepath.Join(dir, name+".tok"), []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func sdk(t *testing.T, addr, token, tenant, id string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{MasterAddr: addr, Token: token, Tenant: tenant, ClientID: id, OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// snapshot lists every object of every tenant with its bytes' checksum
// (read by the admin).
func snapshot(t *testing.T, mc kvtierpb.MasterClient, admins map[string]*client.Client) []string {
	t.Helper()
	ctx := withToken(context.Background(), tokAdmin)
	resp, err := mc.ListObjects(ctx, &kvtierpb.ListObjectsRequest{AllTenants: true, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range resp.Objects {
		out = append(out, fmt.Sprintf("%s/%s size=%d crc=%08x", o.Tenant, o.Key, o.Size, o.Crc32C))
	}
	for tn, admin := range admins {
		for _, k := range []string{"k1", "k2", "k3"} {
			v, err := admin.Get(context.Background(), k)
			if err != nil {
				out = append(out, fmt.Sprintf("read %s/%s: %v", tn, k, kverr.CodeOf(err)))
				continue
			}
			out = append(out, fmt.Sprintf("read %s/%s %08x", tn, k, crc32.ChecksumIEEE(v)))
		}
	}
	sort.Strings(out)
	return out
}

func withToken(ctx context.Context, tok string) context.Context {
	if tok == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// callRaw calls method with an empty request (the role check comes before
// the request is looked at), over plain gRPC.
func callRaw(conn *grpc.ClientConn, tok, method string) error {
	ctx, cancel := context.WithTimeout(withToken(context.Background(), tok), 5*time.Second)
	defer cancel()
	d := kvtierpb.Master_ServiceDesc
	for _, s := range d.Streams {
		if "/"+d.ServiceName+"/"+s.StreamName == method {
			st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
			if err != nil {
				return err
			}
			if err := st.SendMsg(&kvtierpb.Empty{}); err != nil {
				return err
			}
			_ = st.CloseSend()
			return st.RecvMsg(&kvtierpb.Empty{})
		}
	}
	return conn.Invoke(ctx, method, &kvtierpb.Empty{}, &kvtierpb.Empty{})
}

func codeOf(err error) kverr.Code { return kverr.CodeOf(kverr.FromGRPC(err)) }

// TestAuthAbuse: a master with --credentials, two appliances and two
// tenants' clients, then every gRPC method called with no token, a wrong
// token and each weaker role's token, forged calls under another
// appliance's client ID, another tenant's reads and removals, REST with
// and without tokens and `kvtier rm --force` without the admin token. All
// refused with UNAUTHENTICATED / PERMISSION_DENIED, and every object's
// checksum is the same after as before.
func TestAuthAbuse(t *testing.T) {
	dir := writeCreds(t)
	c := startCluster(t, "--credentials", filepath.Join(dir, "creds"))
	c.appliance("box1", "--token-file", filepath.Join(dir, "box1.tok"))
	c.appliance("box2", "--token-file", filepath.Join(dir, "box2.tok"))
	ctx := context.Background()
	cliA := sdk(t, c.grpc, tokCliA, "", "cli-a")
	cliB := sdk(t, c.grpc, tokCliB, "", "cli-b")
	admins := map[string]*client.Client{"A": sdk(t, c.grpc, tokAdmin, "A", "admin-a"), "B": sdk(t, c.grpc, tokAdmin, "B", "admin-b")}
	for i, k := range []string{"k1", "k2", "k3"} {
		if err := cliA.Put(ctx, k, []byte(strings.Repeat("A", 1000+i))); err != nil {
			t.Fatal(err)
		}
		if err := cliB.Put(ctx, k, []byte(strings.Repeat("B", 2000+i))); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := grpc.NewClient("passthrough:///"+c.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mc := kvtierpb.NewMasterClient(conn)
	before := snapshot(t, mc, admins)
	if len(before) != 12 || strings.Contains(strings.Join(before, "\n"), "read A/k1: ") {
		t.Fatalf("snapshot before: %q", before)
	}

	// Every method: no token, a wrong one, every weaker role's.
	d := kvtierpb.Master_ServiceDesc
	var methods []string
	for _, m := range d.Methods {
		methods = append(methods, "/"+d.ServiceName+"/"+m.MethodName)
	}
	for _, s := range d.Streams {
		methods = append(methods, "/"+d.ServiceName+"/"+s.StreamName)
	}
	weaker := map[auth.Role][]string{auth.RoleAppliance: {tokCliA, tokCliB}, auth.RoleAdmin: {tokCliA, tokBox1}}
	refusals := 0
	for _, m := range methods {
		for _, tok := range []string{"", tokWrong} {
			if err := callRaw(conn, tok, m); codeOf(err) != kverr.Unauthenticated {
				t.Errorf("%s with token %q: %v, want UNAUTHENTICATED", m, tok, err)
			}
			refusals++
		}
		for _, tok := range weaker[auth.Methods[m]] {
			if err := callRaw(conn, tok, m); codeOf(err) != kverr.PermissionDenied {
				t.Errorf("%s with a weaker role's token: %v, want PERMISSION_DENIED", m, err)
			}
			refusals++
		}
	}
	t.Logf("%d methods, %d refusals checked", len(methods), refusals)

	// The fast path refuses a wrong token before any call; the call then
	// goes over gRPC, which names the refusal.
	fc, err := fastrpc.Dial(fastrpc.ClientConfig{Addrs: []string{c.grpc}, Fallback: conn, Token: tokWrong})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	if _, err := kvtierpb.NewMasterClient(fc).Stats(ctx, &kvtierpb.Empty{}); codeOf(err) != kverr.Unauthenticated {
		t.Fatalf("fast path with a wrong token: %v", err)
	}

	// Content rules and sessions, with real requests.
	box2 := withToken(ctx, tokBox2)
	cliACtx := withToken(ctx, tokCliA)
	forged := []struct {
		what string
		call func() error
	}{
		{"OffloadDone under box1's client ID", func() error {
			_, err := mc.OffloadDone(box2, &kvtierpb.OffloadDoneRequest{ClientId: "box1", Tenant: "A", Key: []byte("k1"), Ok: true, Bucket: 1, Length: 1000})
			return err
		}},
		{"MountSegment under box1's client ID", func() error {
			_, err := mc.MountSegment(box2, &kvtierpb.MountSegmentRequest{ClientId: "box1", Segment: &kvtierpb.Segment{Name: "box1/evil", Type: kvtierpb.ReplicaType_MEMORY, Node: "box1", Endpoint: "127.0.0.1:1", Size: 1 << 50}})
			return err
		}},
		{"RegisterDiskObjects under box1's client ID", func() error {
			_, err := mc.RegisterDiskObjects(box2, &kvtierpb.RegisterDiskObjectsRequest{ClientId: "box1", Objects: []*kvtierpb.DiskObject{{Tenant: "A", Key: []byte("k1"), Size: 1, Length: 1}}})
			return err
		}},
		{"UnmountSegment of box1 under box1's client ID", func() error {
			_, err := mc.UnmountSegment(box2, &kvtierpb.UnmountSegmentRequest{ClientId: "box1", Name: "box1/mem0"})
			return err
		}},
		{"Heartbeat under box1's client ID", func() error {
			_, err := mc.Heartbeat(box2, &kvtierpb.HeartbeatRequest{ClientId: "box1", Leaving: true})
			return err
		}},
		{"storage Heartbeat under box1's client ID (would be answered with box1's grant keys)", func() error {
			r, err := mc.Heartbeat(box2, &kvtierpb.HeartbeatRequest{ClientId: "box1", Segments: []*kvtierpb.Segment{{Name: "box1/mem0", Type: kvtierpb.ReplicaType_MEMORY, Node: "box1", Endpoint: "127.0.0.1:1", Size: 1 << 20}}})
			if len(r.GetGrantKeys()) > 0 {
				t.Errorf("box2 got %d of box1's grant keys", len(r.GetGrantKeys()))
			}
			return err
		}},
		{"DropBucket under box1's client ID", func() error {
			_, err := mc.DropBucket(box2, &kvtierpb.DropBucketRequest{ClientId: "box1", Bucket: 1})
			return err
		}},
		{"TakeOffload under box1's client ID", func() error {
			st, err := mc.TakeOffload(box2, &kvtierpb.TakeOffloadRequest{ClientId: "box1", Slots: 4, WaitMs: 10})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}},
		{"TakeRemovals under box1's client ID", func() error {
			st, err := mc.TakeRemovals(box2, &kvtierpb.TakeRemovalsRequest{ClientId: "box1", WaitMs: 10})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}},
		{"a client's PutRevoke under box1's client ID", func() error {
			_, err := mc.PutRevoke(cliACtx, &kvtierpb.KeyRequest{ClientId: "box1", Key: []byte("k1")})
			return err
		}},
		{"a client's PutEnd under cli-b's client ID", func() error {
			_, err := mc.PutEnd(cliACtx, &kvtierpb.KeyRequest{ClientId: "cli-b", Key: []byte("k1")})
			return err
		}},
		{"a client heartbeat announcing storage", func() error {
			_, err := mc.Heartbeat(cliACtx, &kvtierpb.HeartbeatRequest{ClientId: "cli-a", Segments: []*kvtierpb.Segment{{Name: "cli-a/m", Node: "cli-a", Size: 1 << 40}}})
			return err
		}},
		{"client A removing B's key", func() error {
			_, err := mc.Remove(cliACtx, &kvtierpb.KeyRequest{ClientId: "cli-a", Tenant: "B", Key: []byte("k1")})
			return err
		}},
		{"client A reading B's key", func() error {
			_, err := mc.GetReplicaList(cliACtx, &kvtierpb.KeyRequest{ClientId: "cli-a", Tenant: "B", Key: []byte("k1")})
			return err
		}},
		{"client A listing every tenant", func() error {
			_, err := mc.ListObjects(cliACtx, &kvtierpb.ListObjectsRequest{AllTenants: true})
			return err
		}},
		{"client A forced removal of its own key", func() error {
			_, err := mc.Remove(cliACtx, &kvtierpb.KeyRequest{ClientId: "cli-a", Key: []byte("k1"), Force: true})
			return err
		}},
		{"appliance UpdateTiers", func() error {
			_, err := mc.UpdateTiers(box2, &kvtierpb.UpdateTiersRequest{SsdCapacity: proto.Uint64(1)})
			return err
		}},
	}
	for _, f := range forged {
		if err := f.call(); codeOf(err) != kverr.PermissionDenied {
			t.Errorf("%s: %v, want PERMISSION_DENIED", f.what, err)
		}
	}
	// Through the SDK: B's client cannot name tenant A; its own tenant's
	// k1 is B's.
	cliBasA := sdk(t, c.grpc, tokCliB, "A", "cli-b2")
	if _, err := cliBasA.Get(ctx, "k1"); kverr.CodeOf(err) != kverr.PermissionDenied {
		t.Fatalf("client B reading tenant A: %v", err)
	}
	if err := cliBasA.Remove(ctx, "k1", false); kverr.CodeOf(err) != kverr.PermissionDenied {
		t.Fatalf("client B removing in tenant A: %v", err)
	}
	if v, err := cliB.Get(ctx, "k1"); err != nil || v[0] != 'B' {
		t.Fatalf("client B reads its own k1: %q %v", v, err)
	}

	// Grants name the credential they were issued to, whatever client ID
	// it uses, and never another credential.
	creds, err := auth.Load(filepath.Join(dir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := creds.Lookup(tokCliA)
	pb, _ := creds.Lookup(tokCliB)
	for _, g := range []struct {
		ctx    context.Context
		client string
		want   grant.Session
	}{{cliACtx, "cli-a", grant.SessionOfPrincipal(pa.ID)}, {cliACtx, "cli-a-second", grant.SessionOfPrincipal(pa.ID)},
		{withToken(ctx, tokCliB), "cli-b", grant.SessionOfPrincipal(pb.ID)}} {
		rl, err := mc.GetReplicaList(g.ctx, &kvtierpb.KeyRequest{ClientId: g.client, Key: []byte("k2")})
		if err != nil || len(rl.GetReplicas()) == 0 {
			t.Fatalf("GetReplicaList as %s: %v", g.client, err)
		}
		d, err := grant.Decode(rl.Replicas[0].Grant)
		if err != nil || d.Session != g.want || d.Session == grant.SessionOf(g.client) {
			t.Errorf("grant handed to %s names session %x (%v), want its credential's %x", g.client, d.Session, err, g.want)
		}
	}

	// The CLI: rm --force needs the admin token.
	for _, tok := range []string{"", "a.tok", "box1.tok", "wrong.tok"} {
		args := []string{"rm", "k1", "--force", "--tenant", "A"}
		if tok != "" {
			args = append(args, "--token-file", filepath.Join(dir, tok))
		}
		_, stderr, code := c.cli(t, nil, args...)
		if code != 6 || !(strings.Contains(stderr, "UNAUTHENTICATED") || strings.Contains(stderr, "PERMISSION_DENIED")) {
			t.Errorf("kvtier %v: exit %d %s", args, code, stderr)
		}
	}

	// REST.
	rest := func(method, path, tok string) int {
		req, _ := http.NewRequest(method, "http://"+c.http+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, path, tok string
		want              int
	}{
		{"GET", "/api/v1/health", "", 200},
		{"GET", "/api/v1/ready", "", 200},
		{"GET", "/", "", 200},
		{"GET", "/api/v1/objects", "", 401},
		{"GET", "/api/v1/objects", tokWrong, 401},
		{"GET", "/metrics", "", 401},
		{"GET", "/api/v1/cluster", "", 401},
		{"GET", "/api/v1/objects?tenant=B", tokCliA, 403},
		{"GET", "/api/v1/objects/k1/data?tenant=B", tokCliA, 403},
		{"DELETE", "/api/v1/objects/k1?tenant=A&force=true", tokCliA, 403},
		{"DELETE", "/api/v1/objects/k1?tenant=B", tokCliA, 403},
		{"PATCH", "/api/v1/tiers/ssd", tokBox1, 403},
		{"POST", "/api/v1/appliances/box1/drain", tokCliA, 403},
		{"GET", "/api/v1/events", tokCliA, 403},
		{"GET", "/api/v1/objects", tokCliA, 200},
		{"GET", "/api/v1/objects/k1/data", tokCliA, 200},
		{"GET", "/api/v1/cluster", tokBox1, 200},
		{"GET", "/metrics", tokCliA, 200},
	} {
		if got := rest(tc.method, tc.path, tc.tok); got != tc.want {
			t.Errorf("REST %s %s (token %q): %d, want %d", tc.method, tc.path, tc.tok, got, tc.want)
		}
	}

	after := snapshot(t, mc, admins)
	if strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Fatalf("objects changed:\nbefore %q\nafter  %q", before, after)
	}
	// The admin may: forced removal through the CLI.
	if _, stderr, code := c.cli(t, nil, "rm", "k1", "--force", "--tenant", "A", "--token-file", filepath.Join(dir, "admin.tok")); code != 0 {
		t.Fatalf("admin rm --force: %d %s", code, stderr)
	}
}

// TestOpenModeLoopbackOnly: without --credentials a master refuses a
// non-loopback listener unless --insecure, and says it runs open.
func TestOpenModeLoopbackOnly(t *testing.T) {
	_, stderr, code := runKvtierCode(t, nil, "master", "--grpc-addr", "0.0.0.0:0", "--http-addr", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, "without --credentials") || !strings.Contains(stderr, "--insecure") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	bad := filepath.Join(t.TempDir(), "creds")
	_ = os.WriteFile(bad, []byte("admin "+tokAdmin+"\nsuperuser "+tokCliA+"\n"), 0o600)
	_, stderr, code = runKvtierCode(t, nil, "master", "--credentials", bad, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, "line 2") {
		t.Fatalf("bad credentials: exit %d: %s", code, stderr)
	}
	p := start(t, "open master", "master", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	// The notice is logged (stderr) before the listening line (stdout), but
	// the two pipes are read by separate goroutines: wait for it briefly.
	eventually(t, 5*time.Second, "the open-mode notice in the log", func() bool { return strings.Contains(p.output(), "open mode") })
}

// TestCredentialsReloadOnSIGHUP: a token removed from the file and a new
// one added take effect on SIGHUP; a broken file keeps the previous set.
func TestCredentialsReloadOnSIGHUP(t *testing.T) {
	dir := writeCreds(t)
	creds := filepath.Join(dir, "creds")
	c := startCluster(t, "--credentials", creds)
	get := func(tok string) int {
		_, _, code := c.cli(t, nil, "exist", "nothing", "--token-file", filepath.Join(dir, tok))
		return code
	}
	if code := get("a.tok"); code != 1 { // 1: not stored, so authenticated
		t.Fatalf("client A before reload: exit %d", code)
	}
	if code := get("wrong.tok"); code != 6 {
		t.Fatalf("wrong token before reload: exit %d", code)
	}
	if err := os.WriteFile(creds, []byte("admin "+tokAdmin+"\nclient "+tokWrong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = c.master.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, 10*time.Second, "the reloaded credentials", func() bool { return get("a.tok") == 6 && get("wrong.tok") == 1 })
	if err := os.WriteFile(creds, []byte("admin "+tokAdmin+"\nbogus line here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = c.master.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, 10*time.Second, "the reload error in the log", func() bool {
		return strings.Contains(c.master.output(), "credentials not reloaded")
	})
	if code := get("wrong.tok"); code != 1 {
		t.Fatalf("a broken file dropped the previous credentials: exit %d", code)
	}
}

// TestStandaloneOwnClientIDsAreBound: a standalone's own appliance and
// REST data plane use an in-process admin token; their client IDs are
// bound to it, so an appliance token cannot act under them.
func TestStandaloneOwnClientIDsAreBound(t *testing.T) {
	dir := writeCreds(t)
	p := start(t, "standalone", "standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--dram", "64MiB", "--ssd-dir", "",
		"--credentials", filepath.Join(dir, "creds"))
	conn, err := grpc.NewClient("passthrough:///"+p.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mc := kvtierpb.NewMasterClient(conn)
	box := withToken(context.Background(), tokBox1)
	if _, err := mc.OffloadDone(box, &kvtierpb.OffloadDoneRequest{ClientId: "standalone", Key: []byte("k"), Ok: true}); codeOf(err) != kverr.PermissionDenied {
		t.Fatalf("OffloadDone under the standalone's ID: %v", err)
	}
	if _, err := mc.MountSegment(box, &kvtierpb.MountSegmentRequest{ClientId: "standalone", Segment: &kvtierpb.Segment{Name: "standalone/evil", Type: kvtierpb.ReplicaType_MEMORY, Node: "standalone", Endpoint: "127.0.0.1:1", Size: 1 << 40}}); codeOf(err) != kverr.PermissionDenied {
		t.Fatalf("MountSegment under the standalone's ID: %v", err)
	}
	segs, err := mc.ListSegments(withToken(context.Background(), tokAdmin), &kvtierpb.Empty{})
	if err != nil || len(segs.Segments) != 1 {
		t.Fatalf("segments: %v %v", segs, err)
	}
}
