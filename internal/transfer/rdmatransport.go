package transfer

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"
	"unsafe"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// rdmaTransport is one-sided RDMA verbs (package rdma) over reliable-connected
// queue pairs. Serving side: every registered segment is an RDMA memory
// region (addSegment), offered to other nodes as (side-channel address,
// base address, rkey) through Offer; the side channel accepts queue-pair
// handshakes and keeps the connected QPs, which need nothing more from
// this side (the NIC serves one-sided READ and WRITE). Client side: a
// request whose Offer names an RDMA side channel is read or written with
// RDMA READ/WRITE on a QP to that peer (dialled on first use), straight
// from Buf when Buf lies in a region registered here (a segment or the
// client's local buffer), else through a registered bounce buffer.
//
// A peer whose handshake fails is not dialled again for rdmaRetry
// (requests go to the next route meanwhile); a QP that fails (the NIC
// reports an error completion, e.g. remote access outside the region,
// or a cancelled request flushed it) is closed and the request falls back
// to TCP, which then answers with the serving side's own verdict
// (INVALID_PARAMS for a range outside the segment, PERMISSION_DENIED ...).
type rdmaTransport struct {
	e      *Engine
	dev    verbsDevice
	name   string // device name
	bounce chan []byte

	checkOnce sync.Once
	checks    chan []byte // free-table check buffers (getCheckBuf); nil until made, or when they could not be

	mu sync.Mutex
	// guarded by mu:
	lis      verbsListener
	lisErr   error
	peers    map[string]*rdmaPeer // by side-channel address
	served   []verbsConn          // QPs peers connected to us
	bounceMR []verbsMR
	nBounce  int // bounce buffers made (at most maxBounce)
	regions  [][2]uint64
	closed   bool
}

// rdmaSeg is a segment's memory region, and its free table's.
type rdmaSeg struct {
	mu    sync.Mutex
	mr    verbsMR // guarded by mu: nil when not registered
	frees verbsMR // guarded by mu: the free table's (offer registers it), or nil
}

type rdmaPeer struct {
	addr string
	dial sync.Mutex // held while dialling: one dial at a time

	mu sync.Mutex
	// guarded by mu:
	conn  verbsConn // nil until dialled; reset when it fails
	until time.Time // no dial before this (after a failed one)
}

// rdmaRetry is how long a peer whose handshake failed is skipped.
const rdmaRetry = 5 * time.Second

// maxBounce bounds the registered bounce buffers (each SliceSize bytes).
const maxBounce = 16

// maxServedQPs bounds the queue pairs peers connected to this engine.
const maxServedQPs = 1024

// newRDMAOn is the RDMA transport of e over an opened device.
func newRDMAOn(e *Engine, dev verbsDevice, name string) *rdmaTransport {
	return &rdmaTransport{e: e, dev: dev, name: name, bounce: make(chan []byte, maxBounce), peers: map[string]*rdmaPeer{}}
}

func (t *rdmaTransport) Name() string { return "rdma" }

// reaches: the request names an RDMA offer for a memory segment, one
// that can be checked if its grant can be voided (a free table offered,
// or a grant placed outside any record stream), and the peer is not
// being skipped after a failed handshake.
func (t *rdmaTransport) reaches(r *reqState) bool {
	if r.req.Offer.RDMAAddr == "" || r.req.Bucket != 0 {
		return false
	}
	if r.req.Offer.RDMAFreesBase == 0 && len(r.req.Grant) > 0 {
		// A node from before free tables: a one-sided READ would read a
		// force-removed object back until the lease ends.
		if g, err := grant.Decode(r.req.Grant); err != nil || g.Outbox != 0 {
			return false
		}
	}
	p := t.peer(t.sideAddr(r))
	if p == nil {
		return false
	}
	p.mu.Lock() // never held across a dial: reaches does not block
	defer p.mu.Unlock()
	return p.conn != nil || time.Now().After(p.until)
}

// sideAddr is the request's side-channel address; an offer without a host
// (or with a wildcard one) means the host of the TCP endpoint.
func (t *rdmaTransport) sideAddr(r *reqState) string {
	a := r.req.Offer.RDMAAddr
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return a
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		ep, _ := splitEndpoint(r.req.Endpoint)
		if h, _, err := net.SplitHostPort(ep); err == nil {
			return net.JoinHostPort(h, port)
		}
	}
	return a
}

