package master

import (
	"testing"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/kverr"
)

// TestPutTicket: PutTicket signs a ticket of a storage node for the
// caller; the node's PutStart/PutEnd for the client with it place the put
// on that node only (its client ID the writer), under the authorizer
// without binding the client's ID to the appliance; the master refuses it
// for another client, tenant or node's caller, and once expired (the
// master's clock).
func TestPutTicket(t *testing.T) {
	m, fc := newTest(t, Config{})
	s := &grpcServer{m: m}
	mountMem(t, m, "box", "box/mem0", 1<<20)
	mountMem(t, m, "other", "other/mem0", 8<<20) // more free: the classic choice
	m.EnsureGrantKeys("box", "inc-1")
	m.EnsureGrantKeys("other", "inc-1")
	a := NewAuthorizer(m, fakeCreds{
		"cli-a": {Role: auth.RoleClient, ID: "pa", Tenant: "A"},
		"box":   {Role: auth.RoleAppliance, ID: "pbox"},
		"box2":  {Role: auth.RoleAppliance, ID: "pbox2"},
	})
	// The boxes' IDs are bound to their credentials by their calls.
	if err := m.BindSession("box", auth.Principal{Role: auth.RoleAppliance, ID: "pbox"}); err != nil {
		t.Fatal(err)
	}
	tr, err := authCall(a, "cli-a", kvtierpb.Master_PutTicket_FullMethodName,
		&kvtierpb.PutTicketRequest{ClientId: "gpu1", Node: "box"}, s.PutTicket)
	if err != nil || len(tr.Ticket) == 0 {
		t.Fatalf("PutTicket: %v %v", tr, err)
	}
	tok := tr.Ticket
	// The client's ID is bound to its credential: an appliance naming it
	// without a ticket is refused.
	if _, err := authCall(a, "box", kvtierpb.Master_PutStart_FullMethodName,
		&kvtierpb.PutStartRequest{ClientId: "gpu1", Tenant: "A", Key: []byte("k0"), Size: 10}, s.PutStart); err == nil {
		t.Fatal("appliance named a client's ID without a ticket")
	}
	ps, err := authCall(a, "box", kvtierpb.Master_PutStart_FullMethodName,
		&kvtierpb.PutStartRequest{ClientId: "gpu1", Tenant: "A", Key: []byte("k1"), Size: 4096, HasChecksum: true, PutTicket: tok}, s.PutStart)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Replicas) != 1 || ps.Replicas[0].Node != "box" || len(ps.Replicas[0].Grant) != 0 {
		t.Fatalf("direct placement: %v", ps.Replicas)
	}
	if _, err := authCall(a, "box", kvtierpb.Master_PutEnd_FullMethodName,
		&kvtierpb.KeyRequest{ClientId: "gpu1", Tenant: "A", Key: []byte("k1"), PutTicket: tok}, s.PutEnd); err != nil {
		t.Fatal(err)
	}
	info, err := m.GetObject(ctx, "A", "k1")
	if err != nil || info.Writer != "gpu1" {
		t.Fatalf("object: %+v %v", info, err)
	}
	// The client's session stayed its own.
	if p, ok := m.Session("gpu1"); !ok || p.ID != "pa" {
		t.Fatalf("gpu1 bound to %+v", p)
	}
	deny := func(what, caller string, r *kvtierpb.PutStartRequest) {
		t.Helper()
		_, err := authCall(a, caller, kvtierpb.Master_PutStart_FullMethodName, r, s.PutStart)
		if kverr.CodeOf(kverr.FromGRPC(err)) != kverr.PermissionDenied {
			t.Fatalf("%s: %v", what, err)
		}
	}
	deny("another client", "box", &kvtierpb.PutStartRequest{ClientId: "gpu2", Tenant: "A", Key: []byte("k2"), Size: 10, PutTicket: tok})
	deny("another tenant", "box", &kvtierpb.PutStartRequest{ClientId: "gpu1", Tenant: "B", Key: []byte("k2"), Size: 10, PutTicket: tok})
	deny("another node's credential", "box2", &kvtierpb.PutStartRequest{ClientId: "gpu1", Tenant: "A", Key: []byte("k2"), Size: 10, PutTicket: tok})
	fc.Advance(PutTicketLife)
	deny("expired", "box", &kvtierpb.PutStartRequest{ClientId: "gpu1", Tenant: "A", Key: []byte("k2"), Size: 10, PutTicket: tok})
	// OnlyNode refuses more than one MEMORY replica, and places nowhere
	// else when the node is full.
	if _, err := m.PutStart(ctx, PutRequest{Client: "c", Key: "k3", Size: 10, Config: PutConfig{Replicas: 2, OnlyNode: "box"}}); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("two replicas on one node: %v", err)
	}
	if _, err := m.PutStart(ctx, PutRequest{Client: "c", Key: "k4", Size: 2 << 20, Config: PutConfig{Replicas: 1, OnlyNode: "box"}}); !kverr.Is(err, kverr.NoAvailableHandle) {
		t.Fatalf("full node: %v", err)
	}
	// Without grants: no ticket, open.
	m2, _ := newTest(t, Config{DisableGrants: true})
	tr, err = (&grpcServer{m: m2}).PutTicket(ctx, &kvtierpb.PutTicketRequest{ClientId: "gpu1", Node: "box"})
	if err != nil || !tr.Open || len(tr.Ticket) != 0 {
		t.Fatalf("open: %v %v", tr, err)
	}
}
