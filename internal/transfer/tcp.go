package transfer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// tcpTransport carries requests to peers over framed TCP. Each peer has
// ConnsPerPeer lanes; a lane owns one connection (dialled lazily, redialled
// after a failure) and writes the frames handed to it. Callers also write
// frames themselves on any idle connection of the peer (peer.trySend). Up
// to PipelineDepth frames are outstanding per connection; their responses
// are read in order, straight into the callers' buffers, by whoever holds
// the connection's reading role (readRole): a Do caller waiting for the
// frame it sent itself, else the connection's receive goroutine.
type tcpTransport struct {
	e *Engine

	mu sync.RWMutex
	// guarded by mu:
	peers  map[string]*peer
	conns  map[*clientConn]struct{}
	closed bool
}

func newTCPTransport(e *Engine) *tcpTransport {
	return &tcpTransport{e: e, peers: map[string]*peer{}, conns: map[*clientConn]struct{}{}}
}

func (t *tcpTransport) Name() string { return "tcp" }

// reaches: every endpoint but the in-memory network's (an empty one fails
// in peer with INVALID_PARAMS).
func (t *tcpTransport) reaches(r *reqState) bool { return !isMemEndpoint(r.req.Endpoint) }

// submit cuts rs into frames (batch frames for a Submit's small requests
// to one peer, tcpbatch.go) and sends them.
func (t *tcpTransport) submit(ctx context.Context, rs []*reqState) {
	var remote []*slice
	var batch []*reqState // requests that may share batch frames
	for _, r := range rs {
		r.via = viaTCP
		if t.e.batchable(r) {
			batch = append(batch, r)
			continue
		}
		remote = t.slices(r, remote)
	}
	if len(batch) > 0 {
		remote = t.batches(batch, remote)
	}
	if len(remote) > 0 {
		// Slices may complete as soon as they are handed over.
		rs[0].b.async()
		t.dispatchFast(ctx, remote)
	}
}

// connCount is the open connections to peers.
func (t *tcpTransport) connCount() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.conns)
}

// close fails every connection (their queued frames fail with "engine
// closed"); lanes end with the engine's closing channel.
func (t *tcpTransport) close() {
	t.mu.Lock()
	t.closed = true
	clis := make([]*clientConn, 0, len(t.conns))
	for c := range t.conns {
		clis = append(clis, c)
	}
	t.mu.Unlock()
	for _, c := range clis {
		c.fail(errClosed())
	}
}

// slice is one frame's worth of a request.
type slice struct {
	r       *reqState
	idx     int // slice number within the request
	op      Op
	name    string
	bucket  uint64
	off     uint64
	buf     []byte
	id      uint64
	held    int64 // bytes held in the client semaphore
	retried bool  // already retried once after a connection failure
	// selfRead: the Do caller that sends this slice from its own goroutine
	// reads its response too (clientConn.readFor); set only for that send
	selfRead bool
	// oldPeer: retried a second time, its connection killed by another
	// slice's batch frame to a peer that predates them (connFailed)
	oldPeer bool
	done    atomic.Bool
	// A batch frame (op 4 or 5, tcpbatch.go) carries ext, whole requests
	// of one Submit to one peer, n payload bytes in all; buf is nil and r
	// is ext[0]'s (for the endpoint).
	ext []*slice
	n   int
}

// sumWrite records the CRC32C of a WRITE slice's bytes for its request's
// Sum. It runs just before the slice is sent, so the send's copy reads
// bytes the checksum brought into cache (one pass over memory, not two),
// and before the frame is queued, so the response that completes the
// request comes after it. A slice sent again elsewhere sums again, alike.
func (s *slice) sumWrite() {
	crc := crc32c.Checksum(s.buf)
	if s.r.crcs != nil {
		s.r.crcs[s.idx] = crc
	} else {
		s.r.crc = crc
	}
}

// bytes is the payload the frame carries.
func (s *slice) bytes() int {
	if s.ext != nil {
		return s.n
	}
	return len(s.buf)
}

