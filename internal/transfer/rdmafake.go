package transfer

import (
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvtier/kvtier/kverr"
)

// FakeRDMA is a FAKE of RDMA verbs for tests (Config.FakeRDMA), named as
// such: the build machine has no RDMA device and its kernel no soft-RoCE,
// so the RDMA transport's own logic (offers, side-channel addresses,
// bounce buffers, slicing, checksums, broken queue pairs, fallback,
// deregistration) and the offers' path through the master are tested
// against it on every build; the verbs themselves are tested in rdma/ and,
// with -tags rdma on a host with a device, by the same contract
// (rdma_on_test.go). Engines given the same FakeRDMA reach each other. Like a NIC it addresses remote memory by (virtual
// address, rkey), refuses a local buffer outside the device's registered
// regions, and fails the queue pair (as IBV_WC_REM_ACCESS_ERR does) on a
// remote range outside the region.
type FakeRDMA struct {
	mu sync.Mutex
	// guarded by mu:
	regions   map[uint32]*fakeMR
	listeners map[string]*fakeListener
	nextKey   uint32
	nextPort  int
	ops       int
}

// NewFakeRDMA returns an empty fake fabric.
func NewFakeRDMA() *FakeRDMA {
	return &FakeRDMA{regions: map[uint32]*fakeMR{}, listeners: map[string]*fakeListener{}, nextPort: 40000}
}

// Ops is how many one-sided operations the fabric carried.
func (f *FakeRDMA) Ops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

type fakeDevice struct {
	f      *FakeRDMA
	closed bool
}

type fakeMR struct {
	f        *FakeRDMA
	dev      *fakeDevice
	base     uint64
	key      uint32
	mem      []byte
	readOnly bool // RegisterReadOnly: remote WRITEs fail the queue pair
}

func (m *fakeMR) Base() uint64 { return m.base }
func (m *fakeMR) Key() uint32  { return m.key }
func (m *fakeMR) Close() error {
	m.f.mu.Lock()
	delete(m.f.regions, m.key)
	m.f.mu.Unlock()
	return nil
}

func (d *fakeDevice) RegisterMemory(buf []byte) (verbsMR, error) { return d.register(buf, false) }

func (d *fakeDevice) RegisterReadOnly(buf []byte) (verbsMR, error) { return d.register(buf, true) }

func (d *fakeDevice) register(buf []byte, readOnly bool) (verbsMR, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	d.f.nextKey++
	m := &fakeMR{f: d.f, dev: d, base: uint64(uintptr(unsafe.Pointer(&buf[0]))), key: d.f.nextKey, mem: buf, readOnly: readOnly}
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
	f     *FakeRDMA
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
		if m.dev == c.dev && lo >= m.base && lo+uint64(len(local)) <= m.base+uint64(len(m.mem)) && (write || !m.readOnly) {
			inLocal = true
		}
	}
	if !inLocal {
		return kverr.New(kverr.InvalidParams, "", "fake rdma: local buffer not in a registered region")
	}
	m := f.regions[rkey]
	if m == nil || raddr < m.base || raddr+uint64(len(local)) > m.base+uint64(len(m.mem)) || (write && m.readOnly) {
		c.broken = true
		return kverr.New(kverr.TransferFail, "", "fake rdma: completion status remote access error")
	}
	f.ops++
	rem := m.mem[raddr-m.base : raddr-m.base+uint64(len(local))]
	switch {
	case write:
		copy(rem, local)
	case raddr%8 == 0 && len(local)%8 == 0 && len(local) <= 4096:
		// A NIC reads aligned 8-byte words whole: a free table's header
		// and slots, stored by the serving side with atomics meanwhile.
		for i := 0; i < len(local); i += 8 {
			w := (*atomic.Uint64)(unsafe.Pointer(&rem[i])).Load()
			binary.NativeEndian.PutUint64(local[i:], w)
		}
	default:
		copy(local, rem)
	}
	return nil
}
