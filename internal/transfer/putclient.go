package transfer

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// putConns are the connections a caller sends direct-put frames on, per
// endpoint: one frame at a time each (a put is a request and its answer),
// kept idle between calls, so concurrent callers use as many connections
// and the serving side as many goroutines. They are not the TCP
// transport's pipelined connections: a direct put waits on the master
// inside the serving side, and must not hold up reads queued behind it.
type putConns struct {
	mu sync.Mutex
	// guarded by mu:
	idle   map[string][]*putConn
	closed bool
}

// maxIdlePutConns bounds the idle connections kept per endpoint.
const maxIdlePutConns = 64

type putConn struct {
	nc net.Conn
	sp *splicer // large payloads go by reference (splice.go); nil until one does
	// noSplice: this connection could not get a splicer; it writes.
	noSplice bool
	id       uint64
	hdr      []byte // header, ticket and descriptors of the frame being sent
	res      []byte // the answer: header and payload (or message)
}

func (p *putConns) take(ep string) *putConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.idle[ep]
	if len(cs) == 0 {
		return nil
	}
	c := cs[len(cs)-1]
	p.idle[ep] = cs[:len(cs)-1]
	return c
}

func (p *putConns) give(ep string, c *putConn) {
	p.mu.Lock()
	if !p.closed && len(p.idle[ep]) < maxIdlePutConns {
		if p.idle == nil {
			p.idle = map[string][]*putConn{}
		}
		p.idle[ep] = append(p.idle[ep], c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	c.close()
}

func (p *putConns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cs := range p.idle {
		for _, c := range cs {
			c.close()
		}
	}
	p.idle = nil
}

// PutDirect sends puts (the bytes of puts[i] in values[i]) to the data
// port at endpoint in one direct-put frame with ticket (a put ticket,
// internal/grant) and returns the node's answer: one error per put, in
// order (nil: committed). err is set instead when the frame as a whole
// failed: refused (PERMISSION_DENIED for the ticket, INVALID_PARAMS,
// UNAVAILABLE_IN_CURRENT_STATUS from a node that takes no direct puts)
// or TRANSFER_FAIL (connection), in which case any put may or may not
// have been committed; a put of a key already stored answers
// OBJECT_ALREADY_EXISTS, so a caller can retry through another path.
func (e *Engine) PutDirect(ctx context.Context, endpoint string, ticket []byte, puts []DirectPut, values [][]byte) ([]error, error) {
	total, err := checkPuts(puts, values)
	if err != nil {
		return nil, err
	}
	if len(ticket) < 1 || len(ticket) > 0xFFFF {
		return nil, kverr.New(kverr.InvalidParams, "", "direct put: ticket of %d bytes", len(ticket))
	}
	if isMemEndpoint(endpoint) {
		return nil, kverr.New(kverr.UnavailableInCurrentStatus, "", "direct put: %s is an in-memory endpoint", endpoint)
	}
	for attempt := 0; ; attempt++ {
		c, reused := e.dput.take(endpoint), true
		if c == nil {
			reused = false
			if c, err = e.dialPut(ctx, endpoint); err != nil {
				return nil, err
			}
		}
		errs, sent, err := c.do(ctx, e, ticket, puts, values, total)
		if err == nil {
			e.dput.give(endpoint, c)
			for i, pe := range errs {
				if pe == nil {
					e.stats.directPuts.Add(1)
					e.stats.tcpRequests.Add(1)
					e.stats.tcpBytes.Add(puts[i].Size)
				}
			}
			return errs, nil
		}
		var ke *kverr.Error
		if errors.As(err, &ke) { // a refusal: the connection is in step
			e.dput.give(endpoint, c)
			return nil, err
		}
		c.abort()
		// A pooled connection the peer closed while idle fails at once:
		// retried once on a fresh one. Any other failure is the caller's.
		if reused && attempt == 0 && !sent && ctx.Err() == nil {
			continue
		}
		return nil, kverr.New(kverr.TransferFail, "", "direct put to %s: %v", endpoint, err)
	}
}

func (e *Engine) dialPut(ctx context.Context, ep string) (*putConn, error) {
	dctx, cancel := context.WithTimeout(ctx, e.cfg.DialTimeout)
	defer cancel()
	nc, err := e.dialData(dctx, ep)
	if kverr.CodeOf(err) == kverr.TransferFail {
		return nil, err
	}
	if err != nil {
		return nil, kverr.New(kverr.TransferFail, "", "direct put: dial %s: %v", ep, err)
	}
	e.tuneConn(nc)
	e.stats.dialed.Add(1)
	return &putConn{nc: nc}, nil
}

// do sends one frame and reads its answer. sent reports whether the
// answer had started to arrive (a failure before it on a reused
// connection is a stale connection). A *kverr.Error is a refusal of the
// whole frame; any other error a connection failure.
func (c *putConn) do(ctx context.Context, e *Engine, ticket []byte, puts []DirectPut, values [][]byte, total uint64) (_ []error, sent bool, _ error) {
	c.id++
	need := requestHeaderLen + len(ticket) + putDescsLen(puts)
	if cap(c.hdr) < need {
		c.hdr = make([]byte, 0, need)
	}
	b := c.hdr[:requestHeaderLen]
	putRequestHeader(b, reqHeader{op: opPut, nameLen: len(ticket), id: c.id, bucket: uint64(len(puts)),
		offset: uint64(need - requestHeaderLen - len(ticket)), length: total})
	b = append(b, ticket...)
	b = appendPutDescs(b, puts)
	iov := make(net.Buffers, 0, 1+len(values))
	iov = append(iov, b)
	for _, v := range values {
		iov = append(iov, v)
	}
	deadline := time.Now().Add(e.cfg.IOTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.nc.SetDeadline(deadline)
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Now()) })
		defer stop()
	}
	if err := c.send(e, iov, total); err != nil {
		return nil, false, err
	}
	// The answer in one read when every put succeeded (the header and K
	// 4-byte results): one syscall, not two. Nothing follows the answer
	// on this connection (one frame at a time), so a read never takes
	// bytes of another.
	short := int(responseHeaderLen) + len(puts)*putResultFixed
	if cap(c.res) < short {
		c.res = make([]byte, short)
	}
	n, err := io.ReadAtLeast(c.nc, c.res[:short], responseHeaderLen)
	if err != nil {
		return nil, n > 0, err
	}
	h, err := parseResponseHeader(c.res[:n])
	if err != nil {
		return nil, true, err
	}
	if h.op != opPut || h.id != c.id {
		return nil, true, errors.New("direct put: answer out of step")
	}
	body := h.payloadLen
	if h.status != 0 {
		body = uint64(h.msgLen) // an error answer carries its message only
	} else if h.msgLen != 0 || h.payloadLen > uint64(len(puts))*(putResultFixed+maxMessageLen) {
		return nil, true, errors.New("direct put: malformed answer")
	}
	alen := int(responseHeaderLen) + int(body)
	if n > alen {
		return nil, true, errors.New("direct put: answer longer than it says")
	}
	if cap(c.res) < alen {
		c.res = append(make([]byte, 0, alen), c.res[:n]...)
	}
	in := c.res[:alen]
	if _, err := io.ReadFull(c.nc, in[n:]); err != nil {
		return nil, true, err
	}
	if h.status != 0 {
		return nil, true, kverr.New(kverr.Code(h.status), "", "direct put to %s: %s", c.nc.RemoteAddr(), in[responseHeaderLen:])
	}
	res := in[responseHeaderLen:]
	errs, err := parsePutResults(res, puts)
	if err != nil {
		return nil, true, err
	}
	_ = c.nc.SetDeadline(time.Time{})
	return errs, true, nil
}