func (t *rdmaTransport) peer(addr string) *rdmaPeer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	p := t.peers[addr]
	if p == nil {
		p = &rdmaPeer{addr: addr}
		t.peers[addr] = p
	}
	return p
}

func (t *rdmaTransport) submit(ctx context.Context, rs []*reqState) {
	rs[0].b.async()
	for _, r := range rs {
		r.via = viaRDMA
		if !t.e.spawn(func() { r.sliceDone(t.do(ctx, r)) }) {
			r.sliceDone(errClosed())
		}
	}
}

// conn returns a connected QP to p, dialling one when there is none.
func (t *rdmaTransport) conn(ctx context.Context, p *rdmaPeer) (verbsConn, error) {
	p.dial.Lock()
	defer p.dial.Unlock()
	p.mu.Lock()
	c, until := p.conn, p.until
	p.mu.Unlock()
	if c != nil {
		return c, nil
	}
	if time.Now().Before(until) {
		return nil, kverr.New(kverr.TransferFail, "", "transfer: rdma peer %s skipped after a failed handshake", p.addr)
	}
	dctx, cancel := context.WithTimeout(ctx, t.e.cfg.DialTimeout)
	defer cancel()
	c, err := t.dev.Dial(dctx, p.addr)
	if err != nil {
		p.mu.Lock()
		p.until = time.Now().Add(rdmaRetry)
		p.mu.Unlock()
		return nil, kverr.New(kverr.TransferFail, "", "transfer: rdma dial %s: %v", p.addr, err)
	}
	// Under t.mu: close either sees this QP or has not started.
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		c.Close()
		return nil, errClosed()
	}
	p.mu.Lock()
	p.conn = c
	p.mu.Unlock()
	t.mu.Unlock()
	return c, nil
}

// broken drops p's QP c after a failed request (the next one redials) and
// closes it, which waits for the flush of its other requests.
func (t *rdmaTransport) broken(p *rdmaPeer, c verbsConn) {
	p.mu.Lock()
	if p.conn == c {
		p.conn = nil
	}
	p.mu.Unlock()
	c.Close()
}

// do moves r with one-sided READ or WRITE, in chunks of at most SliceSize.
func (t *rdmaTransport) do(ctx context.Context, r *reqState) error {
	req := &r.req
	e := t.e
	held := e.clisem.clamp(int64(len(req.Buf)))
	if err := e.clisem.acquire(ctx, held); err != nil {
		return fmt.Errorf("%w: %w", kverr.New(kverr.TransferFail, "", "transfer: %s segment %q on %s not started", req.Op, req.Segment, req.Endpoint), err)
	}
	defer e.clisem.release(held)
	p := t.peer(t.sideAddr(r))
	if p == nil {
		return errClosed()
	}
	c, err := t.conn(ctx, p)
	if err != nil {
		return err
	}
	// Posted work requests are not withdrawn when the caller's ctx ends
	// (as a TCP frame on the wire is not): cancelling one would break the
	// queue pair every other request to the peer shares. They complete or
	// fail within IOTimeout; Close breaks them at once.
	caller := ctx
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.IOTimeout)
	defer cancel()
	direct := t.registered(req.Buf)
	var bb []byte
	if !direct {
		bb = t.getBounce()
		defer t.putBounce(bb)
	}
	var cb []byte // where the free table's words land
	if req.Offer.RDMAFreesBase != 0 {
		if cb = t.getCheckBuf(); cb == nil {
			if bb == nil {
				bb = t.getBounce()
				defer t.putBounce(bb)
			}
			cb = bb[:freeHeaderLen]
		} else {
			defer t.putCheckBuf(cb)
		}
	}
	if req.Op == Write {
		if err := t.admitted(ctx, p, c, req, cb); err != nil {
			return err
		}
	}
	var crc uint32
	base := req.Offer.RDMABase + req.Offset
	for off := 0; off < len(req.Buf); {
		if err := caller.Err(); err != nil { // between work requests, a cancel stops the rest
			return fmt.Errorf("%w: %w", kverr.New(kverr.TransferFail, "", "transfer: %s segment %q offset %d on %s over rdma not finished", req.Op, req.Segment, req.Offset+uint64(off), p.addr), err)
		}
		n := min(len(req.Buf)-off, e.cfg.SliceSize)
		local := req.Buf[off : off+n]
		if !direct {
			local = bb[:n]
			if req.Op == Write {
				copy(local, req.Buf[off:off+n])
			}
		}
		if req.Op == Write && r.wantSum() {
			crc = crc32c.Update(crc, req.Buf[off:off+n])
		}
		var err error
		if req.Op == Write {
			err = c.Write(ctx, local, base+uint64(off), req.Offer.RDMAKey)
		} else {
			err = c.Read(ctx, local, base+uint64(off), req.Offer.RDMAKey)
		}
		if err != nil {
			t.broken(p, c)
			return kverr.New(kverr.TransferFail, "", "transfer: %s segment %q offset %d on %s over rdma: %v", req.Op, req.Segment, req.Offset+uint64(off), p.addr, err)
		}
		if req.Op == Read {
			if !direct {
				copy(req.Buf[off:off+n], local)
			}
			if r.wantSum() {
				crc = crc32c.Update(crc, req.Buf[off:off+n])
			}
		}
		off += n
	}
	if req.Op == Read {
		// After the data: a free published meanwhile voids what it read.
		if err := t.admitted(ctx, p, c, req, cb); err != nil {
			return err
		}
	}
	r.crc = crc
	return nil
}

