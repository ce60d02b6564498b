package master

import (
	"fmt"
	"strings"
	"testing"
	"time"

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

// TestPutTicketItems: a box's coalesced batch of direct puts of several
// clients (per_item_tickets) places each item as its own ticket says, on
// the ticket's node, refuses an item whose ticket names someone else,
// and the items' BatchPutEnd commits each as its own writer's.
func TestPutTicketItems(t *testing.T) {
	m, _ := newTest(t, Config{})
	s := &grpcServer{m: m}
	mountMem(t, m, "box", "box/mem0", 1<<20)
	mountMem(t, m, "other", "other/mem0", 8<<20)
	m.EnsureGrantKeys("box", "inc-1")
	ticket := func(client string) []byte {
		tr, err := s.PutTicket(ctx, &kvtierpb.PutTicketRequest{ClientId: client, Node: "box"})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Ticket
	}
	ta, tb := ticket("a"), ticket("b")
	items := []*kvtierpb.PutStartRequest{
		{ClientId: "a", Key: []byte("ka"), Size: 100, HasChecksum: true, PutTicket: ta},
		{ClientId: "b", Key: []byte("kb"), Size: 200, HasChecksum: true, PutTicket: tb},
		{ClientId: "b", Key: []byte("kc"), Size: 300, PutTicket: ta}, // a's ticket named as b
	}
	resp, err := s.BatchPutStart(ctx, &kvtierpb.BatchPutStartRequest{PerItemTickets: true, Items: items})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []kvtierpb.ErrorCode{kvtierpb.ErrorCode_OK, kvtierpb.ErrorCode_OK, kvtierpb.ErrorCode_PERMISSION_DENIED} {
		r := resp.Results[i]
		if r.Code != want || (want == kvtierpb.ErrorCode_OK && (len(r.Replicas) != 1 || r.Replicas[0].Node != "box" || r.DramSeq != 0 && r.DramOutbox == 0)) {
			t.Fatalf("item %d: %v", i, r)
		}
	}
	if _, err := s.BatchPutStart(ctx, &kvtierpb.BatchPutStartRequest{PerItemTickets: true, ClientId: "a", Items: items[:1]}); err == nil {
		t.Fatal("per-item tickets with a batch identity accepted")
	}
	end, err := s.BatchPutEnd(ctx, &kvtierpb.BatchKeysRequest{Items: []*kvtierpb.KeyRequest{
		{ClientId: "a", Key: []byte("ka"), PutTicket: ta, HolderApplies: true},
		{ClientId: "b", Key: []byte("kb"), PutTicket: ta}, // wrong ticket
		{ClientId: "b", Key: []byte("kb"), PutTicket: tb},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if end.Results[0].Code != 0 || end.Results[1].Code != kvtierpb.ErrorCode_PERMISSION_DENIED || end.Results[2].Code != 0 {
		t.Fatalf("ends: %v", end.Results)
	}
	for k, w := range map[string]string{"ka": "a", "kb": "b"} {
		info, err := m.GetObject(ctx, "", k)
		if err != nil || info.Writer != w || len(info.Replicas) != 1 || info.Replicas[0].State != Complete {
			t.Fatalf("%s: %+v %v", k, info, err)
		}
	}
}

// TestDirectPutFreeSeq: a direct put's PutStart (single and batch) names
// the last free record queued for its segment before the placement
// (dram_free_seq), in the outbox of its commit record and before it: at
// 0 while the segment was never freed, then at or after the free of the
// extent's previous occupant, which the box applies before it writes the
// new put's bytes (no stale write grant's frame runs there after that).
func TestDirectPutFreeSeq(t *testing.T) {
	m, _ := newTest(t, Config{DramSyncTimeout: 5 * time.Second})
	s := &grpcServer{m: m}
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true}); err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "box", "box/mem0", 1<<20)
	m.EnsureGrantKeys("box", "inc-1")
	twin := startTwin(m, "box") // acknowledges the records, as the box would
	defer twin.close()
	tr, err := s.PutTicket(ctx, &kvtierpb.PutTicketRequest{ClientId: "gpu1", Node: "box"})
	if err != nil {
		t.Fatal(err)
	}
	start := func(key string) *kvtierpb.PutStartResponse {
		t.Helper()
		ps, err := s.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "gpu1", Key: []byte(key), Size: 1 << 20,
			HasChecksum: true, Crc32C: 1, PutTicket: tr.Ticket})
		if err != nil {
			t.Fatal(err)
		}
		if ps.DramSeq == 0 || ps.DramOutbox == 0 || ps.DramFreeSeq >= ps.DramSeq {
			t.Fatalf("%s: outbox %d commit seq %d free seq %d: want a commit after the last free", key, ps.DramOutbox, ps.DramSeq, ps.DramFreeSeq)
		}
		return ps
	}
	if ps := start("k1"); ps.DramFreeSeq != 0 {
		t.Fatalf("a segment never freed: free seq %d", ps.DramFreeSeq)
	}
	if _, err := s.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "gpu1", Key: []byte("k1"), PutTicket: tr.Ticket}); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "", "k1", true); err != nil { // frees the whole segment: k2 takes the same extent
		t.Fatal(err)
	}
	ps := start("k2")
	if ps.Replicas[0].Offset != 0 || ps.DramFreeSeq == 0 {
		t.Fatalf("k2 at %d after k1's free: free seq %d", ps.Replicas[0].Offset, ps.DramFreeSeq)
	}
	if _, err := s.PutRevoke(ctx, &kvtierpb.KeyRequest{ClientId: "gpu1", Key: []byte("k2"), PutTicket: tr.Ticket}); err != nil {
		t.Fatal(err)
	}
	// The batch form (a box coalescing its connections' PutStarts).
	resp, err := s.BatchPutStart(ctx, &kvtierpb.BatchPutStartRequest{PerItemTickets: true, Items: []*kvtierpb.PutStartRequest{
		{ClientId: "gpu1", Key: []byte("k3"), Size: 1 << 20, HasChecksum: true, PutTicket: tr.Ticket}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Results[0]; r.Code != 0 || r.DramFreeSeq <= ps.DramFreeSeq || r.DramFreeSeq >= r.DramSeq {
		t.Fatalf("batch after k2's revoke: %v (k2's free seq %d)", r, ps.DramFreeSeq)
	}
}

// TestDirectPutAnswerCarriesRecords: a direct put asking for them
// (PutConfig.holder_takes) is answered with its node's records not yet
// acknowledged, up to and including its commit record, in order; none
// when one of them is a free (the stream applies those), when there are
// more than maxHolderRecords, or when the put did not ask. A batch of
// direct puts carries them once, on the item with the highest seq.
func TestDirectPutAnswerCarriesRecords(t *testing.T) {
	m, _ := newTest(t, Config{DramSyncTimeout: -1})
	s := &grpcServer{m: m}
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true}); err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "box", "box/mem0", 1<<20)
	m.EnsureGrantKeys("box", "inc-1")
	if err := m.AckDramRecords("box", 0, 0); err != nil { // the box's stream opens: its records are kept
		t.Fatal(err)
	}
	tr, err := s.PutTicket(ctx, &kvtierpb.PutTicketRequest{ClientId: "gpu1", Node: "box"})
	if err != nil {
		t.Fatal(err)
	}
	start := func(key string, takes bool) *kvtierpb.PutStartResponse {
		t.Helper()
		ps, err := s.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "gpu1", Key: []byte(key), Size: 1024,
			HasChecksum: true, Crc32C: 1, PutTicket: tr.Ticket, Config: &kvtierpb.PutConfig{OnlyNode: "box", HolderTakes: takes}})
		if err != nil || ps.DramSeq == 0 {
			t.Fatalf("PutStart %s: %v %v", key, ps, err)
		}
		return ps
	}
	keysOf := func(rs []*kvtierpb.DramRecord) string {
		var out []string
		for _, r := range rs {
			out = append(out, string(r.Key))
		}
		return strings.Join(out, ",")
	}
	p1 := start("k1", true)
	if len(p1.DramRecords) != 1 || p1.DramRecords[0].Seq != p1.DramSeq || string(p1.DramRecords[0].Key) != "k1" ||
		p1.DramRecords[0].Free || p1.DramRecords[0].Segment != "box/mem0" || p1.DramRecords[0].Offset != p1.Replicas[0].Offset {
		t.Fatalf("k1's answer carries %v, want its commit record (seq %d)", p1.DramRecords, p1.DramSeq)
	}
	if p := start("k2", false); len(p.DramRecords) != 0 {
		t.Fatalf("a put that did not ask carries %v", p.DramRecords)
	}
	p3 := start("k3", true)
	if got := keysOf(p3.DramRecords); got != "k1,k2,k3" || p3.DramRecords[2].Seq != p3.DramSeq {
		t.Fatalf("k3's answer carries %s, want every record not acknowledged: k1,k2,k3", got)
	}
	if err := m.AckDramRecords("box", p3.DramOutbox, p3.DramSeq); err != nil {
		t.Fatal(err)
	}
	if got := keysOf(start("k4", true).DramRecords); got != "k4" {
		t.Fatalf("after the acknowledgement k4's answer carries %s, want k4", got)
	}
	// A free among them: the stream's.
	if _, err := s.PutRevoke(ctx, &kvtierpb.KeyRequest{ClientId: "gpu1", Key: []byte("k4"), PutTicket: tr.Ticket}); err != nil {
		t.Fatal(err)
	}
	p5 := start("k5", true)
	if len(p5.DramRecords) != 0 {
		t.Fatalf("records with a free among them carried: %s", keysOf(p5.DramRecords))
	}
	if err := m.AckDramRecords("box", p5.DramOutbox, p5.DramSeq); err != nil {
		t.Fatal(err)
	}
	// More than maxHolderRecords behind: none.
	var last *kvtierpb.PutStartResponse
	for i := range maxHolderRecords + 1 {
		last = start(fmt.Sprintf("many/%d", i), true)
		if want := i + 1; i < maxHolderRecords && len(last.DramRecords) != want {
			t.Fatalf("put %d carries %d records, want %d", i, len(last.DramRecords), want)
		}
	}
	if len(last.DramRecords) != 0 {
		t.Fatalf("%d records carried past the bound %d", len(last.DramRecords), maxHolderRecords)
	}
	if err := m.AckDramRecords("box", last.DramOutbox, last.DramSeq); err != nil {
		t.Fatal(err)
	}
	// A coalesced batch: one copy, on the item with the highest seq.
	items := make([]*kvtierpb.PutStartRequest, 3)
	for i := range items {
		items[i] = &kvtierpb.PutStartRequest{ClientId: "gpu1", Key: []byte(fmt.Sprintf("b%d", i)), Size: 1024, HasChecksum: true,
			PutTicket: tr.Ticket, Config: &kvtierpb.PutConfig{OnlyNode: "box", HolderTakes: true}}
	}
	resp, err := s.BatchPutStart(ctx, &kvtierpb.BatchPutStartRequest{PerItemTickets: true, Items: items})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.Results {
		if r.Code != 0 {
			t.Fatalf("item %d: %v", i, r)
		}
		if want := map[bool]string{true: "b0,b1,b2", false: ""}[i == 2]; keysOf(r.DramRecords) != want {
			t.Fatalf("item %d (seq %d) carries %q, want %q", i, r.DramSeq, keysOf(r.DramRecords), want)
		}
	}
}

