package transfer

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"
	"unsafe"

	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// fakeRDMACase is the contract's RDMA row over the fake fabric.
func fakeRDMACase() transportCase {
	return transportCase{name: "rdma-fake", via: func(s Stats) uint64 { return s.RDMARequests },
		setup: func(t *testing.T, size int) (*Engine, *Engine, []byte, func(Request) Request) {
			cli, srv, mem, ep, _ := fakeRDMAPair(t, size)
			off := srv.Offer("seg")
			return cli, srv, mem, func(r Request) Request {
				r.Endpoint, r.Offer = ep, off
				if r.Segment != "seg" {
					r.Offer = SegmentOffer{}
				}
				return r
			}
		}}
}

// fakeRDMAPair is a server engine serving "seg" over TCP and (fake) RDMA,
// and a client engine with (fake) RDMA.
func fakeRDMAPair(t *testing.T, size int) (cli, srv *Engine, mem []byte, ep string, f *FakeRDMA) {
	t.Helper()
	f = NewFakeRDMA()
	srv = newEngine(t, Config{DisableSharedMemory: true, FakeRDMA: f})
	a, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mem = make([]byte, size)
	fillPattern(mem, 0)
	if err := srv.RegisterSegment("seg", mem); err != nil {
		t.Fatal(err)
	}
	cli = newEngine(t, Config{DisableSharedMemory: true, FakeRDMA: f})
	return cli, srv, mem, a.String(), f
}