// admitted checks req's grant against the serving engine's free table of
// the segment, as shared memory does (freeView.admits) and the data port
// would: one-sided transfers pass no data port, so without it a client
// holding a read lease would read a force-removed object back until the
// lease ends. A READ is checked after its data, a WRITE before. It reads
// the table's header, then the grant's slot, then the header's gen again
// (a sequence lock: a reset or key change between the reads is seen),
// each READ posted after the one before completed, into buf (registered).
// A request not admitted fails with errNotAdmitted and goes over TCP,
// where the data port decides; a failed READ breaks the queue pair.
func (t *rdmaTransport) admitted(ctx context.Context, p *rdmaPeer, c verbsConn, req *Request, buf []byte) error {
	o := &req.Offer
	if o.RDMAFreesBase == 0 {
		return nil // reaches: nothing to check (a grant outside any record stream)
	}
	read := func(b []byte, addr uint64) error {
		if err := c.Read(ctx, b, addr, o.RDMAFreesKey); err != nil {
			t.broken(p, c)
			return kverr.New(kverr.TransferFail, "", "transfer: %s segment %q on %s over rdma: reading its free table: %v", req.Op, req.Segment, p.addr, err)
		}
		return nil
	}
	if err := read(buf[:freeHeaderLen], o.RDMAFreesBase); err != nil {
		return err
	}
	snap, ok := decodeFreeHeader(buf[:freeHeaderLen])
	slotRead := false
	var rerr error
	if ok {
		ok, slotRead = snap.admits(req.Grant, time.Now().UnixNano(), func(i uint64) (uint64, bool) {
			w := buf[:8]
			if rerr = read(w, o.RDMAFreesBase+freeHeaderLen+8*i); rerr != nil {
				return 0, false
			}
			return binary.NativeEndian.Uint64(w), true
		})
	}
	if rerr != nil {
		return rerr
	}
	if ok && slotRead {
		w := buf[:8]
		if err := read(w, o.RDMAFreesBase+uint64(freeGenOffset)); err != nil {
			return err
		}
		ok = binary.NativeEndian.Uint64(w) == snap.gen
	}
	if !ok {
		t.e.stats.rdmaNotAdmitted.Add(1)
		return notAdmitted(req, "rdma")
	}
	return nil
}

// registered reports whether b lies inside a memory region of this engine.
func (t *rdmaTransport) registered(b []byte) bool {
	lo := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	hi := lo + uint64(len(b))
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, rg := range t.regions {
		if lo >= rg[0] && hi <= rg[1] {
			return true
		}
	}
	return false
}

// getBounce returns a registered buffer of SliceSize bytes, making one while
// fewer than maxBounce exist, else waiting for one.
func (t *rdmaTransport) getBounce() []byte {
	select {
	case b := <-t.bounce:
		return b
	default:
	}
	t.mu.Lock()
	if t.nBounce < maxBounce {
		t.nBounce++
		t.mu.Unlock()
		b := make([]byte, t.e.cfg.SliceSize)
		mr, err := t.dev.RegisterMemory(b)
		t.mu.Lock()
		if err == nil {
			t.bounceMR = append(t.bounceMR, mr)
			t.mu.Unlock()
			return b
		}
		t.nBounce--
	}
	t.mu.Unlock()
	return <-t.bounce
}

