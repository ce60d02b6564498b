package transfer

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/internal/memcopy"
	"github.com/kvtier/kvtier/kverr"
)

// Listen serves the registered segments and sources on addr (port 0 picks a
// free port) until Close. It returns the address actually bound.
func (e *Engine) Listen(addr string) (net.Addr, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, kverr.New(kverr.TransferFail, "", "transfer: listen %s: %v", addr, err)
	}
	return e.serveListener(l)
}

// serveListener runs the accept loop on l (tests pass listeners that fail).
func (e *Engine) serveListener(l net.Listener) (net.Addr, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		l.Close()
		return nil, errClosed()
	}
	e.listeners = append(e.listeners, l)
	e.wg.Add(1) // under mu: ordered before Close's Wait
	e.mu.Unlock()
	go e.accept(l)
	return l.Addr(), nil
}

// listenerHealth records what is wrong with the accept loops now: a
// listener backing off after accept errors, or one that stopped.
type listenerHealth struct {
	mu       sync.Mutex
	problems map[string]string // guarded by mu: listener address → problem
}

func (h *listenerHealth) set(addr, problem string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if problem == "" {
		delete(h.problems, addr)
		return
	}
	if h.problems == nil {
		h.problems = map[string]string{}
	}
	h.problems[addr] = problem
}

// Health reports what is wrong with the serving side now, one line per
// listener in trouble: backing off after accept errors (descriptors
// exhausted) or stopped for good. Empty when every listener accepts.
func (e *Engine) Health() []string {
	e.lhealth.mu.Lock()
	defer e.lhealth.mu.Unlock()
	out := make([]string, 0, len(e.lhealth.problems))
	for _, p := range e.lhealth.problems {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Accept back-off after temporary errors, as net/http's Server.Serve.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// accept runs l's accept loop. A temporary error (EMFILE, ENFILE,
// ECONNABORTED, ...) backs off and retries, doubling from 5 ms to 1 s, so
// running out of descriptors pauses the listener instead of ending it;
// the trouble shows in Health meanwhile. Any other error before Close
// stops the listener and Health says so for good.
func (e *Engine) accept(l net.Listener) {
	defer e.wg.Done()
	addr := l.Addr().String()
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if e.acceptFailed("data listener", addr, err, &delay) {
				continue
			}
			return
		}
		e.acceptOK(addr, &delay)
		e.tuneConn(nc)
		e.growReceiveBuffer(nc)
		nc = e.serverConn(nc)
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			nc.Close()
			return
		}
		e.srvConns[nc] = struct{}{}
		e.wg.Add(1)
		e.mu.Unlock()
		e.stats.accepted.Add(1)
		go e.serveConn(nc)
	}
}

// acceptFailed handles a failed accept of the listener at addr: after a
// temporary error it waits out the back-off (delay, doubled) and reports
// true (accept again); after Close or a fatal error, false (Health keeps a
// fatal one).
func (e *Engine) acceptFailed(what, addr string, err error, delay *time.Duration) bool {
	select {
	case <-e.closing:
		return false
	default:
	}
	if errors.Is(err, net.ErrClosed) {
		return false // closed by Close
	}
	e.stats.acceptErrors.Add(1)
	if !temporary(err) {
		e.lhealth.set(addr, fmt.Sprintf("%s %s stopped: %v", what, addr, err))
		return false
	}
	*delay = min(max(2*(*delay), acceptBackoffMin), acceptBackoffMax)
	e.lhealth.set(addr, fmt.Sprintf("%s %s: accept failing (%v), retrying", what, addr, err))
	select {
	case <-time.After(*delay):
		return true
	case <-e.closing:
		return false
	}
}

// acceptOK clears a listener's trouble after a successful accept.
func (e *Engine) acceptOK(addr string, delay *time.Duration) {
	if *delay != 0 {
		*delay = 0
		e.lhealth.set(addr, "")
	}
}

// temporary reports an accept error worth retrying: a timeout, or an errno
// the kernel documents as transient for accept(2) (descriptor or memory
// exhaustion, a connection aborted before it was accepted).
func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
			syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM:
			return true
		}
	}
	return false
}

// srvConn is the per-connection state of the serving side.
type srvConn struct {
	e      *Engine
	nc     net.Conn
	in     frameReader // every read of the connection goes through it
	rh     [responseHeaderLen]byte
	bounce []byte    // readInto's chunk buffer, made on first use
	batch  *srvBatch // batch frames' reused state, made on first use
	put    *putState // direct-put frames' reused state, made on first use
}