// finish completes s exactly once.
func (s *slice) finish(e *Engine, err error) {
	if !s.done.CompareAndSwap(false, true) {
		return
	}
	if s.held > 0 {
		e.clisem.release(s.held)
	}
	if s.ext != nil {
		for _, x := range s.ext {
			x.finish(e, err)
		}
		return
	}
	s.r.sliceDone(err)
}

// dispatchFast sends slices from the calling goroutine, or hands them to
// idle lanes, while that needs no waiting (the common case: it saves
// goroutine hand-offs per request); the rest goes to a dispatch goroutine.
func (t *tcpTransport) dispatchFast(ctx context.Context, ss []*slice) {
	if len(ss) == 0 {
		return
	}
	// The first slice may be a large WRITE written from this goroutine
	// (one hand-off less for the common one-slice request); the others are
	// handed out first so they progress meanwhile.
	if len(ss) > 1 {
		t.dispatchFrom(ctx, ss[1:], false)
	}
	t.dispatchFrom(ctx, ss[:1], true)
}

func (t *tcpTransport) dispatchFrom(ctx context.Context, ss []*slice, bigInline bool) {
	e := t.e
	for i, s := range ss {
		p, err := t.peer(s.r.req.Endpoint)
		if err != nil {
			s.finish(e, err)
			continue
		}
		held := e.clisem.clamp(int64(s.bytes()))
		if !e.clisem.tryAcquire(held) {
			t.dispatchAsync(ctx, ss[i:])
			return
		}
		s.held = held
		s.selfRead = bigInline && s.r.selfRead
		if p.trySend(s, bigInline, e.cfg.ConnsPerPeer) {
			continue
		}
		s.selfRead = false
		select {
		case p.work <- s:
		default:
			e.clisem.release(held)
			s.held = 0
			t.dispatchAsync(ctx, ss[i:])
			return
		}
	}
}

// splitReadMin is the smallest segment READ that slices cuts in two
// halves when it would travel as one frame (up to SliceSize) and the peer
// has two connections with nothing outstanding: the halves go over both,
// so the serving side's two connection goroutines copy them out of
// segment memory at once (the copy of bytes nobody touched lately, which
// cost the server 3.6 x the copy of a buffer in its cache) and the caller
// checksums them at once. Busy connections (concurrent callers, who keep
// every core busy anyway) get whole frames, as packGroup gives a lone
// caller's batch every connection and concurrent callers one each.
// BenchmarkClientPutGet get-tcp 1 MiB, session 10, alternated: always
// cut, one caller 0.83-0.93 x raw TCP against 0.75-0.78, four callers
// 0.73-0.75 against 0.72-0.80 (p50 956-1040 µs against 758-979); cut
// only while two connections are idle (this), one caller 0.75-0.95
// against 0.73-0.82, four callers 0.70-0.76 against 0.71-0.77 (p50
// 863-890 against 945-1031). Larger reads are cut by SliceSize alone (16
// MiB in 512 KiB frames measured no better).
const splitReadMin = 512 << 10

// idlePeer reports whether the peer at endpoint has two connections with
// nothing outstanding (connections not dialled yet count).
func (t *tcpTransport) idlePeer(endpoint string) bool {
	p, err := t.peer(endpoint)
	return err == nil && p.freeConns(t.e.cfg.ConnsPerPeer) >= 2
}

