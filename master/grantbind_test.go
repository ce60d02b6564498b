package master

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// authCall runs req through a's unary interceptor into the real gRPC
// handler h, as the token tok.
func authCall[Q, R any](a *Authorizer, tok, method string, req Q, h func(context.Context, Q) (R, error)) (R, error) {
	ctx := context.Background()
	if tok != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+tok))
	}
	out, err := a.Unary(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, r any) (any, error) {
		return h(ctx, r.(Q))
	})
	var zero R
	if err != nil {
		return zero, err
	}
	return out.(R), nil
}

// TestGrantBoundToPrincipal: with credentials, the grants of PutStart and
// GetReplicaList name the authenticated credential, not the client ID the
// call names, so two client IDs of one credential share a session and two
// credentials never do; open, the session stays the client ID's.
func TestGrantBoundToPrincipal(t *testing.T) {
	m, _ := newTest(t, Config{})
	s := &grpcServer{m: m}
	mountMem(t, m, "box", "box/mem0", 1<<20)
	m.EnsureGrantKeys("box", "inc-1")
	a := NewAuthorizer(m, fakeCreds{
		"cli-a": {Role: auth.RoleClient, ID: "pa"},
		"cli-b": {Role: auth.RoleClient, ID: "pb"},
	})
	sessOf := func(tok []byte) grant.Session {
		t.Helper()
		g, err := grant.Decode(tok)
		if err != nil {
			t.Fatalf("grant: %v", err)
		}
		return g.Session
	}
	ps, err := authCall(a, "cli-a", kvtierpb.Master_PutStart_FullMethodName,
		&kvtierpb.PutStartRequest{ClientId: "gpu1", Key: []byte("k"), Size: 4096}, s.PutStart)
	if err != nil {
		t.Fatal(err)
	}
	if got := sessOf(ps.Replicas[0].Grant); got != grant.SessionOfPrincipal("pa") || got == grant.SessionOf("gpu1") {
		t.Fatalf("write grant session %x: want credential pa's", got)
	}
	if _, err := authCall(a, "cli-a", kvtierpb.Master_PutEnd_FullMethodName,
		&kvtierpb.KeyRequest{ClientId: "gpu1", Key: []byte("k")}, s.PutEnd); err != nil {
		t.Fatal(err)
	}
	// Another client ID of the same credential: the same session.
	rl, err := authCall(a, "cli-a", kvtierpb.Master_GetReplicaList_FullMethodName,
		&kvtierpb.KeyRequest{ClientId: "gpu1-bis", Key: []byte("k")}, s.GetReplicaList)
	if err != nil {
		t.Fatal(err)
	}
	if got := sessOf(rl.Replicas[0].Grant); got != grant.SessionOfPrincipal("pa") {
		t.Fatalf("read grant session %x: want credential pa's", got)
	}
	// Another credential: another session.
	rl, err = authCall(a, "cli-b", kvtierpb.Master_GetReplicaList_FullMethodName,
		&kvtierpb.KeyRequest{ClientId: "gpu2", Key: []byte("k")}, s.GetReplicaList)
	if err != nil {
		t.Fatal(err)
	}
	if got := sessOf(rl.Replicas[0].Grant); got != grant.SessionOfPrincipal("pb") || got == grant.SessionOfPrincipal("pa") {
		t.Fatalf("read grant of credential pb: session %x", got)
	}
	// Open (no principal on the call): the client ID's session.
	rl, err = s.GetReplicaList(context.Background(), &kvtierpb.KeyRequest{ClientId: "gpu3", Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if got := sessOf(rl.Replicas[0].Grant); got != grant.SessionOf("gpu3") {
		t.Fatalf("open read grant session %x: want client gpu3's", got)
	}
	if grant.SessionOf("x") == grant.SessionOfPrincipal("x") {
		t.Fatal("a client ID and a principal ID of the same spelling share a session")
	}
}

// TestGrantKeysOnlyToBoundPrincipal: a node's grant secrets (which sign any
// grant for its data port) go only to the credential its client ID is bound
// to: a second appliance credential naming box-a's ID is refused outright,
// and an admin (which may name another's ID) gets the beat answered but no
// keys. The offload task's read grant names box-a's credential.
func TestGrantKeysOnlyToBoundPrincipal(t *testing.T) {
	m, _ := newTest(t, Config{})
	s := &grpcServer{m: m}
	a := NewAuthorizer(m, fakeCreds{
		"box-a-token": {Role: auth.RoleAppliance, ID: "pa"},
		"box-b-token": {Role: auth.RoleAppliance, ID: "pb"},
		"adm":         {Role: auth.RoleAdmin, ID: "padm"},
	})
	beat := func(tok string) (*kvtierpb.HeartbeatResponse, error) {
		return authCall(a, tok, kvtierpb.Master_Heartbeat_FullMethodName, &kvtierpb.HeartbeatRequest{
			ClientId: "box-a", Incarnation: "inc-1", Endpoint: "box-a:1",
			Segments: []*kvtierpb.Segment{{Name: "box-a/m0", Endpoint: "box-a:1", Size: 1 << 20}},
		}, s.Heartbeat)
	}
	if _, err := authCall(a, "box-a-token", kvtierpb.Master_MountSegment_FullMethodName, &kvtierpb.MountSegmentRequest{
		ClientId: "box-a", Incarnation: "inc-1", Segment: &kvtierpb.Segment{Name: "box-a/m0", Endpoint: "box-a:1", Size: 1 << 20},
	}, s.MountSegment); err != nil {
		t.Fatal(err)
	}
	own, err := beat("box-a-token")
	if err != nil {
		t.Fatal(err)
	}
	if len(own.GrantKeys) == 0 {
		t.Fatal("box-a's own credential got no grant keys")
	}
	if r, err := beat("box-b-token"); kverr.CodeOf(kverr.FromGRPC(err)) != kverr.PermissionDenied {
		t.Fatalf("second appliance credential beating as box-a: %v, keys %d", err, len(r.GetGrantKeys()))
	}
	r, err := beat("adm")
	if err != nil {
		t.Fatalf("admin beat naming box-a: %v", err)
	}
	if len(r.GrantKeys) != 0 {
		t.Fatalf("admin got %d of box-a's grant keys", len(r.GrantKeys))
	}
	if p, ok := m.Session("box-a"); !ok || p.ID != "pa" {
		t.Fatalf("box-a's session moved: %+v %v", p, ok)
	}
	if got := m.nodeGrantSession("box-a"); got != grant.SessionOfPrincipal("pa") {
		t.Fatalf("offload grant session of box-a %x: want credential pa's", got)
	}
	if got := m.nodeGrantSession("unbound"); got != grant.SessionOf("unbound") {
		t.Fatalf("offload grant session of an unbound node %x", got)
	}
}
