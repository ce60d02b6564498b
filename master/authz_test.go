package master

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/kverr"
)

// TestMethodTableCoversService: every method of the service has a role in
// auth.Methods, and the table names no method the service lacks.
func TestMethodTableCoversService(t *testing.T) {
	d := kvtierpb.Master_ServiceDesc
	seen := map[string]bool{}
	for _, m := range d.Methods {
		seen["/"+d.ServiceName+"/"+m.MethodName] = true
	}
	for _, s := range d.Streams {
		seen["/"+d.ServiceName+"/"+s.StreamName] = true
	}
	for m := range seen {
		if _, ok := auth.Methods[m]; !ok {
			t.Errorf("%s has no entry in auth.Methods", m)
		}
	}
	for m := range auth.Methods {
		if !seen[m] {
			t.Errorf("auth.Methods names %s, which the service does not have", m)
		}
	}
}

type fakeCreds map[string]auth.Principal // test credentials (a map, not a file)

func (f fakeCreds) Lookup(tok string) (auth.Principal, bool) { p, ok := f[tok]; return p, ok }

// TestAuthorizer drives the unary interceptor with each kind of caller.
func TestAuthorizer(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuthorizer(m, fakeCreds{
		"adm": {Role: auth.RoleAdmin, ID: "adm"},
		"box": {Role: auth.RoleAppliance, ID: "box"}, "box2": {Role: auth.RoleAppliance, ID: "box2"},
		"cli": {Role: auth.RoleClient, Tenant: "A", ID: "cli"},
	})
	call := func(tok, method string, req any) (any, error) {
		ctx := context.Background()
		if tok != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+tok))
		}
		return a.Unary(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, req any) (any, error) {
			if _, ok := auth.FromContext(ctx); !ok {
				t.Fatal("handler without principal")
			}
			return req, nil
		})
	}
	code := func(err error) kverr.Code { return kverr.CodeOf(kverr.FromGRPC(err)) }
	if _, err := call("", kvtierpb.Master_Stats_FullMethodName, &kvtierpb.Empty{}); code(err) != kverr.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
	if _, err := call("nope", kvtierpb.Master_Stats_FullMethodName, &kvtierpb.Empty{}); code(err) != kverr.Unauthenticated {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := call("cli", kvtierpb.Master_UpdateTiers_FullMethodName, &kvtierpb.UpdateTiersRequest{}); code(err) != kverr.PermissionDenied {
		t.Fatalf("client UpdateTiers: %v", err)
	}
	if _, err := call("box", kvtierpb.Master_RemoveAll_FullMethodName, &kvtierpb.RemoveAllRequest{Force: true}); code(err) != kverr.PermissionDenied {
		t.Fatalf("appliance RemoveAll: %v", err)
	}
	if _, err := call("cli", kvtierpb.Master_Remove_FullMethodName, &kvtierpb.KeyRequest{Key: []byte("k"), Force: true}); code(err) != kverr.PermissionDenied {
		t.Fatalf("client forced remove: %v", err)
	}
	if _, err := call("cli", kvtierpb.Master_Heartbeat_FullMethodName, &kvtierpb.HeartbeatRequest{ClientId: "c", OffloadSlots: 4}); code(err) != kverr.PermissionDenied {
		t.Fatalf("client storage heartbeat: %v", err)
	}
	// Tenant confinement: default is rewritten, another tenant refused.
	got, err := call("cli", kvtierpb.Master_GetReplicaList_FullMethodName, &kvtierpb.KeyRequest{ClientId: "c", Tenant: "default", Key: []byte("k")})
	if err != nil || got.(*kvtierpb.KeyRequest).Tenant != "A" {
		t.Fatalf("tenant rewrite: %v %v", got, err)
	}
	if _, err := call("cli", kvtierpb.Master_GetReplicaList_FullMethodName, &kvtierpb.KeyRequest{ClientId: "c", Tenant: "B", Key: []byte("k")}); code(err) != kverr.PermissionDenied {
		t.Fatalf("other tenant: %v", err)
	}
	// Sessions: box owns its client ID; box2 may not use it, admin may.
	if _, err := call("box", kvtierpb.Master_Heartbeat_FullMethodName, &kvtierpb.HeartbeatRequest{ClientId: "box-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := call("box2", kvtierpb.Master_OffloadDone_FullMethodName, &kvtierpb.OffloadDoneRequest{ClientId: "box-1"}); code(err) != kverr.PermissionDenied {
		t.Fatalf("forged OffloadDone: %v", err)
	}
	if _, err := call("cli", kvtierpb.Master_PutEnd_FullMethodName, &kvtierpb.KeyRequest{ClientId: "box-1"}); code(err) != kverr.PermissionDenied {
		t.Fatalf("client naming an appliance's ID: %v", err)
	}
	if p, ok := m.Session("box-1"); !ok || p.ID != "box" {
		t.Fatalf("session of box-1: %+v %v", p, ok)
	}
	if _, err := call("adm", kvtierpb.Master_UnmountSegment_FullMethodName, &kvtierpb.UnmountSegmentRequest{ClientId: "box-1", Name: "x"}); err != nil {
		t.Fatal(err)
	}
	// An ID an admin used first is the admin's (a standalone's own appliance).
	if _, err := call("adm", kvtierpb.Master_Heartbeat_FullMethodName, &kvtierpb.HeartbeatRequest{ClientId: "standalone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := call("box", kvtierpb.Master_OffloadDone_FullMethodName, &kvtierpb.OffloadDoneRequest{ClientId: "standalone"}); code(err) != kverr.PermissionDenied {
		t.Fatalf("forged OffloadDone under an admin-bound ID: %v", err)
	}
	if _, err := call("box2", kvtierpb.Master_UnmountSegment_FullMethodName, &kvtierpb.UnmountSegmentRequest{Name: "x"}); code(err) != kverr.PermissionDenied {
		t.Fatalf("appliance unmounting any segment: %v", err)
	}
}

// BenchmarkAuthorizerGetReplicaList: a GetReplicaList through the gRPC
// handler of a real master, open and through the Authorizer (a tenant's
// client token: digest lookup, tenant rewrite, session bind), interleaved
// in the same run.
//
//	go test -run '^$' -bench BenchmarkAuthorizerGetReplicaList ./master/
func BenchmarkAuthorizerGetReplicaList(b *testing.B) {
	m, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	store := fakeCreds{"client-token-0123456789": {Role: auth.RoleClient, Tenant: "A", ID: "cli"}}
	a := NewAuthorizer(m, store)
	ms := NewGRPCServer(m)
	info := &grpc.UnaryServerInfo{FullMethod: kvtierpb.Master_GetReplicaList_FullMethodName}
	h := func(ctx context.Context, req any) (any, error) {
		r, err := ms.GetReplicaList(ctx, req.(*kvtierpb.KeyRequest))
		if kverr.CodeOf(kverr.FromGRPC(err)) == kverr.ObjectNotFound {
			err = nil
		}
		return r, err
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer client-token-0123456789"))
	nop := func(ctx context.Context, req any) (any, error) { return req, nil }
	for _, mode := range []string{"open", "tokens", "authorizer-alone"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				req := &kvtierpb.KeyRequest{ClientId: "c1", Key: []byte("missing")}
				var err error
				switch mode {
				case "open":
					_, err = h(ctx, req)
				case "authorizer-alone": // the interceptor's own cost
					_, err = a.Unary(ctx, req, info, nop)
				default:
					_, err = a.Unary(ctx, req, info, h)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