// slices cuts r into frames of at most SliceSize and appends them to out
// (a segment READ of splitReadMin up to SliceSize in two halves).
// Extent-source reads (Bucket != 0) are never cut, so the source sees whole
// extents (and can verify their checksums).
func (t *tcpTransport) slices(r *reqState, out []*slice) []*slice {
	req := &r.req
	n := len(req.Buf)
	size := t.e.cfg.SliceSize
	if req.Op == Read && req.Bucket == 0 && n >= splitReadMin && n <= size && t.idlePeer(req.Endpoint) {
		size = (n/2 + 4095) &^ 4095 // page-aligned halves
	}
	if req.Bucket != 0 {
		size = MaxFrameLength
		if n > size {
			r.sliceDone(kverr.New(kverr.InvalidParams, "", "transfer: extent read of %d bytes from %q exceeds the %d-byte frame limit", n, req.Segment, MaxFrameLength))
			return out
		}
	}
	cnt := (n + size - 1) / size
	r.left.Store(int32(cnt))
	if cnt > 1 && r.wantSum() {
		r.crcs, r.sliceLen = make([]uint32, cnt), size
	}
	for i := range cnt {
		lo := i * size
		hi := min(lo+size, n)
		out = append(out, &slice{r: r, idx: i, op: req.Op, name: req.Segment, bucket: req.Bucket, off: req.Offset + uint64(lo), buf: req.Buf[lo:hi:hi]})
	}
	return out
}

func (t *tcpTransport) dispatchAsync(ctx context.Context, ss []*slice) {
	if !t.e.spawn(func() { t.dispatch(ctx, ss) }) {
		for _, s := range ss {
			s.finish(t.e, errClosed())
		}
	}
}

// dispatch hands slices to their peers' lanes, bounded by MaxInflightBytes.
func (t *tcpTransport) dispatch(ctx context.Context, ss []*slice) {
	e := t.e
	for i, s := range ss {
		p, err := t.peer(s.r.req.Endpoint)
		if err != nil && kverr.Is(err, kverr.InvalidParams) {
			s.finish(e, err) // this slice's endpoint is bad, not the others'
			continue
		}
		if err == nil {
			held := e.clisem.clamp(int64(s.bytes()))
			if aerr := e.clisem.acquire(ctx, held); aerr != nil {
				err = notStarted(s, aerr)
			} else {
				s.held = held
				select {
				case p.work <- s:
					continue
				case <-ctx.Done():
					err = notStarted(s, ctx.Err())
				case <-e.closing:
					err = errClosed()
				}
			}
		}
		for _, rest := range ss[i:] {
			rest.finish(e, err)
		}
		return
	}
}

func notStarted(s *slice, cause error) error {
	return fmt.Errorf("%w: %w", kverr.New(kverr.TransferFail, "", "transfer: %s segment %q on %s not started", s.op, s.name, s.r.req.Endpoint), cause)
}

// freeConns is how many of the peer's maxConns connections have nothing
// outstanding (connections not dialled yet count as free).
func (p *peer) freeConns(maxConns int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	busy := 0
	for _, c := range p.conns {
		if len(c.slots) > 0 {
			busy++
		}
	}
	return max(maxConns-busy, 0)
}

// peer is the set of lanes to one endpoint.
type peer struct {
	addr string
	work chan *slice // unbuffered: a slice is handed over only to a lane

	mu sync.Mutex
	// guarded by mu:
	conns []*clientConn // live connections, oldest first

	batchOK      atomic.Bool  // the peer has answered a batch frame
	noBatchUntil atomic.Int64 // unix ns: until then, no batch frames (peer predates them)
}

// inlineWriteMax is the largest WRITE frame a caller sends from its own
// goroutine, except for the first frame of a Submit; larger ones go through
// a lane so Submit does not block long on the socket.
const inlineWriteMax = 64 << 10

// trySend sends s from the calling goroutine, saving the hand-off to a
// lane (batch frames whatever their size: their caller waits for the
// whole batch anyway, and a hand-off per frame is what they exist to
// save). It prefers a connection with nothing outstanding (the oldest such,
// so sequential callers keep one connection and its buffers hot); while
// the peer has fewer than ConnsPerPeer connections it leaves a busy
// peer's slice to a lane, which dials another, so concurrent callers
// spread over connections (and the server's per-connection goroutines)
// instead of queueing behind each other on one; only with every
// connection open and busy does it pipeline onto one with a free slot.
// It never blocks.
func (p *peer) trySend(s *slice, big bool, maxConns int) bool {
	if s.op == Write && len(s.buf) > inlineWriteMax && !big {
		return false
	}
	var c *clientConn
	p.mu.Lock()
	for pass := 0; pass < 2 && c == nil; pass++ {
		if pass == 1 && len(p.conns) < maxConns {
			break
		}
		for _, x := range p.conns {
			if x.dead() || (pass == 0 && len(x.slots) > 0) || !x.wmu.TryLock() {
				continue
			}
			select {
			case x.slots <- struct{}{}:
				c = x
			default:
				x.wmu.Unlock()
				continue
			}
			break
		}
	}
	p.mu.Unlock()
	if c == nil {
		return false
	}
	c.sendLocked(s)
	c.wmu.Unlock()
	return true
}

