package master

import (
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/grant"
)

// TestGrantSigning: replicas handed out by PutStart and GetReplicaList
// (through the gRPC edge) carry grants that the node's keys (as handed in
// its heartbeat answer) verify for exactly the replica's extent and op, for
// the asking client, until the put deadline / lease end.
func TestGrantSigning(t *testing.T) {
	m, fc := newTest(t, Config{PutDiscardTimeout: 10 * time.Second, LeaseTTL: 2 * time.Second})
	s := &grpcServer{m: m}
	mountMem(t, m, "box", "box/mem0", 1<<20)
	m.EnsureGrantKeys("box", "inc-1")
	var node grant.Keyring
	node.Set(m.GrantKeysForBeat("box", "inc-1", true, nil, nil)...)

	ps, err := s.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "gpu1", Key: []byte("k"), Size: 4096})
	if err != nil {
		t.Fatal(err)
	}
	r := ps.Replicas[0]
	now := fc.Now()
	if err := node.Verify(r.Grant, r.Segment, 0, r.Offset, r.Length, grant.Write, now); err != nil {
		t.Fatalf("write grant: %v", err)
	}
	g, _ := grant.Decode(r.Grant)
	if g.Session != grant.SessionOf("gpu1") || !time.Unix(0, g.Expiry).Equal(now.Add(10*time.Second)) {
		t.Fatalf("write grant session/expiry %+v", g)
	}
	if err := node.Verify(r.Grant, r.Segment, 0, r.Offset+r.Length, 1, grant.Write, now); grant.ReasonOf(err) != grant.OutOfExtent {
		t.Fatalf("neighbouring byte: %v", err)
	}
	if err := node.Verify(r.Grant, r.Segment, 0, r.Offset, r.Length, grant.Write, now.Add(10*time.Second)); grant.ReasonOf(err) != grant.Expired {
		t.Fatalf("after the put deadline: %v", err)
	}
	if _, err := s.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "gpu1", Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	rl, err := s.GetReplicaList(ctx, &kvtierpb.KeyRequest{ClientId: "gpu2", Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	rr := rl.Replicas[0]
	if err := node.Verify(rr.Grant, rr.Segment, 0, rr.Offset, rr.Length, grant.Read, now); err != nil {
		t.Fatalf("read grant: %v", err)
	}
	if err := node.Verify(rr.Grant, rr.Segment, 0, rr.Offset, rr.Length, grant.Write, now); grant.ReasonOf(err) != grant.WrongOp {
		t.Fatalf("read grant used to write: %v", err)
	}
	if err := node.Verify(rr.Grant, rr.Segment, 0, rr.Offset, rr.Length, grant.Read, time.UnixMilli(rl.LeaseDeadlineMs).Add(time.Millisecond)); grant.ReasonOf(err) != grant.Expired {
		t.Fatalf("read grant after the lease: %v", err)
	}
	// Batch forms sign too.
	br, _ := s.BatchGetReplicaList(ctx, &kvtierpb.BatchKeysRequest{ClientId: "gpu2", Keys: [][]byte{[]byte("k")}})
	if len(br.Results[0].GetValue().GetReplicas()[0].GetGrant()) != grant.Size {
		t.Fatal("batch read carries no grant")
	}
	bp, _ := s.BatchPutStart(ctx, &kvtierpb.BatchPutStartRequest{ClientId: "gpu1", Items: []*kvtierpb.PutStartRequest{{ClientId: "gpu1", Key: []byte("k2"), Size: 4096}}})
	if len(bp.Results[0].GetReplicas()[0].GetGrant()) != grant.Size {
		t.Fatal("batch put carries no grant")
	}
}

// TestGrantKeyRotation: a rotated key is handed out beside the current one
// and used for signing only once the node reports holding it; the old one
// stays accepted as previous; a new incarnation gets fresh keys.
func TestGrantKeyRotation(t *testing.T) {
	m, fc := newTest(t, Config{GrantKeyRotation: time.Hour})
	ids := func(ks []grant.Key) []uint32 {
		var out []uint32
		for _, k := range ks {
			out = append(out, k.ID)
		}
		return out
	}
	k0 := m.GrantKeysForBeat("box", "inc-1", true, nil, nil)
	if len(k0) != 1 {
		t.Fatalf("first beat: %d keys", len(k0))
	}
	sign := func() uint32 {
		g, _ := grant.Decode(m.SignGrant(Replica{Type: Memory, Node: "box", Segment: "box/m", Length: 1}, grant.Session{}, grant.Read, fc.Now().Add(time.Second)))
		return g.KeyID
	}
	if sign() != k0[0].ID {
		t.Fatal("not signed with the current key")
	}
	fc.Advance(time.Hour)
	k1 := m.GrantKeysForBeat("box", "inc-1", true, ids(k0), nil)
	if len(k1) != 2 || k1[0].ID != k0[0].ID {
		t.Fatalf("rotation: keys %v", ids(k1))
	}
	if sign() != k0[0].ID {
		t.Fatal("signed with a key the node does not hold yet")
	}
	// The node reports holding the next key: the master signs with it; the
	// node's set (current and previous) is unchanged, so no keys are sent.
	if k2 := m.GrantKeysForBeat("box", "inc-1", true, ids(k1), nil); k2 != nil || sign() != k1[1].ID {
		t.Fatalf("after the node holds the next key: sent %v, signing with %d", ids(k2), sign())
	}
	// The next rotation hands out a third key; the previous one stays.
	fc.Advance(time.Hour)
	k2 := m.GrantKeysForBeat("box", "inc-1", true, ids(k1), nil)
	if len(k2) != 3 || k2[0].ID != k1[1].ID || k2[2].ID != k0[0].ID || sign() != k1[1].ID {
		t.Fatalf("second rotation: %v", ids(k2))
	}
	if m.GrantKeysForBeat("gpu-caller", "", false, nil, nil) != nil {
		t.Fatal("a pure caller got grant keys")
	}
	k3 := m.GrantKeysForBeat("box", "inc-2", true, nil, nil) // restarted
	if len(k3) != 1 || k3[0].ID == k2[0].ID || k3[0].Secret == k2[0].Secret || sign() != k3[0].ID {
		t.Fatalf("new incarnation kept old keys: %v", ids(k3))
	}
	if m.SignGrant(Replica{Type: NOF, Node: "box", Length: 1}, grant.Session{}, grant.Read, fc.Now()) != nil ||
		m.SignGrant(Replica{Type: Memory, Node: "nobody", Length: 1}, grant.Session{}, grant.Read, fc.Now()) != nil {
		t.Fatal("signed a NOF replica or a node without keys")
	}
}

// TestGrantRevokedByFree: a grant carries its place in the owner's DRAM
// record stream; the free record of its replica (a removal, then the
// extent reused by another put) comes after it and, applied to a
// grant.Revocations as the appliance does, voids it, while the new put's
// grant for the same extent is placed after the free and verifies.
func TestGrantRevokedByFree(t *testing.T) {
	// The records are applied by hand between calls: PutEnd and Remove do
	// not wait for their acknowledgement.
	m, fc := newTest(t, Config{PutDiscardTimeout: 10 * time.Second, LeaseTTL: 2 * time.Second, DramSyncTimeout: -1, RemoveSyncTimeout: -1})
	s := &grpcServer{m: m}
	mountMem(t, m, "box", "box/mem0", 4096)
	m.EnsureGrantKeys("box", "inc-1")
	var node grant.Keyring
	node.Set(m.GrantKeysForBeat("box", "inc-1", true, nil, nil)...)
	rev := grant.NewRevocations(0)
	var outbox, ack uint64
	apply := func() { // one TakeDramRecords round, as appliance/dramdir.go applies it
		t.Helper()
		ob, _, rs, err := m.TakeDramRecords(ctx, "box", outbox, ack, 0)
		if err != nil {
			t.Fatal(err)
		}
		outbox = ob
		rev.Follow(ob)
		for _, r := range rs {
			if r.Free {
				if r.Size != 4096 || r.GrantsExpire < fc.Now().Add(10*time.Second).UnixNano() {
					t.Fatalf("free record %+v: size or grant expiry", r)
				}
				rev.Revoke(r.Segment, r.Offset, r.Seq, r.GrantsExpire, fc.Now().UnixNano())
			}
			ack = r.Seq
		}
		rev.Applied(ack)
	}
	apply()
	check := func(tok []byte, op grant.Op) error {
		t.Helper()
		g, err := node.VerifyGrant(tok, "box/mem0", 0, 0, 4096, op, fc.Now())
		if err != nil {
			t.Fatal(err)
		}
		if g.Outbox != outbox {
			t.Fatalf("grant placed in outbox %x, master's is %x", g.Outbox, outbox)
		}
		return rev.Check(&g, "box/mem0", 10*time.Millisecond, nil)
	}
	put := func(key string) []byte {
		t.Helper()
		ps, err := s.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "gpu1", Key: []byte(key), Size: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "gpu1", Key: []byte(key)}); err != nil {
			t.Fatal(err)
		}
		return ps.Replicas[0].Grant
	}
	w1 := put("a")
	rl, err := s.GetReplicaList(ctx, &kvtierpb.KeyRequest{ClientId: "gpu2", Key: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	r1 := rl.Replicas[0].Grant
	apply()
	if err := check(w1, grant.Write); err != nil {
		t.Fatalf("live write grant: %v", err)
	}
	if _, err := s.Remove(ctx, &kvtierpb.KeyRequest{ClientId: "gpu1", Key: []byte("a"), Force: true}); err != nil {
		t.Fatal(err)
	}
	w2 := put("b") // the only 4 KiB: the same extent
	apply()
	if err := check(w1, grant.Write); grant.ReasonOf(err) != grant.Revoked {
		t.Fatalf("write grant of the removed object: %v", err)
	}
	if err := check(r1, grant.Read); grant.ReasonOf(err) != grant.Revoked {
		t.Fatalf("read grant of the removed object: %v", err)
	}
	if err := check(w2, grant.Write); err != nil {
		t.Fatalf("the new put's grant: %v", err)
	}
}

// TestUnsignedGrantsWhenOpen: a master without grants gives the node no
// keys but still places each MEMORY replica's read and write grant in its
// record stream, unsigned (key 0, zero MAC), so the node can revoke it.
func TestUnsignedGrantsWhenOpen(t *testing.T) {
	m, fc := newTest(t, Config{DisableGrants: true})
	s := &grpcServer{m: m}
	mountMem(t, m, "box", "box/mem0", 1<<20)
	m.EnsureGrantKeys("box", "inc-1")
	if keys := m.GrantKeysForBeat("box", "inc-1", true, nil, nil); keys != nil {
		t.Fatalf("open master handed out keys %v", keys)
	}
	ps, err := s.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "gpu1", Key: []byte("k"), Size: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "gpu1", Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	rl, err := s.GetReplicaList(ctx, &kvtierpb.KeyRequest{ClientId: "gpu2", Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		r    *kvtierpb.Replica
		op   grant.Op
	}{{"write", ps.Replicas[0], grant.Write}, {"read", rl.Replicas[0], grant.Read}} {
		g, err := grant.Decode(c.r.Grant)
		switch {
		case err != nil:
			t.Fatalf("%s grant: %v", c.what, err)
		case g.KeyID != 0 || g.MAC != [32]byte{} || g.Op != c.op:
			t.Fatalf("%s grant not unsigned: %+v", c.what, g)
		case g.Outbox != m.dram.id || g.Outbox == 0 || g.Offset != c.r.Offset || g.Length != c.r.Length || g.Expiry <= fc.Now().UnixNano():
			t.Fatalf("%s grant placed wrong: %+v (outbox %x)", c.what, g, m.dram.id)
		}
	}
	var node grant.Keyring
	node.Set(grant.NewKey(1))
	r := rl.Replicas[0]
	if err := node.Verify(r.Grant, r.Segment, 0, r.Offset, r.Length, grant.Read, fc.Now()); grant.ReasonOf(err) != grant.UnknownKey {
		t.Fatalf("a node holding keys took an unsigned grant: %v", err)
	}
}