// TestRDMATransportOverFakeFabric: the offer names the side channel on the
// data listener's host and the segment's region; the client's buffer goes
// straight to the NIC when it lies in a registered segment and through a
// bounded set of bounce buffers otherwise; an unreachable side channel
// falls back to TCP once and is then skipped; an unregistered segment's
// region is gone (the stale offer falls back to TCP, which says
// SEGMENT_NOT_FOUND).
func TestRDMATransportOverFakeFabric(t *testing.T) {
	cli, srv, mem, ep, f := fakeRDMAPair(t, 4<<20)
	off := srv.Offer("seg")
	if host, _, _ := net.SplitHostPort(off.RDMAAddr); host != "127.0.0.1" || off.RDMAKey == 0 || off.RDMABase != uint64(uintptr(unsafe.Pointer(&mem[0]))) {
		t.Fatalf("offer %+v", off)
	}
	if on, why := srv.RDMAStatus(); !on || srv.RDMAAddr() != off.RDMAAddr {
		t.Fatalf("status %v %q, addr %q", on, why, srv.RDMAAddr())
	}

	// Direct: the client's buffer is inside a segment registered there.
	own := make([]byte, 1<<20)
	if err := cli.RegisterSegment("cli-buf", own); err != nil {
		t.Fatal(err)
	}
	copy(own, randBytes(5, len(own)))
	if err := do1(t, cli, Request{Op: Write, Endpoint: ep, Segment: "seg", Offset: 4096, Buf: own[100 : 100+65536], Offer: off}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem[4096:4096+65536], own[100:100+65536]) {
		t.Fatal("direct write did not land")
	}
	if a := cli.RDMAAddr(); a != "" {
		t.Fatalf("a caller that offers nothing listens on %s", a)
	}
	if cli.rdma.nBounce != 0 {
		t.Fatalf("%d bounce buffers for a registered buffer", cli.rdma.nBounce)
	}
	// Bounced: many concurrent requests from plain Go memory use at most
	// maxBounce registered buffers.
	reqs := make([]Request, 40)
	for i := range reqs {
		reqs[i] = Request{Op: Read, Endpoint: ep, Segment: "seg", Offset: uint64(i) * 65536, Buf: make([]byte, 65536), Offer: off}
	}
	for i, err := range cli.Do(context.Background(), reqs) {
		if err != nil || !bytes.Equal(reqs[i].Buf, mem[i*65536:(i+1)*65536]) {
			t.Fatalf("bounced read %d: %v", i, err)
		}
	}
	if n := cli.rdma.nBounce; n == 0 || n > maxBounce {
		t.Fatalf("%d bounce buffers, want 1..%d", n, maxBounce)
	}
	if st := cli.Stats(); st.RDMARequests != 41 || st.TCPRequests != 0 {
		t.Fatalf("stats %+v", st)
	}

	// Unreachable side channel: TCP carries it, and the peer is skipped.
	bad := off
	bad.RDMAAddr = "127.0.0.1:1"
	for range 2 {
		if err := do1(t, cli, Request{Op: Read, Endpoint: ep, Segment: "seg", Buf: make([]byte, 10), Offer: bad}); err != nil {
			t.Fatal(err)
		}
	}
	if st := cli.Stats(); st.Fallbacks != 1 || st.TCPRequests != 2 {
		t.Fatalf("after an unreachable side channel: fallbacks %d, TCP %d", st.Fallbacks, st.TCPRequests)
	}

	// A host-less offer (wildcard listener) takes the endpoint's host.
	hostless := off
	_, port, _ := net.SplitHostPort(off.RDMAAddr)
	hostless.RDMAAddr = ":" + port
	if err := do1(t, cli, Request{Op: Read, Endpoint: ep, Segment: "seg", Buf: make([]byte, 10), Offer: hostless}); err != nil {
		t.Fatal(err)
	}
	if st := cli.Stats(); st.RDMARequests != 42 {
		t.Fatalf("host-less offer not used: %+v", st)
	}

	// Unregistered: the region is gone from the fabric.
	opsBefore := f.Ops()
	if err := srv.UnregisterSegment("seg"); err != nil {
		t.Fatal(err)
	}
	if (srv.Offer("seg") != SegmentOffer{}) {
		t.Fatal("offer of an unregistered segment")
	}
	wantCode(t, do1(t, cli, Request{Op: Read, Endpoint: ep, Segment: "seg", Buf: make([]byte, 10), Offer: off}), kverr.SegmentNotFound, "seg")
	if f.Ops() != opsBefore {
		t.Fatal("the NIC touched an unregistered segment")
	}
	// The queue pair broken by that access is replaced on the next request.
	if err := srv.RegisterSegment("seg2", mem); err != nil {
		t.Fatal(err)
	}
	off2 := srv.Offer("seg2")
	if err := do1(t, cli, Request{Op: Read, Endpoint: ep, Segment: "seg2", Buf: make([]byte, 10), Offer: off2}); err != nil {
		t.Fatal(err)
	}
	if st := cli.Stats(); st.RDMARequests != 43 {
		t.Fatalf("no new queue pair after a broken one: %+v", st)
	}
}

// TestRDMARevokedGrants: one-sided READs pass no data port, so each is
// checked against the serving engine's free table, read over RDMA after
// the data (a WRITE before): a grant revoked there goes over TCP, which
// refuses it, and nothing is written; live grants, the extent's next
// occupant and other extents stay on RDMA; keys replaced and a new
// master's records are followed; and an offer without a table (a node
// from before them) is not used for a grant that a free could void.
func TestRDMARevokedGrants(t *testing.T) {
	cli, srv, mem, ep, _ := fakeRDMAPair(t, 1<<20)
	off, rev, _ := checkRDMARevokedGrants(t, cli, srv, mem, ep)

	// The table is registered for peers' READs only: a WRITE to it fails
	// (as IBV_WC_REM_ACCESS_ERR does) and changes nothing.
	qp, err := cli.rdma.conn(context.Background(), cli.rdma.peer(off.RDMAAddr))
	if err != nil {
		t.Fatal(err)
	}
	rev.Revoke("seg", 4096, 11, time.Now().Add(time.Minute).UnixNano(), time.Now().UnixNano())
	srv.shm.frees.mu.RLock()
	table := srv.shm.frees.live["seg"]
	srv.shm.frees.mu.RUnlock()
	word := make([]byte, 8)
	if err := cli.RegisterSegment("cli-word", word); err != nil {
		t.Fatal(err)
	}
	if err := qp.Write(context.Background(), word, off.RDMAFreesBase+freeHeaderLen+8, off.RDMAFreesKey); err == nil {
		t.Fatal("a peer wrote the free table")
	}
	if table.slots[1].Load() != 11 {
		t.Fatal("the free table's slot was zeroed by a peer")
	}

	// Unregistered: both regions are gone from the fabric.
	fb := off.RDMAFreesKey
	if err := srv.UnregisterSegment("seg"); err != nil {
		t.Fatal(err)
	}
	f := cli.rdma.dev.(*fakeDevice).f
	f.mu.Lock()
	_, tableLeft := f.regions[fb]
	f.mu.Unlock()
	if tableLeft {
		t.Fatal("the free table's region outlived its segment")
	}
}