// send writes a frame: its header (iov[0]) and payload (the rest). A
// payload of spliceMin to spliceMax bytes in values of at least spliceMin
// each goes by reference (splice.go). Frames of many small values are
// written: 16 x 64 KiB with 4 callers measured 0.87-1.03 x raw TCP
// written against 0.59-0.72 spliced (the node reads each small value
// straight into its extent, and spliced pages cost it more to read).
func (c *putConn) send(e *Engine, iov net.Buffers, total uint64) error {
	splice := total >= spliceMin && total <= spliceMax
	for _, v := range iov[1:] {
		splice = splice && len(v) >= spliceMin
	}
	if splice && c.sp == nil && !c.noSplice {
		sp, err := newSplicer(c.nc)
		c.sp, c.noSplice = sp, err != nil
	}
	if !splice || c.sp == nil {
		_, err := iov.WriteTo(c.nc)
		return err
	}
	if _, err := c.nc.Write(iov[0]); err != nil {
		return err
	}
	if err := c.sp.send(iov[1:]); err != nil {
		return err
	}
	e.stats.splicedBytes.Add(total)
	return nil
}

// close closes an idle connection (every frame it sent was answered).
func (c *putConn) close() {
	if c.sp != nil {
		c.sp.close()
	}
	c.nc.Close()
}

// abort closes the connection after a failure. One that sent bytes by
// reference is reset: the kernel drops what it still had queued rather
// than sending pages the caller may reuse once the put has failed.
func (c *putConn) abort() {
	if tc, ok := c.nc.(*net.TCPConn); ok && c.sp != nil {
		_ = tc.SetLinger(0)
	}
	c.close()
}

// Route names the transport a request for segment at endpoint (offering
// offer) would take now: "local", "shm", "rdma", "mem" or "tcp" ("" when
// none reaches it). A caller picks direct puts only where it says "tcp":
// elsewhere the bytes do not cross a socket and the classic path costs no
// round trip per byte. Asking may start a shared-memory discovery of the
// peer in the background, as a request would.
func (e *Engine) Route(endpoint, segment string, offer SegmentOffer) string {
	if _, ok := e.Segment(segment); ok {
		return "local"
	}
	r := &reqState{req: Request{Endpoint: endpoint, Segment: segment, Offer: offer}}
	for _, t := range e.routes {
		if t.reaches(r) {
			return t.Name()
		}
	}
	return ""
}