// peer returns the lanes to addr, starting them on first use.
func (t *tcpTransport) peer(addr string) (*peer, error) {
	e := t.e
	t.mu.RLock()
	p, ok := t.peers[addr]
	closed := t.closed
	t.mu.RUnlock()
	if ok && !closed {
		return p, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errClosed()
	}
	if p, ok := t.peers[addr]; ok {
		return p, nil
	}
	if addr == "" {
		return nil, kverr.New(kverr.InvalidParams, "", "transfer: empty endpoint for a segment not registered here")
	}
	p = &peer{addr: addr, work: make(chan *slice)}
	t.peers[addr] = p
	for range e.cfg.ConnsPerPeer {
		e.wg.Add(1) // under t.mu, before close: ordered before Close's Wait
		go e.lane(p)
	}
	return p, nil
}

// lane owns one connection to p at a time.
func (e *Engine) lane(p *peer) {
	defer e.wg.Done()
	var c *clientConn
	defer func() {
		if c != nil {
			c.fail(errClosed())
		}
	}()
	for {
		var s *slice
		select {
		case s = <-p.work:
		case <-e.closing:
			return
		}
		if c != nil && c.dead() {
			c = nil
		}
		if c == nil {
			var err error
			if c, err = e.dial(p); err != nil {
				s.finish(e, err)
				continue
			}
		}
		c.send(s)
	}
}

func (e *Engine) dial(p *peer) (*clientConn, error) {
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.DialTimeout)
	defer cancel()
	nc, err := e.dialData(ctx, p.addr)
	if kverr.CodeOf(err) == kverr.TransferFail {
		return nil, err // the TLS handshake's own message
	}
	if err != nil {
		return nil, kverr.New(kverr.TransferFail, "", "transfer: dial %s: %v", p.addr, err)
	}
	e.stats.dialed.Add(1)
	c := &clientConn{
		e: e, p: p, nc: nc,
		slots:  make(chan struct{}, e.cfg.PipelineDepth),
		doneCh: make(chan struct{}),
		kick:   make(chan struct{}, 1),
	}
	c.cr.r = nc
	c.rd = bufio.NewReaderSize(&c.cr, receiveBufSize)
	t := e.tcp
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		nc.Close()
		return nil, errClosed()
	}
	t.conns[c] = struct{}{}
	e.wg.Add(1) // under t.mu, before close: ordered before Close's Wait
	t.mu.Unlock()
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	go c.receive()
	return c, nil
}

func (e *Engine) tuneConn(nc net.Conn) {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(true)
	if n := e.cfg.SocketBuffer; n > 0 {
		_ = tc.SetReadBuffer(n)
		_ = tc.SetWriteBuffer(n)
	}
}