// TestStagedPutCommitsAtStartAndReadsWaitForItsHolder: a direct put whose
// node holds its bytes already (PutConfig.stage) is committed by its
// PutStart, its commit record carries the stage, and no reader gets the
// replica before the node acknowledged that record (it copies the bytes
// in when it applies it); without the acknowledgement a read is
// REPLICA_IS_NOT_READY after the bound.
func TestStagedPutCommitsAtStartAndReadsWaitForItsHolder(t *testing.T) {
	m, _ := newTest(t, Config{DramSyncTimeout: 300 * time.Millisecond})
	s := &grpcServer{m: m}
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true}); err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "box", "box/mem0", 1<<20)
	m.EnsureGrantKeys("box", "inc-1")
	if err := m.AckDramRecords("box", 0, 0); err != nil {
		t.Fatal(err)
	}
	tr, err := s.PutTicket(ctx, &kvtierpb.PutTicketRequest{ClientId: "gpu1", Node: "box"})
	if err != nil {
		t.Fatal(err)
	}
	staged := func(key string, stage uint64) *kvtierpb.PutStartResponse {
		t.Helper()
		ps, err := s.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "gpu1", Key: []byte(key), Size: 1024, HasChecksum: true, Crc32C: 7,
			PutTicket: tr.Ticket, Config: &kvtierpb.PutConfig{OnlyNode: "box", HolderTakes: true, Stage: stage}})
		if err != nil {
			t.Fatalf("PutStart %s: %v", key, err)
		}
		return ps
	}
	p := staged("k1", 42)
	if !p.Committed || p.DramSeq == 0 || len(p.DramRecords) != 1 || p.DramRecords[0].Stage != 42 || p.DramRecords[0].Seq != p.DramSeq {
		t.Fatalf("staged PutStart: committed %v, seq %d, records %v; want committed, its commit record carrying stage 42", p.Committed, p.DramSeq, p.DramRecords)
	}
	// No PutEnd follows; another put of the key finds it stored.
	if _, err := s.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "gpu2", Key: []byte("k1"), Size: 1024, HasChecksum: true, Crc32C: 7,
		Config: &kvtierpb.PutConfig{}}); kverr.CodeOf(kverr.FromGRPC(err)) != kverr.ObjectAlreadyExists {
		t.Fatalf("second put of a committed staged key: %v, want OBJECT_ALREADY_EXISTS", err)
	}
	if ok, err := m.Exist(ctx, "", "k1"); !ok || err != nil {
		t.Fatalf("Exist: %v %v", ok, err)
	}
	// Not acknowledged: a read waits, then refuses.
	t0 := time.Now()
	if _, err := m.GetReplicaList(ctx, "gpu3", "", "k1"); kverr.CodeOf(err) != kverr.ReplicaIsNotReady {
		t.Fatalf("read before the holder acknowledged: %v, want REPLICA_IS_NOT_READY", err)
	} else if d := time.Since(t0); d < 250*time.Millisecond {
		t.Fatalf("read refused after %v, before the bound", d)
	}
	// A read waiting when the acknowledgement comes gets the replica.
	got := make(chan error, 1)
	go func() {
		l, err := m.GetReplicaList(ctx, "gpu3", "", "k1")
		if err == nil && (len(l.Replicas) != 1 || l.Replicas[0].Offset != p.Replicas[0].Offset) {
			err = fmt.Errorf("replicas %v", l.Replicas)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("read answered before the acknowledgement: %v", err)
	default:
	}
	if err := m.AckDramRecords("box", p.DramOutbox, p.DramSeq); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("read after the acknowledgement: %v", err)
	}
	if _, err := m.GetReplicaList(ctx, "gpu3", "", "k1"); err != nil {
		t.Fatalf("second read: %v", err)
	}
	// A staged batch frame: one BatchPutStart commits each put, the
	// records (on the item with the highest seq) carry each one's stage.
	items := make([]*kvtierpb.PutStartRequest, 3)
	for i := range items {
		items[i] = &kvtierpb.PutStartRequest{Key: []byte(fmt.Sprintf("sb%d", i)), Size: 512, HasChecksum: true, Crc32C: 7,
			Config: &kvtierpb.PutConfig{HolderTakes: true, Stage: uint64(100 + i)}}
	}
	br, err := s.BatchPutStart(ctx, &kvtierpb.BatchPutStartRequest{ClientId: "gpu1", PutTicket: tr.Ticket, Items: items})
	if err != nil {
		t.Fatal(err)
	}
	var stages []uint64
	var last *kvtierpb.PutStartResult
	for i, g := range br.Results {
		if g.Code != 0 || !g.Committed {
			t.Fatalf("staged batch item %d: %v %s, committed %v", i, g.Code, g.Message, g.Committed)
		}
		for _, rec := range g.DramRecords {
			stages = append(stages, rec.Stage)
		}
		last = g
	}
	if fmt.Sprint(stages) != "[100 101 102]" {
		t.Fatalf("batch records carry stages %v, want [100 101 102]", stages)
	}
	if err := m.AckDramRecords("box", last.DramOutbox, last.DramSeq); err != nil {
		t.Fatal(err)
	}
	for i := range items {
		if _, err := m.GetReplicaList(ctx, "gpu3", "", fmt.Sprintf("sb%d", i)); err != nil {
			t.Fatalf("read sb%d after the acknowledgement: %v", i, err)
		}
	}
	// A stage without a ticket (a classic put) is not honoured; one
	// without a checksum is refused.
	ps, err := s.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "gpu2", Key: []byte("c1"), Size: 1024, HasChecksum: true, Crc32C: 7,
		Config: &kvtierpb.PutConfig{Stage: 9}})
	if err != nil || ps.Committed {
		t.Fatalf("classic put with a stage: committed %v, %v; want an ordinary put in flight", ps.GetCommitted(), err)
	}
	if _, err := s.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "gpu1", Key: []byte("k2"), Size: 1024,
		PutTicket: tr.Ticket, Config: &kvtierpb.PutConfig{OnlyNode: "box", Stage: 5}}); kverr.CodeOf(kverr.FromGRPC(err)) != kverr.InvalidParams {
		t.Fatalf("staged put without a checksum: %v, want INVALID_PARAMS", err)
	}
	// A node that keeps no records here: nothing would carry the stage,
	// so the put stays in flight for the node's PutEnd.
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box2", Endpoint: "box2:1"}); err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "box2", "box2/mem0", 1<<20)
	m.EnsureGrantKeys("box2", "inc-1")
	tr2, err := s.PutTicket(ctx, &kvtierpb.PutTicketRequest{ClientId: "gpu1", Node: "box2"})
	if err != nil {
		t.Fatal(err)
	}
	ps, err = s.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "gpu1", Key: []byte("k3"), Size: 1024, HasChecksum: true, Crc32C: 7,
		PutTicket: tr2.Ticket, Config: &kvtierpb.PutConfig{OnlyNode: "box2", Stage: 3}})
	if err != nil || ps.Committed {
		t.Fatalf("staged put on a node without records: committed %v, %v", ps.GetCommitted(), err)
	}
	if _, err := s.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "gpu1", Key: []byte("k3"), PutTicket: tr2.Ticket}); err != nil {
		t.Fatalf("its PutEnd: %v", err)
	}
	// A landing object whose node turned suspect is not waited for (a dead
	// node never acknowledges), and is waited for again once it is back.
	p4 := staged("k4", 43)
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true, Leaving: true}); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if _, err := m.GetReplicaList(ctx, "gpu3", "", "k4"); kverr.CodeOf(err) != kverr.ObjectNotFound || !strings.Contains(err.Error(), "suspect") {
		t.Fatalf("read of a landing object on a suspect node: %v, want OBJECT_NOT_FOUND naming it suspect", err)
	} else if d := time.Since(t0); d > 200*time.Millisecond {
		t.Fatalf("read of a landing object on a suspect node waited %v", d)
	}
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetReplicaList(ctx, "gpu3", "", "k4"); kverr.CodeOf(err) != kverr.ReplicaIsNotReady {
		t.Fatalf("read of a landing object after its node came back: %v, want REPLICA_IS_NOT_READY", err)
	}
	if err := m.AckDramRecords("box", p4.DramOutbox, p4.DramSeq); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetReplicaList(ctx, "gpu3", "", "k4"); err != nil {
		t.Fatalf("read after the acknowledgement: %v", err)
	}
}
