package transfer

import (
	"bytes"
	"context"
	"net"
	"testing"
	"unsafe"

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