// clientConn is one connection: its lane and inline callers write request
// frames, the holder of its reading role reads the responses. Every slice
// has exactly one owner at a time: the sender until the slice is queued,
// then the reader (readRole), which completes it or, when the connection
// dies, drains the queue.
type clientConn struct {
	e        *Engine
	p        *peer
	nc       net.Conn
	rd       *bufio.Reader // the reader's: a read takes every response that has arrived
	cr       capReader     // under rd: bounds what a header read takes (headerCap)
	slots    chan struct{} // pipeline depth: a token per queued slice
	doneCh   chan struct{} // closed by fail
	failOnce sync.Once
	err      error // set once, before doneCh closes

	kick chan struct{} // hands the reading role to the receive goroutine
	// hung: the connection failed by timing out (failIO): its peer stopped
	// answering within IOTimeout, and its slices are not retried on it.
	hung atomic.Bool

	mu sync.Mutex
	// guarded by mu:
	queue   []*slice // sent (or being sent), awaiting a response, in order
	drained bool     // set by the reader when it drains; nothing is queued after
	role    readRole // who reads responses from the connection now

	wmu sync.Mutex // held by whoever writes (the lane or an inline caller)
	// guarded by wmu:
	nextID uint64
	hdr    [requestHeaderLen + MaxNameLen + grant.Size]byte
	bhdr   []byte        // batch frame header and descriptor
	bnames []string      // batch frame name table
	bexts  []batchExtent // batch frame extents
	iov    net.Buffers   // batch frame writev
	// reader only (whoever holds the reading role):
	rhdr [responseHeaderLen]byte
	msg  [maxMessageLen]byte
}

func (c *clientConn) dead() bool {
	select {
	case <-c.doneCh:
		return true
	default:
		return false
	}
}

// failIO is fail after an I/O error cause. A cause past IOTimeout means
// the peer stopped answering (a stopped process, a host gone): the slices
// the connection held fail at once instead of being retried on that peer,
// so a reader with another replica turns to it after one IOTimeout, not
// two (a get of a replica whose box was stopped took a CLI's whole 60 s).
func (c *clientConn) failIO(cause, err error) {
	var ne net.Error
	if errors.As(cause, &ne) && ne.Timeout() {
		c.hung.Store(true)
	}
	c.fail(err)
}

// fail closes the connection; the caller reading it, else the receive
// goroutine, then drains the queue.
func (c *clientConn) fail(err error) {
	c.failOnce.Do(func() {
		c.err = err
		c.nc.Close()
		close(c.doneCh)
		c.e.tcp.mu.Lock()
		delete(c.e.tcp.conns, c)
		c.e.tcp.mu.Unlock()
		c.p.mu.Lock()
		for i, x := range c.p.conns {
			if x == c {
				c.p.conns = append(c.p.conns[:i], c.p.conns[i+1:]...)
				break
			}
		}
		c.p.mu.Unlock()
	})
}

// connFailed completes a slice whose connection broke. READ and WRITE are
// idempotent (one-sided, same range, same bytes), so the slice is retried
// once on a fresh connection: that hides pooled connections gone stale
// (peer restarted) from callers.
func (c *clientConn) connFailed(s *slice, err error) {
	e := c.e
	if c.hung.Load() || s.r.b.abandoned.Load() {
		// (abandoned: its caller stopped waiting, Engine.Do)
		s.finish(e, err) // its peer stopped answering: no second IOTimeout on it
		return
	}
	if s.ext != nil && s.retried && !c.p.batchOK.Load() {
		// A peer that never answered a batch frame and dropped this one
		// twice (once may be a pooled connection it closed while idle) may
		// predate them (it closes on an unknown op): send its extents one
		// frame each for a while.
		c.p.noBatchUntil.Store(time.Now().Add(noBatchBackoff).UnixNano())
		e.tcp.unbatch(s)
		return
	}
	if s.retried && s.ext == nil && !s.oldPeer && !c.p.batchOK.Load() && time.Now().UnixNano() < c.p.noBatchUntil.Load() {
		// A peer that predates batch frames closes the connection on
		// each, and takes along the single frames queued on it: while
		// the batches in flight to it drain, one of those may lose two
		// connections that way (TestBatchToOldPeer under -race, about
		// one run in 40). It gets a third.
		s.oldPeer = true
	} else if s.retried {
		s.finish(e, err)
		return
	}
	s.retried = true
	ok := e.spawn(func() {
		select {
		case c.p.work <- s:
		case <-e.closing:
			s.finish(e, errClosed())
		}
	})
	if !ok {
		s.finish(e, errClosed())
	}
}