func (e *Engine) serveConn(nc net.Conn) {
	defer e.wg.Done()
	defer func() {
		nc.Close()
		e.mu.Lock()
		delete(e.srvConns, nc)
		e.mu.Unlock()
	}()
	c := &srvConn{e: e, nc: nc, in: frameReader{nc: nc}}
	in := &c.in
	for {
		// An idle connection is closed after IdleTimeout (the caller
		// redials); a frame, once its first byte arrived, must finish within
		// IOTimeout, its head included: a peer that sends half a header
		// holds the connection no longer than that. One read usually
		// brings the frame's whole head (frameReader), and a pipelined
		// frame's is often buffered already.
		in.start()
		if in.buffered() == 0 {
			_ = nc.SetReadDeadline(time.Now().Add(e.cfg.IdleTimeout))
			if err := in.readSome(); err != nil {
				return
			}
			if in.buffered() == 0 {
				continue
			}
		}
		if in.buffered() < requestHeaderLen {
			_ = nc.SetReadDeadline(time.Now().Add(e.cfg.IOTimeout))
			if err := in.fill(requestHeaderLen); err != nil {
				return
			}
		}
		h, err := parseRequestHeader(in.take(requestHeaderLen))
		if err != nil {
			e.stats.malformed.Add(1)
			return
		}
		_ = nc.SetDeadline(time.Now().Add(e.cfg.IOTimeout))
		if h.op == opPut { // direct puts: the node places them (srvput.go)
			if err := c.servePut(h); err != nil {
				return
			}
			continue
		}
		if h.op.isBatch() { // many extents in one frame (srvbatch.go)
			if err := c.serveBatch(h); err != nil {
				return
			}
			continue
		}
		n := h.nameLen
		if h.grant { // version 2: the grant follows the name
			n += grant.Size
		}
		if err := in.fill(n); err != nil {
			return
		}
		head := in.take(n)
		name := head[:h.nameLen]
		var tok []byte
		if h.grant {
			tok = head[h.nameLen:]
		}
		if err := c.serveFrame(h, name, tok); err != nil {
			return
		}
	}
}

// dataRecvBuffer is the SO_RCVBUF of an accepted data connection (the
// kernel doubles it). A peer that sends by reference (splice.go) hands the
// socket the pages of its memory, charged a page each, and the receive
// buffer the kernel autotunes for copied data overflowed before it grew:
// segments dropped and sent again, and BBR (a common default) then paced
// the connection far below loopback's speed. 1 MiB spliced sends over
// loopback, a new connection each round, under BBR: 1.6-2.4 GB/s in one
// round of three, 8-12 in the others; with this buffer 8.5-12.3 in every
// round. Asked only where net.core.rmem_max grants it: a smaller explicit
// buffer would end autotuning below what it reaches (tcp_rmem's maximum).
const dataRecvBuffer = 4 << 20

// rmemMaxGrants reports whether net.core.rmem_max grants dataRecvBuffer
// (read once).
var rmemMaxGrants = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && n >= dataRecvBuffer
})

// growReceiveBuffer gives an accepted data connection dataRecvBuffer,
// unless Config.SocketBuffer sized it.
func (e *Engine) growReceiveBuffer(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok && e.cfg.SocketBuffer == 0 && rmemMaxGrants() {
		_ = tc.SetReadBuffer(dataRecvBuffer)
	}
}

// acquireBytes is acquire without allocating the name.
func (e *Engine) acquireBytes(name []byte) (*segment, ExtentSource) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if s, ok := e.segments[string(name)]; ok {
		s.refs.Add(1)
		return s, nil
	}
	return nil, e.sources[string(name)]
}

// serveFrame answers one request. A returned error is a connection failure;
// refusals are answered with an error frame and return nil.
func (c *srvConn) serveFrame(h reqHeader, name, tok []byte) error {
	e := c.e
	if h.op == opShm {
		return c.serveShm(h)
	}
	hold := e.holdFrame() // a revocation waits for the frame (grants.go)
	defer e.releaseFrame(&hold)
	// The grant is checked before the segment is even looked up: a refused
	// frame learns nothing about what this node serves.
	if err := e.checkGrant(&hold, tok, name, h.bucket, h.offset, h.length, h.op); err != nil {
		e.stats.servedFrames.Add(1)
		return c.refuse(h, err)
	}
	seg, src := e.acquireBytes(name)
	e.stats.servedFrames.Add(1) // after acquire: tests use it to know a frame holds its segment
	switch {
	case seg != nil:
		defer seg.refs.Done()
		if h.bucket != 0 {
			return c.refuse(h, kverr.New(kverr.InvalidParams, "", "segment %q: bucket %d given for a memory segment", name, h.bucket))
		}
		if err := checkRange(seg.name, uint64(len(seg.mem)), h.offset, h.length); err != nil {
			return c.refuse(h, err)
		}
		mem := seg.mem[h.offset : h.offset+h.length]
		if h.op == Write {
			if err := c.readInto(mem); err != nil {
				return err
			}
			e.stats.servedWritten.Add(h.length)
			return c.respond(h, nil)
		}
		e.stats.servedRead.Add(h.length)
		return c.respond(h, mem)
	case src != nil:
		if h.op == Write {
			return c.refuse(h, kverr.New(kverr.InvalidParams, "", "extent source %q is read-only", name))
		}
		held := e.srvsem.clamp(int64(h.length))
		if err := e.srvsem.acquire(e.ctx, held); err != nil {
			return err
		}
		defer e.srvsem.release(held)
		full := e.bufs.get(int(h.length))
		defer e.bufs.put(full)
		buf := full[:h.length]
		if err := src.ReadExtent(e.ctx, h.bucket, h.offset, buf); err != nil {
			return c.refuse(h, wrapSourceErr(string(name), h.bucket, h.offset, err))
		}
		e.stats.servedRead.Add(h.length)
		return c.respond(h, buf)
	}
	return c.refuse(h, kverr.New(kverr.SegmentNotFound, "", "segment %q not registered on this node", name))
}

