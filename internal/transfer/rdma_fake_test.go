package transfer

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"unsafe"

	"github.com/kvtier/kvtier/kverr"
)

// fakeFabric is a FAKE of RDMA verbs, named as such: this machine has no
// RDMA device and its kernel no soft-RoCE, so the RDMA transport's own
// logic (offers, side-channel addresses, bounce buffers, slicing,
// checksums, broken queue pairs, fallback, deregistration) is tested
// against it, on every build; the verbs themselves are tested in rdma/ and,
// with -tags rdma on a host with a device, by the same contract
// (rdma_on_test.go). Like a NIC it addresses remote memory by (virtual
// address, rkey), refuses a local buffer outside the device's registered
// regions, and fails the queue pair (as IBV_WC_REM_ACCESS_ERR does) on a
// remote range outside the region.
type fakeFabric struct {
	mu sync.Mutex
	// guarded by mu:
	regions   map[uint32]*fakeMR
	listeners map[string]*fakeListener
	nextKey   uint32
	nextPort  int
	ops       int
}

func newFakeFabric() *fakeFabric {
	return &fakeFabric{regions: map[uint32]*fakeMR{}, listeners: map[string]*fakeListener{}, nextPort: 40000}
}

// withFakeRDMA turns RDMA on in e over the fabric (before any segment is
// registered, as New would with a device).
func withFakeRDMA(e *Engine, f *fakeFabric) {
	e.rdma = newRDMAOn(e, &fakeDevice{f: f}, "fake0")
	e.routes = e.buildRoutes()
}

type fakeDevice struct {
	f      *fakeFabric
	closed bool
}

type fakeMR struct {
	f    *fakeFabric
	dev  *fakeDevice
	base uint64
	key  uint32
	mem  []byte
}

func (m *fakeMR) Base() uint64 { return m.base }
func (m *fakeMR) Key() uint32  { return m.key }
func (m *fakeMR) Close() error {
	m.f.mu.Lock()
	delete(m.f.regions, m.key)
	m.f.mu.Unlock()
	return nil
}

func (d *fakeDevice) RegisterMemory(buf []byte) (verbsMR, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	d.f.nextKey++
	m := &fakeMR{f: d.f, dev: d, base: uint64(uintptr(unsafe.Pointer(&buf[0]))), key: d.f.nextKey, mem: buf}
	d.f.regions[m.key] = m
	return m, nil
}

func (d *fakeDevice) Listen(addr string) (verbsListener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	d.f.nextPort++
	if host == "" {
		host = "0.0.0.0"
	}
	l := &fakeListener{f: d.f, addr: &net.TCPAddr{IP: net.ParseIP(host), Port: d.f.nextPort}, conns: make(chan verbsConn, 64), done: make(chan struct{})}
	d.f.listeners[strconv.Itoa(d.f.nextPort)] = l
	return l, nil
}

func (d *fakeDevice) Dial(ctx context.Context, addr string) (verbsConn, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d.f.mu.Lock()
	l := d.f.listeners[port]
	d.f.mu.Unlock()
	if l == nil {
		return nil, kverr.New(kverr.TransferFail, "", "fake rdma: dial %s: connection refused", addr)
	}
	l.conns <- &fakeConn{dev: d} // the serving side's end
	return &fakeConn{dev: d}, nil
}

func (d *fakeDevice) Close() error { d.closed = true; return nil }

type fakeListener struct {
	f     *fakeFabric
	addr  *net.TCPAddr
	conns chan verbsConn
	once  sync.Once
	done  chan struct{}
}

func (l *fakeListener) Accept(ctx context.Context) (verbsConn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *fakeListener) Addr() net.Addr { return l.addr }
func (l *fakeListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.f.mu.Lock()
		delete(l.f.listeners, strconv.Itoa(l.addr.Port))
		l.f.mu.Unlock()
	})
	return nil
}

type fakeConn struct {
	dev    *fakeDevice
	mu     sync.Mutex
	broken bool
}

func (c *fakeConn) Read(ctx context.Context, local []byte, raddr uint64, rkey uint32) error {
	return c.op(false, local, raddr, rkey)
}
func (c *fakeConn) Write(ctx context.Context, local []byte, raddr uint64, rkey uint32) error {
	return c.op(true, local, raddr, rkey)
}
func (c *fakeConn) Close() error { return nil }

func (c *fakeConn) op(write bool, local []byte, raddr uint64, rkey uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken {
		return kverr.New(kverr.TransferFail, "", "fake rdma: queue pair in error state")
	}
	f := c.dev.f
	f.mu.Lock()
	defer f.mu.Unlock()
	lo := uint64(uintptr(unsafe.Pointer(&local[0])))
	inLocal := false
	for _, m := range f.regions {
		if m.dev == c.dev && lo >= m.base && lo+uint64(len(local)) <= m.base+uint64(len(m.mem)) {
			inLocal = true
		}
	}
	if !inLocal {
		return kverr.New(kverr.InvalidParams, "", "fake rdma: local buffer not in a registered region")
	}
	m := f.regions[rkey]
	if m == nil || raddr < m.base || raddr+uint64(len(local)) > m.base+uint64(len(m.mem)) {
		c.broken = true
		return kverr.New(kverr.TransferFail, "", "fake rdma: completion status remote access error")
	}
	f.ops++
	rem := m.mem[raddr-m.base : raddr-m.base+uint64(len(local))]
	if write {
		copy(rem, local)
	} else {
		copy(local, rem)
	}
	return nil
}

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
func fakeRDMAPair(t *testing.T, size int) (cli, srv *Engine, mem []byte, ep string, f *fakeFabric) {
	t.Helper()
	f = newFakeFabric()
	srv = newEngine(t, Config{DisableSharedMemory: true})
	withFakeRDMA(srv, f)
	a, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mem = make([]byte, size)
	fillPattern(mem, 0)
	if err := srv.RegisterSegment("seg", mem); err != nil {
		t.Fatal(err)
	}
	cli = newEngine(t, Config{DisableSharedMemory: true})
	withFakeRDMA(cli, f)
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
	opsBefore := f.ops
	if err := srv.UnregisterSegment("seg"); err != nil {
		t.Fatal(err)
	}
	if (srv.Offer("seg") != SegmentOffer{}) {
		t.Fatal("offer of an unregistered segment")
	}
	wantCode(t, do1(t, cli, Request{Op: Read, Endpoint: ep, Segment: "seg", Buf: make([]byte, 10), Offer: off}), kverr.SegmentNotFound, "seg")
	if f.ops != opsBefore {
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