// send sends s from the lane, waiting for a pipeline slot.
func (c *clientConn) send(s *slice) {
	select {
	case c.slots <- struct{}{}:
	case <-c.doneCh:
		c.connFailed(s, c.err)
		return
	}
	s.selfRead = false // a lane's slice is read by the receive goroutine
	c.wmu.Lock()
	c.sendLocked(s)
	c.wmu.Unlock()
}

// sendLocked writes s's frame; the caller holds wmu and a pipeline slot.
func (c *clientConn) sendLocked(s *slice) {
	if s.ext != nil {
		c.sendBatchLocked(s)
		return
	}
	c.nextID++
	s.id = c.nextID
	tok := s.r.req.Grant // every slice of a request carries its grant
	putRequestHeader(c.hdr[:], reqHeader{op: s.op, nameLen: len(s.name), id: s.id, bucket: s.bucket, offset: s.off, length: uint64(len(s.buf)), grant: tok != nil})
	n := requestHeaderLen + copy(c.hdr[requestHeaderLen:], s.name)
	n += copy(c.hdr[n:], tok)
	if s.op == Write && s.r.wantSum() {
		s.sumWrite()
	}
	if !c.enqueue(s) {
		return
	}
	// s now belongs to the reader (which may even retry it elsewhere):
	// below, only its immutable op and buf are read.
	var err error
	if s.op == Write {
		// One writev: header and payload straight from the caller's memory.
		bufs := net.Buffers{c.hdr[:n], s.buf}
		_, err = bufs.WriteTo(c.nc)
	} else {
		_, err = c.nc.Write(c.hdr[:n])
	}
	if err != nil {
		c.failIO(err, kverr.New(kverr.TransferFail, "", "transfer: send to %s: %v", c.p.addr, err))
	}
}

// enqueue queues s for the reader and arms the deadlines; false when the
// connection is dead (s is then retried elsewhere or failed).
func (c *clientConn) enqueue(s *slice) bool {
	c.mu.Lock()
	if c.drained {
		c.mu.Unlock()
		c.connFailed(s, c.err)
		return false
	}
	c.queue = append(c.queue, s)
	if len(c.queue) == 1 { // the reader's read now has a deadline
		_ = c.nc.SetReadDeadline(time.Now().Add(c.e.cfg.IOTimeout))
	}
	// A caller reads only a response it would otherwise wait for alone: a
	// frame behind others is left to the receive goroutine, which then
	// reads the whole run without hand-offs (50 callers on 4 connections,
	// 64 KiB gets, kvtier bench in turns with raw TCP: 0.55-0.65 x and
	// p50 2.0-2.6 ms when callers also read frames queued behind others,
	// 0.68 x and 1.3-1.7 ms with this rule, 0.60-0.65 x and 1.3-1.7 ms
	// before callers read at all).
	self := s.selfRead && c.role == roleNone && len(c.queue) == 1
	if self {
		s.r.b.selfConn = c // Do reads it: the same goroutine, after Submit
	}
	kick := !self && c.role == roleNone
	if kick {
		c.role = roleReceiver
	}
	c.mu.Unlock()
	if b := s.r.b; b.track {
		b.noteConn(c)
	}
	if kick {
		c.kick <- struct{}{}
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.e.cfg.IOTimeout))
	return true
}

// readRole is who reads a connection's responses. Nobody reads while
// nothing is outstanding; a caller of Do that sent its request itself,
// onto a connection with nothing else queued, reads the response itself
// (as a plain TCP client would: the netpoller wakes it, not another
// goroutine that then wakes it), and the receive goroutine reads for
// everyone else.
type readRole uint8

const (
	roleNone     readRole = iota
	roleCaller            // a Do caller, until its batch completes
	roleReceiver          // the receive goroutine, until the queue is empty
)