// bufPool recycles the serving side's extent buffers. Buffers in use are
// bounded by srvsem; idle ones by limit, so steady-state extent reads
// allocate nothing and the pool never holds more than MaxInflightBytes.
type bufPool struct {
	limit int64 // max idle bytes
	min   int   // smallest buffer allocated (SliceSize)

	mu sync.Mutex
	// guarded by mu:
	free [][]byte
	idle int64
}

// get returns a buffer of at least n bytes.
func (p *bufPool) get(n int) []byte {
	p.mu.Lock()
	for i := len(p.free) - 1; i >= 0; i-- {
		if b := p.free[i]; cap(b) >= n {
			p.free = append(p.free[:i], p.free[i+1:]...)
			p.idle -= int64(cap(b))
			p.mu.Unlock()
			return b[:cap(b)]
		}
	}
	p.mu.Unlock()
	return make([]byte, max(n, p.min))
}

func (p *bufPool) put(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle+int64(cap(b)) > p.limit {
		return
	}
	p.free = append(p.free, b)
	p.idle += int64(cap(b))
}

// bounceSize is the chunk a large WRITE payload is read in before it is
// moved into segment memory: small enough to stay in the CPU's cache.
// Measured (kvtier bench --shm=false, 1 MiB puts, two alternations):
// 64 KiB chunks 1.32-1.33 GB/s from one caller against 0.97-1.16 reading
// straight into the segment; 128 KiB 1.20-1.24; 512 KiB 1.04-1.10.
const bounceSize = 64 << 10

// readInto fills mem from the connection. Payloads of two chunks or more
// are read a chunk at a time into a small cached buffer and moved into
// segment memory with non-temporal stores (internal/memcopy): the kernel's
// copy out of the socket then writes cached memory instead of first
// reading every line of the cold segment, and the segment's bytes do not
// evict what the server had cached.
func (c *srvConn) readInto(mem []byte) error {
	if len(mem) < 2*bounceSize {
		_, err := io.ReadFull(&c.in, mem)
		return err
	}
	if c.bounce == nil {
		c.bounce = make([]byte, bounceSize)
	}
	for len(mem) > 0 {
		n := min(len(mem), bounceSize)
		if _, err := io.ReadFull(&c.in, c.bounce[:n]); err != nil {
			return err
		}
		memcopy.NonTemporal(mem[:n], c.bounce[:n])
		mem = mem[n:]
	}
	return nil
}

// respond sends an OK response, with payload for READ, in one writev.
func (c *srvConn) respond(h reqHeader, payload []byte) error {
	putResponseHeader(c.rh[:], respHeader{op: h.op, id: h.id, payloadLen: uint64(len(payload))})
	if len(payload) == 0 {
		_, err := c.nc.Write(c.rh[:])
		return err
	}
	bufs := net.Buffers{c.rh[:], payload}
	_, err := bufs.WriteTo(c.nc)
	return err
}

// refuse answers h with an error frame, first consuming a WRITE's payload so
// the stream stays in step; the connection stays open.
func (c *srvConn) refuse(h reqHeader, cause error) error {
	c.e.stats.servedErrors.Add(1)
	return c.sendError(h, cause)
}

// sendError writes h's error frame (after a WRITE's payload).
func (c *srvConn) sendError(h reqHeader, cause error) error {
	if h.op == Write || h.op == opBatchWrite || h.op == opPut {
		if _, err := io.CopyN(io.Discard, &c.in, int64(h.length)); err != nil {
			return err
		}
	}
	msg := cause.Error()
	if ke, ok := cause.(*kverr.Error); ok { // the code travels in the status field
		msg = ke.Msg
		if ke.Key != "" {
			msg = fmt.Sprintf("key %q: %s", ke.Key, ke.Msg)
		}
	}
	if len(msg) > maxMessageLen {
		msg = msg[:maxMessageLen]
	}
	code := kverr.CodeOf(cause)
	if code == kverr.OK || code > 0xFFFF || code < 0 {
		code = kverr.InternalError
	}
	putResponseHeader(c.rh[:], respHeader{op: h.op, status: uint16(code), id: h.id, msgLen: len(msg)})
	bufs := net.Buffers{c.rh[:], []byte(msg)}
	if _, err := bufs.WriteTo(c.nc); err != nil {
		return fmt.Errorf("send refusal: %w", err)
	}
	return nil
}