func (t *rdmaTransport) putBounce(b []byte) { t.bounce <- b }

// checkBufs is how many free-table reads may be under way at once, each
// landing in its own slice of one registered region.
const checkBufs = 256

// getCheckBuf returns a registered buffer of freeHeaderLen bytes for a
// free-table check, registering the region on first use; nil when it
// cannot be registered (the caller uses a bounce buffer).
func (t *rdmaTransport) getCheckBuf() []byte {
	t.checkOnce.Do(func() {
		region := make([]byte, checkBufs*freeHeaderLen)
		mr, err := t.dev.RegisterMemory(region)
		if err != nil {
			return
		}
		t.mu.Lock()
		t.bounceMR = append(t.bounceMR, mr)
		t.mu.Unlock()
		t.checks = make(chan []byte, checkBufs)
		for i := range checkBufs {
			t.checks <- region[i*freeHeaderLen : (i+1)*freeHeaderLen : (i+1)*freeHeaderLen]
		}
	})
	if t.checks == nil {
		return nil
	}
	return <-t.checks
}

func (t *rdmaTransport) putCheckBuf(b []byte) { t.checks <- b }

// addSegment registers s as a memory region. A failure leaves the segment
// without an RDMA offer (TCP still serves it).
func (t *rdmaTransport) addSegment(s *segment) {
	mr, err := t.dev.RegisterMemory(s.mem)
	if err != nil {
		return
	}
	s.rdma.mu.Lock()
	s.rdma.mr = mr
	s.rdma.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.regions = append(t.regions, [2]uint64{mr.Base(), mr.Base() + uint64(len(s.mem))})
}

// listen starts the side channel once, when the first segment is offered
// (a client's local buffer is registered but never offered: a pure caller
// listens on nothing).
func (t *rdmaTransport) listen() {
	addr := t.listenAddr()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lis != nil || t.lisErr != nil || t.closed {
		return
	}
	t.lis, t.lisErr = t.dev.Listen(addr)
	if t.lisErr == nil {
		t.e.wg.Add(1) // under t.mu, before close: ordered before Close's Wait
		go t.accept(t.lis)
	}
}

// listenAddr is where the side channel listens: Config.RDMAListen, else
// port 0 on the host of the engine's first data listener (the node's
// --data-addr), else on every interface.
func (t *rdmaTransport) listenAddr() string {
	if a := t.e.cfg.RDMAListen; a != "" {
		return a
	}
	t.e.mu.RLock()
	defer t.e.mu.RUnlock()
	if len(t.e.listeners) > 0 {
		if host, _, err := net.SplitHostPort(t.e.listeners[0].Addr().String()); err == nil {
			return net.JoinHostPort(host, "0")
		}
	}
	return ":0"
}

// dropSegment deregisters s's regions (after UnregisterSegment's wait).
func (t *rdmaTransport) dropSegment(s *segment) {
	s.rdma.mu.Lock()
	mr, frees := s.rdma.mr, s.rdma.frees
	s.rdma.mr, s.rdma.frees = nil, nil
	s.rdma.mu.Unlock()
	if frees != nil {
		frees.Close()
	}
	if mr == nil {
		return
	}
	t.mu.Lock()
	for i, rg := range t.regions {
		if rg[0] == mr.Base() {
			t.regions = append(t.regions[:i], t.regions[i+1:]...)
			break
		}
	}
	t.mu.Unlock()
	mr.Close()
}

// offer is s's RDMA offer: the side channel's address (a wildcard listener
// is announced with an empty host: the client takes the TCP endpoint's),
// the region's base and rkey, and its free table's region (registered
// here on first offer; none when s has no table or it cannot be
// registered: clients holding grants then use TCP).
func (t *rdmaTransport) offer(s *segment) SegmentOffer {
	s.rdma.mu.Lock()
	mr := s.rdma.mr
	if mr != nil && s.rdma.frees == nil && s.frees != nil {
		s.frees.mu.Lock()
		if s.frees.mem != nil {
			s.rdma.frees, _ = t.dev.RegisterReadOnly(s.frees.mem)
		}
		s.frees.mu.Unlock()
	}
	frees := s.rdma.frees
	s.rdma.mu.Unlock()
	if mr == nil {
		return SegmentOffer{}
	}
	t.listen()
	addr := t.addr()
	if addr == "" {
		return SegmentOffer{}
	}
	o := SegmentOffer{RDMAAddr: addr, RDMABase: mr.Base(), RDMAKey: mr.Key()}
	if frees != nil {
		o.RDMAFreesBase, o.RDMAFreesKey = frees.Base(), frees.Key()
	}
	return o
}

