//go:build rdma

package transfer

import (
	"bytes"
	"net"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/rdma"
)

// rdmaServer returns a server engine with RDMA on (skipping with the reason
// where this host has no device), serving "seg" over RDMA and TCP, and a
// client engine with RDMA on.
func rdmaServer(t *testing.T, size int) (cli, srv *Engine, mem []byte, ep string) {
	t.Helper()
	if !rdma.Available() {
		t.Skipf("no RDMA device on this host: %s (needs a NIC or soft-RoCE: rdma link add rxe0 type rxe netdev IFACE)", rdma.Reason())
	}
	srv = newEngine(t, Config{RDMADevice: "auto", RDMAListen: "127.0.0.1:0", DisableSharedMemory: true})
	if on, why := srv.RDMAStatus(); !on {
		t.Fatalf("device present but RDMA off: %s", why)
	}
	mem = make([]byte, size)
	fillPattern(mem, 0)
	if err := srv.RegisterSegment("seg", mem); err != nil {
		t.Fatal(err)
	}
	a, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cli = newEngine(t, Config{RDMADevice: "auto", DisableSharedMemory: true})
	return cli, srv, mem, a.String()
}

func rdmaCases() []transportCase {
	return []transportCase{{name: "rdma", via: func(s Stats) uint64 { return s.RDMARequests },
		setup: func(t *testing.T, size int) (*Engine, *Engine, []byte, func(Request) Request) {
			cli, srv, mem, ep := rdmaServer(t, size)
			off := srv.Offer("seg")
			if off.RDMAAddr == "" || off.RDMAKey == 0 && off.RDMABase == 0 {
				t.Fatalf("RDMA on but no offer for seg: %+v", off)
			}
			return cli, srv, mem, func(r Request) Request {
				r.Endpoint, r.Offer = ep, off
				if r.Segment != "seg" { // an unknown segment has no region: TCP answers
					r.Offer = SegmentOffer{}
				}
				return r
			}
		}}}
}

// TestRDMAStatus: the engine reports why RDMA is off, or the device and
// side channel it uses, and the routes say the same.
func TestRDMAStatus(t *testing.T) {
	off := newEngine(t, Config{RDMADevice: "off"})
	if on, why := off.RDMAStatus(); on || why != "off (--rdma-device off)" {
		t.Fatalf("RDMAStatus with off = %v %q", on, why)
	}
	if slices.Contains(off.Routes(), "rdma") {
		t.Fatalf("routes %v with RDMA off", off.Routes())
	}
	e := newEngine(t, Config{})
	on, why := e.RDMAStatus()
	if !rdma.Available() {
		if on || why == "" {
			t.Fatalf("no device, RDMAStatus = %v %q", on, why)
		}
		t.Skipf("no RDMA device on this host: %s", why)
	}
	if !on || !slices.Contains(e.Routes(), "rdma") {
		t.Fatalf("device present: RDMAStatus %v %q, routes %v", on, why, e.Routes())
	}
	bad := newEngine(t, Config{RDMADevice: "no-such-device"})
	if on, why := bad.RDMAStatus(); on || why == "" {
		t.Fatalf("unknown device: RDMAStatus = %v %q", on, why)
	}
}

// TestRDMAFallbackToTCP: an offer whose side channel does not answer sends
// the request over TCP (counted as a fallback); an extent outside the
// region fails on the NIC and TCP answers with the serving side's verdict.
func TestRDMAFallbackToTCP(t *testing.T) {
	cli, srv, mem, ep := rdmaServer(t, 1<<20)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	off := srv.Offer("seg")
	bad := off
	bad.RDMAAddr = dead
	src := randBytes(9, 4096)
	if err := do1(t, cli, Request{Op: Write, Endpoint: ep, Segment: "seg", Offset: 100, Buf: src, Offer: bad}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem[100:100+4096], src) {
		t.Fatal("fallback write did not land")
	}
	if st := cli.Stats(); st.Fallbacks != 1 || st.TCPRequests != 1 {
		t.Fatalf("stats after fallback: %+v", st)
	}
	wantCode(t, do1(t, cli, Request{Op: Read, Endpoint: ep, Segment: "seg", Offset: 1 << 20, Buf: make([]byte, 10), Offer: off}), kverr.InvalidParams, "seg")
	// The QP broken by the remote access error is redialled.
	dst := make([]byte, 4096)
	if err := do1(t, cli, Request{Op: Read, Endpoint: ep, Segment: "seg", Offset: 100, Buf: dst, Offer: off}); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("read after a broken QP: %v", err)
	}
	if cli.Stats().RDMARequests == 0 {
		t.Fatal("no request went over RDMA")
	}
}

// TestRDMARevokedGrantsOverVerbs is TestRDMARevokedGrants' checks over a
// real device: the free table registered for remote READ only, read with
// real one-sided READs after the data.
func TestRDMARevokedGrantsOverVerbs(t *testing.T) {
	cli, srv, mem, ep := rdmaServer(t, 1<<20)
	checkRDMARevokedGrants(t, cli, srv, mem, ep)
}