// receive is the connection's receive goroutine: it reads responses while
// it holds the reading role (handed over with a kick), and drains the
// queue of a failed connection that nobody else reads.
func (c *clientConn) receive() {
	defer c.e.wg.Done()
	for {
		select {
		case <-c.kick:
		case <-c.doneCh:
			c.mu.Lock()
			mine := c.role != roleCaller // a caller reading drains it itself
			if mine {
				c.role = roleReceiver
			}
			c.mu.Unlock()
			if mine {
				c.drain(nil)
			}
			return
		}
		for c.readOne() {
			c.mu.Lock()
			idle := len(c.queue) == 0
			if idle {
				c.role = roleNone
			}
			c.mu.Unlock()
			if idle {
				break
			}
		}
	}
}

// readFor reads responses on the calling goroutine, a Do caller's, until
// its batch b has completed (then hands what is still queued to the
// receive goroutine). It returns at once when someone else reads: they
// complete b's slice on c.
func (c *clientConn) readFor(b *Batch) {
	c.mu.Lock()
	if c.role != roleNone || c.drained || len(c.queue) == 0 {
		c.mu.Unlock()
		return
	}
	c.role = roleCaller
	c.mu.Unlock()
	for c.readOne() {
		c.e.stats.callerReads.Add(1)
		c.mu.Lock()
		if c.dead() {
			// The receive goroutine saw the caller reading and left the
			// draining to it (drain is idempotent).
			c.mu.Unlock()
			c.drain(nil)
			return
		}
		if len(c.queue) == 0 {
			c.role = roleNone
			c.mu.Unlock()
			return
		}
		if b.pending.Load() == 0 {
			c.role = roleReceiver
			c.mu.Unlock()
			c.kick <- struct{}{}
			return
		}
		c.mu.Unlock()
	}
}

// readOne reads one response and completes its slice; false when the
// connection failed (the reader has then drained it).
func (c *clientConn) readOne() bool {
	if c.rd.Buffered() == 0 {
		c.cr.max = c.headerCap()
	}
	_, rerr := io.ReadFull(c.rd, c.rhdr[:])
	c.cr.max = 0
	if err := rerr; err != nil {
		c.failIO(err, kverr.New(kverr.TransferFail, "", "transfer: connection to %s: receive: %v", c.p.addr, err))
		c.drain(nil)
		return false
	}
	c.mu.Lock()
	var s *slice
	if len(c.queue) > 0 {
		s = c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
	}
	c.mu.Unlock()
	var err error
	if s == nil {
		err = fmt.Errorf("%w: response with no request outstanding", errMalformed)
	} else {
		err = c.receiveOne(s)
	}
	if err != nil {
		kerr := kverr.New(kverr.TransferFail, "", "transfer: connection to %s: %v", c.p.addr, err)
		if s != nil {
			kerr = kverr.New(kverr.TransferFail, "", "transfer: %s segment %q offset %d on %s: %v", s.op, s.name, s.off, c.p.addr, err)
		}
		c.failIO(err, kerr)
		c.drain(s)
		return false
	}
	c.mu.Lock()
	if len(c.queue) == 0 {
		_ = c.nc.SetReadDeadline(time.Time{})
	} else {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.e.cfg.IOTimeout))
	}
	c.mu.Unlock()
	<-c.slots
	return true
}

// headerCapUnknown bounds the read of a response header when no request is
// queued (a reader reads only while some are; this is the bound should
// one ever read ahead of the sender): a run of small answers still comes
// in one read, a large READ payload costs at most this much copying
// through the read buffer.
const headerCapUnknown = 4 << 10

// capReader is the connection under the reader's read buffer; a read
// takes at most max bytes (0: no bound).
type capReader struct {
	r   io.Reader
	max int
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.max > 0 && len(p) > c.max {
		p = p[:c.max]
	}
	return c.r.Read(p)
}