func (t *rdmaTransport) addr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lis == nil {
		return ""
	}
	a := t.lis.Addr().String()
	host, port, err := net.SplitHostPort(a)
	if ip := net.ParseIP(host); err == nil && (host == "" || (ip != nil && ip.IsUnspecified())) {
		return net.JoinHostPort("", port)
	}
	return a
}

// accept connects the QPs peers dial, keeping them until close.
func (t *rdmaTransport) accept(l verbsListener) {
	defer t.e.wg.Done()
	for {
		c, err := l.Accept(t.e.ctx) // the handshake is bounded (rdma.HandshakeTimeout)
		if t.e.ctx.Err() != nil {
			if c != nil {
				c.Close()
			}
			return
		}
		if err != nil {
			select { // a peer's failed handshake, or the listener is gone
			case <-t.e.closing:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			c.Close()
			return
		}
		t.served = append(t.served, c)
		var old verbsConn
		if len(t.served) > maxServedQPs {
			// A peer that redials (its QP broke) leaves its old one here,
			// which nothing tells us about: the oldest goes first.
			old = t.served[0]
			t.served = t.served[1:]
		}
		t.mu.Unlock()
		if old != nil {
			old.Close()
		}
	}
}

// close stops the side channel and closes every QP.
func (t *rdmaTransport) close() {
	t.mu.Lock()
	t.closed = true
	lis := t.lis
	conns := t.served
	t.served = nil
	peers := make([]*rdmaPeer, 0, len(t.peers))
	for _, p := range t.peers {
		peers = append(peers, p)
	}
	t.mu.Unlock()
	if lis != nil {
		lis.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	for _, p := range peers {
		p.mu.Lock()
		c := p.conn
		p.conn = nil
		p.mu.Unlock()
		if c != nil {
			c.Close()
		}
	}
}

// release frees the bounce buffers' regions and the device once no request
// can post any more (after Close's wait). Segment regions are the
// registry's: UnregisterSegment frees them, and the device's Close frees
// what is left.
func (t *rdmaTransport) release() {
	t.mu.Lock()
	mrs := t.bounceMR
	t.bounceMR = nil
	t.mu.Unlock()
	for _, m := range mrs {
		m.Close()
	}
	t.dev.Close()
}

// RDMAStatus says whether this engine offers and uses RDMA, and why not.
func (e *Engine) RDMAStatus() (on bool, detail string) {
	if e.rdma == nil {
		return false, e.rdmaOff
	}
	if a := e.rdma.addr(); a != "" {
		return true, fmt.Sprintf("on: device %s, side channel %s", e.rdma.name, a)
	}
	return true, fmt.Sprintf("on: device %s (no segment served yet)", e.rdma.name)
}

// RDMAAddr is the RDMA side channel's address ("" when RDMA is off or no
// segment is served yet).
func (e *Engine) RDMAAddr() string {
	if e.rdma == nil {
		return ""
	}
	return e.rdma.addr()
}

// The verbs the RDMA transport uses, as interfaces: package rdma behind
// the rdma build tag (rdma_on.go wraps it), and a fake fabric in tests
// (rdma_fake_test.go), so the transport's own logic (offers, bounce
// buffers, slicing, checksums, broken queue pairs, fallback) is tested on
// every build while the verbs themselves need a device.
type verbsDevice interface {
	RegisterMemory(buf []byte) (verbsMR, error)
	// RegisterReadOnly registers buf for peers' READs only.
	RegisterReadOnly(buf []byte) (verbsMR, error)
	Listen(addr string) (verbsListener, error)
	Dial(ctx context.Context, addr string) (verbsConn, error)
	Close() error
}

// verbsMR is a registered memory region: its first byte's address and rkey.
type verbsMR interface {
	Base() uint64
	Key() uint32
	Close() error
}

type verbsListener interface {
	Accept(ctx context.Context) (verbsConn, error)
	Addr() net.Addr
	Close() error
}

// verbsConn is a connected RC queue pair; local must lie in a region
// registered on the same device.
type verbsConn interface {
	Read(ctx context.Context, local []byte, remoteAddr uint64, rkey uint32) error
	Write(ctx context.Context, local []byte, remoteAddr uint64, rkey uint32) error
	Close() error
}