// checkRDMARevokedGrants is TestRDMARevokedGrants' part that holds over
// any verbs (the fake fabric, or a device: rdma_on_test.go): srv serves
// "seg" (mem) at ep, both engines with RDMA on. It leaves srv following
// records with keys replaced, and returns the offer, the revocations and
// the keyring in use.
func checkRDMARevokedGrants(t *testing.T, cli, srv *Engine, mem []byte, ep string) (SegmentOffer, *grant.Revocations, *grant.Keyring) {
	t.Helper()
	k := grant.NewKey(3)
	srv.SetGrantKeys(k)
	var ring grant.Keyring
	ring.Set(k)
	off := srv.Offer("seg")
	if off.RDMAFreesBase == 0 || off.RDMAFreesKey == 0 || off.RDMAFreesKey == off.RDMAKey {
		t.Fatalf("offer %+v names no free table", off)
	}
	exp := time.Now().Add(time.Minute)
	const outbox = 0xC0FFEE
	sign := func(r *grant.Keyring, at, seq uint64, op grant.Op) []byte {
		return r.Sign("seg", 0, at, 4096, op, grant.Session{}, exp, grant.Mark{Outbox: outbox, Seq: seq})
	}
	buf := make([]byte, 4096)
	read := func(at uint64, tok []byte) error {
		return do1(t, cli, Request{Op: Read, Endpoint: ep, Segment: "seg", Offset: at, Buf: buf, Grant: tok, Offer: off})
	}
	viaRDMA := func(what string, f func() error, wantErr string) bool {
		t.Helper()
		return viaOrRefused(t, cli, "RDMA", what, f, wantErr, func(s Stats) (uint64, uint64) { return s.RDMARequests, s.RDMANotAdmitted })
	}

	rev := srv.Revocations()
	stale := sign(&ring, 0, 3, grant.Read)
	if !viaRDMA("unfollowed", func() error { return read(0, stale) }, "") || !bytes.Equal(buf, mem[:4096]) {
		t.Fatal("a grant was not admitted (or read wrong bytes) before the node followed any records")
	}
	rev.Follow(outbox)
	until := time.Now().Add(time.Minute).UnixNano()
	rev.Revoke("seg", 0, 7, until, time.Now().UnixNano())
	rev.Applied(7)
	if viaRDMA("revoked read", func() error { return read(0, stale) }, "revoked") {
		t.Fatal("a revoked grant read over RDMA")
	}
	before := bytes.Clone(mem[:8192])
	junk := bytes.Repeat([]byte{0xEE}, 4096)
	if viaRDMA("revoked write", func() error {
		return do1(t, cli, Request{Op: Write, Endpoint: ep, Segment: "seg", Buf: junk, Grant: sign(&ring, 0, 3, grant.Write), Offer: off})
	}, "revoked") {
		t.Fatal("a revoked grant wrote over RDMA")
	}
	if !bytes.Equal(mem[:8192], before) {
		t.Fatal("a revoked write changed the segment")
	}
	for _, c := range []struct {
		what string
		at   uint64
		tok  []byte
		ok   bool
		err  string
	}{
		{"the extent's next occupant", 0, sign(&ring, 0, 7, grant.Read), true, ""},
		{"the next granule", 4096, sign(&ring, 4096, 3, grant.Read), true, ""},
		{"no grant", 4096, nil, false, "missing"},
		{"unknown key", 4096, grant.Sign(grant.NewKey(9), "seg", 0, 4096, 4096, grant.Read, grant.Session{}, exp), false, "unknown_key"},
		{"expired", 4096, ring.Sign("seg", 0, 4096, 4096, grant.Read, grant.Session{}, time.Now().Add(-time.Second), grant.Mark{Outbox: outbox, Seq: 3}), false, "expired"},
	} {
		if got := viaRDMA(c.what, func() error { return read(c.at, c.tok) }, c.err); got != c.ok {
			t.Fatalf("%s: over RDMA %v, want %v", c.what, got, c.ok)
		}
	}

	// Keys all replaced: the table is cleared and the old key's grants
	// are not admitted.
	k2 := grant.NewKey(4)
	srv.SetGrantKeys(k2)
	var ring2 grant.Keyring
	ring2.Set(k2)
	if !viaRDMA("new key", func() error { return read(0, sign(&ring2, 0, 0, grant.Read)) }, "") {
		t.Fatal("a grant of the new key was not admitted")
	}
	if viaRDMA("old key", func() error { return read(4096, sign(&ring, 4096, 3, grant.Read)) }, "unknown_key") {
		t.Fatal("a grant of a replaced key was admitted")
	}
	// Another master's records: entries reset, its grants admitted.
	rev.Revoke("seg", 8192, 9, until, time.Now().UnixNano())
	rev.Follow(outbox + 1)
	other := ring2.Sign("seg", 0, 8192, 4096, grant.Read, grant.Session{}, exp, grant.Mark{Outbox: outbox + 1, Seq: 0})
	if !viaRDMA("new master", func() error { return read(8192, other) }, "") {
		t.Fatal("a new master's grant was not admitted")
	}

	// An offer without a table: a grant with a record stream goes over
	// TCP without trying RDMA; one without (a master that keeps no
	// records) stays on RDMA.
	old := off
	old.RDMAFreesBase, old.RDMAFreesKey = 0, 0
	st := cli.Stats()
	if err := do1(t, cli, Request{Op: Read, Endpoint: ep, Segment: "seg", Offset: 8192, Buf: buf, Grant: other, Offer: old}); err != nil {
		t.Fatal(err)
	}
	if after := cli.Stats(); after.RDMARequests != st.RDMARequests || after.RDMANotAdmitted != st.RDMANotAdmitted || after.TCPRequests != st.TCPRequests+1 {
		t.Fatalf("a table-less offer: RDMA %d -> %d, not admitted %d -> %d, TCP %d -> %d", st.RDMARequests, after.RDMARequests,
			st.RDMANotAdmitted, after.RDMANotAdmitted, st.TCPRequests, after.TCPRequests)
	}
	unmarked := ring2.Sign("seg", 0, 8192, 4096, grant.Read, grant.Session{}, exp, grant.Mark{})
	st = cli.Stats()
	if err := do1(t, cli, Request{Op: Read, Endpoint: ep, Segment: "seg", Offset: 8192, Buf: buf, Grant: unmarked, Offer: old}); err != nil {
		t.Fatal(err)
	}
	if after := cli.Stats(); after.RDMARequests != st.RDMARequests+1 {
		t.Fatalf("a grant outside any record stream did not go over a table-less RDMA offer (RDMA %d -> %d)", st.RDMARequests, after.RDMARequests)
	}

	return off, rev, &ring2
}