// headerCap is how much the read of the next response header may take from
// the socket into the read buffer. Before a READ whose payload is read
// straight into the caller's buffer (receiveDirectMin or more) only the
// header: the buffer would otherwise take up to receiveBufSize of that
// payload, to be copied out again (13 % of a client's CPU on batches of
// 64 KiB gets). Before anything else, no bound: the answers that have
// arrived come in one read.
func (c *clientConn) headerCap() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		return headerCapUnknown
	}
	s := c.queue[0]
	first := len(s.buf)
	if s.ext != nil {
		first = len(s.ext[0].buf)
	}
	if (s.op == Read || s.op == opBatchRead) && first >= receiveDirectMin {
		return responseHeaderLen
	}
	return 0
}

// drain fails first (if any) and every queued slice of a dead connection.
func (c *clientConn) drain(first *slice) {
	c.mu.Lock()
	c.drained = true
	q := c.queue
	c.queue = nil
	c.mu.Unlock()
	if first != nil {
		q = append([]*slice{first}, q...)
	}
	for _, s := range q {
		err := c.err
		if s != first {
			err = kverr.New(kverr.TransferFail, "", "transfer: %s segment %q offset %d on %s: %v", s.op, s.name, s.off, c.p.addr, c.err)
		}
		c.connFailed(s, err)
	}
}

// readSumChunk bounds each socket read of readSum, so the CRC32C that
// follows it reads bytes still in the L2 cache: with unbounded reads a read
// returned up to a whole slice (1 MiB), which had left the cache before it
// was summed. 16 MiB gets over TCP, 4 callers, alternated four times
// (06:06 UTC, load average 6.5): 0.74-0.77 x raw TCP against 0.63-0.85
// (medians 0.755 against 0.665).
const readSumChunk = 64 << 10

// readSum fills buf from the connection and returns its CRC32C, computed on
// each chunk as it lands (still in cache), so a verifying reader needs no
// second pass over the bytes.
func (c *clientConn) readSum(buf []byte) (uint32, error) {
	var crc uint32
	for got := 0; got < len(buf); {
		n, err := c.rd.Read(buf[got:min(len(buf), got+readSumChunk)])
		if n > 0 {
			crc = crc32c.Update(crc, buf[got:got+n])
			got += n
		}
		if err != nil && got < len(buf) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
	}
	return crc, nil
}

// receiveOne handles the response to s, whose header is in c.rhdr; an
// error kills the connection (and leaves s to the caller).
func (c *clientConn) receiveOne(s *slice) error {
	h, err := parseResponseHeader(c.rhdr[:])
	if err != nil {
		return err
	}
	if h.id != s.id || h.op != s.op {
		return fmt.Errorf("%w: response id %d op %v, expected %d %v", errMalformed, h.id, h.op, s.id, s.op)
	}
	if s.ext != nil {
		return c.receiveBatch(s, h)
	}
	if h.status != 0 {
		if _, err := io.ReadFull(c.rd, c.msg[:h.msgLen]); err != nil {
			return fmt.Errorf("receive error message: %w", err)
		}
		s.finish(c.e, kverr.New(kverr.Code(h.status), "", "transfer: %s segment %q offset %d length %d on %s: %s", s.op, s.name, s.off, len(s.buf), c.p.addr, c.msg[:h.msgLen]))
		return nil
	}
	if h.msgLen != 0 {
		return fmt.Errorf("%w: OK response with a message", errMalformed)
	}
	if s.op == Read {
		if h.payloadLen != uint64(len(s.buf)) {
			return fmt.Errorf("%w: READ response of %d bytes, asked %d", errMalformed, h.payloadLen, len(s.buf))
		}
		// Straight into the caller's buffer.
		if s.r.wantSum() {
			crc, err := c.readSum(s.buf)
			if err != nil {
				return fmt.Errorf("receive payload: %w", err)
			}
			if s.r.crcs != nil {
				s.r.crcs[s.idx] = crc
			} else {
				s.r.crc = crc
			}
		} else if _, err := io.ReadFull(c.rd, s.buf); err != nil {
			return fmt.Errorf("receive payload: %w", err)
		}
	}
	s.finish(c.e, nil)
	return nil
}
